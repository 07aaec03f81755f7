//! Helpers shared by the CLI's integration tests: the built CLI, the library build it runs
//! programs with, and a real v1.2 dump made by running tests/programs/leaky.c under the front.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

pub fn cli() -> Command {
    Command::new(env!("CARGO_BIN_EXE_malloc-debug"))
}

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// target/release of the workspace, holding libc_malloc_debug.so and the front.
pub fn release_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_BIN_EXE_malloc-debug"))
        .parent()
        .expect("bin dir")
        .to_path_buf();
    for so in ["libc_malloc_debug.so", "libmalloc_debug_front.so"] {
        assert!(
            dir.join(so).is_file(),
            "{} missing: run `cargo build --release` at the workspace root first",
            dir.join(so).display()
        );
    }
    dir
}

pub fn tmp_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("malloc-debug-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create tmp dir");
    dir
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Asserts success and returns stdout.
pub fn ok(o: Output) -> String {
    assert!(
        o.status.success(),
        "failed ({}):\n--- stdout\n{}\n--- stderr\n{}",
        o.status,
        stdout(&o),
        stderr(&o)
    );
    stdout(&o)
}

/// tests/programs/NAME.c built with debug info into a fresh directory.
pub fn compile(name: &str) -> PathBuf {
    compile_source(
        name,
        &Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/programs/{name}.c")),
    )
}

/// `compile` for a source elsewhere (the workspace's own test programs).
pub fn compile_source(name: &str, src: &Path) -> PathBuf {
    let dir = tmp_dir(&format!("{name}-bin"));
    let out = dir.join(name);
    let status = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-g", "-O1", "-fno-omit-frame-pointer", "-pthread", "-o"])
        .arg(&out)
        .arg(src)
        .arg("-ldl")
        .status()
        .expect("run cc");
    assert!(status.success(), "cc {} failed", src.display());
    out
}

/// tests/programs/leaky.c built with debug info (once per test binary).
pub fn leaky() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| compile("leaky"))
}

/// Runs leaky (with `nodes` small allocations) under `malloc-debug run` with an exit-time dump;
/// returns the dump's path and the run's output.
pub fn real_dump(name: &str, nodes: u32) -> (PathBuf, Output) {
    let dir = tmp_dir(name);
    let prefix = dir.join("heap");
    let out = cli()
        .arg("run")
        .arg("--lib")
        .arg(release_dir().join("libc_malloc_debug.so"))
        .arg("--options")
        .arg(format!(
            "backtrace leak_track backtrace_dump_on_exit backtrace_dump_prefix={}",
            prefix.display()
        ))
        .arg("--")
        .arg(leaky())
        .arg(nodes.to_string())
        .output()
        .expect("run malloc-debug run");
    let dump = std::fs::read_dir(&dir)
        .expect("read dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.to_string_lossy().ends_with(".exit.txt"))
        .unwrap_or_else(|| panic!("no exit dump in {}:\n{}", dir.display(), stderr(&out)));
    (dump, out)
}

/// The default real dump (10 small nodes), made once per test binary.
pub fn dump10() -> &'static Path {
    static DUMP: OnceLock<PathBuf> = OnceLock::new();
    DUMP.get_or_init(|| real_dump("dump10", 10).0)
}

/// tests/programs/buggy.c built with debug info (once per test binary).
pub fn buggy() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| compile("buggy"))
}

/// The library's log with the parts that vary from run to run taken out: the logcat prefix
/// (time, pid, tid), heap addresses, and every frame outside `prog` (libc, the front; their pcs
/// depend on the system). A frame of `prog` keeps its number and the location `run` added, with
/// the source file's directory dropped.
pub fn normalize(log: &str, prog: &Path) -> String {
    let prog = prog.to_str().unwrap();
    let mut out = String::new();
    for line in log.lines() {
        let line = match line.find(" malloc_debug: ") {
            Some(i) => &line[i + " malloc_debug: ".len()..],
            None => line,
        };
        if let Some(pc) = line.find("  pc ") {
            let number = line[..pc].trim();
            let Some(rest) = line.split_once(&format!("  {prog} ")).map(|(_, r)| r) else {
                continue;
            };
            let Some((_, location)) = rest.split_once(")  ") else {
                continue;
            };
            let location = match location.rsplit_once(" at ") {
                Some((f, path)) => format!("{f} at {}", path.rsplit('/').next().unwrap()),
                None => location.to_string(),
            };
            out.push_str(&format!("{number} {location}\n"));
            continue;
        }
        let mut rest = line;
        while let Some(i) = rest.find("0x") {
            let hex = rest[i + 2..]
                .bytes()
                .take_while(u8::is_ascii_hexdigit)
                .count();
            out.push_str(&rest[..i]);
            out.push_str(if hex > 4 {
                "0xADDR"
            } else {
                &rest[i..i + 2 + hex]
            });
            rest = &rest[i + 2 + hex..];
        }
        out.push_str(rest);
        out.push('\n');
    }
    out
}
