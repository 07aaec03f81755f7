//! Helpers shared by the integration tests: where the built libraries are, compiling C/C++ test
//! programs, running programs under the glibc front, and parsing the host log layout.
//!
//! Every integration test file includes this with `mod common;`; not every file uses every
//! helper.
#![allow(dead_code)]

use std::collections::hash_map::DefaultHasher;
use std::ffi::OsStr;
use std::fs;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

pub const LIB_NAME: &str = "libc_malloc_debug.so";
pub const FRONT_NAME: &str = "libmalloc_debug_front.so";

/// The directory holding the built `libc_malloc_debug.so` and `libmalloc_debug_front.so`
/// (`target/release` for `cargo test --release`). Panics with instructions when they are missing.
pub fn lib_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(find_lib_dir).clone()
}

fn find_lib_dir() -> PathBuf {
    let mut candidates = Vec::new();
    if let Some(dir) = std::env::var_os("MALLOC_DEBUG_LIB_DIR") {
        candidates.push(PathBuf::from(dir));
    }
    // The test executable is target/<profile>/deps/<name>-<hash>.
    if let Ok(exe) = std::env::current_exe()
        && let Some(profile_dir) = exe.parent().and_then(Path::parent)
    {
        candidates.push(profile_dir.to_path_buf());
    }
    let target_dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest_dir().join("target"));
    candidates.push(target_dir.join("release"));
    for dir in &candidates {
        if dir.join(LIB_NAME).is_file() {
            return dir.canonicalize().unwrap_or_else(|_| dir.clone());
        }
    }
    panic!(
        "{LIB_NAME} not found (looked in {}): run `cargo build --release` first",
        candidates
            .iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
}

/// The crate root (where Cargo.toml, `ffi/` and `tests/` are).
pub fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `tests/programs`, the sources of the C/C++ test programs.
pub fn programs_dir() -> PathBuf {
    manifest_dir().join("tests").join("programs")
}

/// `ffi/include`, where `malloc_debug.h` is.
pub fn include_dir() -> PathBuf {
    manifest_dir().join("ffi").join("include")
}

/// Absolute path of the built glibc front.
pub fn front_path() -> PathBuf {
    let path = lib_dir().join(FRONT_NAME);
    assert!(
        path.is_file(),
        "{} not found: run `cargo build --release` first",
        path.display()
    );
    path
}

/// Absolute path of the built `libc_malloc_debug.so`.
pub fn lib_path() -> PathBuf {
    lib_dir().join(LIB_NAME)
}

/// Compiles a C or C++ source (C++ when it ends in `.cc`/`.cpp`/`.cxx`) into
/// `<lib_dir>/test-programs/<hash>/<name>` and returns that path. The file name is exactly `name`,
/// so it is also the program name in messages. `extra_args` go after the default ones
/// (`-O1 -g -Wall -Wextra -pthread -I ffi/include`); pass `-shared -fPIC` for a library. Libraries
/// `-ldl -pthread` are always linked. The result is cached by source contents, arguments and
/// compiler; concurrent callers are safe.
pub fn compile_c(name: &str, source: impl AsRef<Path>, extra_args: &[&str]) -> PathBuf {
    let source = source.as_ref();
    let source = if source.is_absolute() {
        source.to_path_buf()
    } else {
        manifest_dir().join(source)
    };
    let is_cxx = matches!(
        source.extension().and_then(OsStr::to_str),
        Some("cc") | Some("cpp") | Some("cxx")
    );
    let compiler = if is_cxx {
        std::env::var("CXX").unwrap_or_else(|_| "c++".to_string())
    } else {
        std::env::var("CC").unwrap_or_else(|_| "cc".to_string())
    };
    let contents = fs::read(&source)
        .unwrap_or_else(|e| panic!("cannot read test program {}: {e}", source.display()));
    let header = fs::read(include_dir().join("malloc_debug.h")).unwrap_or_default();
    // The shared headers of the drivers and programs are part of what they are built from.
    let shared_headers: Vec<Vec<u8>> = ["tests/abi/bionic.h", "tests/programs/call_sites.h"]
        .iter()
        .map(|h| fs::read(manifest_dir().join(h)).unwrap_or_default())
        .collect();

    let mut hasher = DefaultHasher::new();
    (
        name,
        &contents,
        &header,
        &shared_headers,
        extra_args,
        &compiler,
    )
        .hash(&mut hasher);
    let dir = lib_dir()
        .join("test-programs")
        .join(format!("{:016x}", hasher.finish()));
    let out = dir.join(name);
    if out.is_file() {
        return out;
    }
    fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));

    let tmp = dir.join(format!(
        ".{name}.tmp{}.{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let mut cmd = Command::new(&compiler);
    cmd.args(["-O1", "-g", "-Wall", "-Wextra", "-pthread"])
        .arg("-I")
        .arg(include_dir())
        .args(extra_args)
        .arg("-o")
        .arg(&tmp)
        .arg(&source)
        .args(["-ldl", "-pthread"]);
    let output = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {compiler}: {e}"));
    assert!(
        output.status.success(),
        "compiling {} failed ({cmd:?}):\n{}{}",
        source.display(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    // Tests compile concurrently: the first binary in place stays (replacing it would delete the
    // file under a running test, whose maps would then name "(deleted)").
    match fs::hard_link(&tmp, &out) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => panic!("cannot link {}: {e}", out.display()),
    }
    let _ = fs::remove_file(&tmp);
    out
}

/// A command for `program` with the malloc-debug variables of the caller's environment removed
/// (so that tests are hermetic).
pub fn clean_command(program: impl AsRef<OsStr>) -> Command {
    let mut cmd = Command::new(program);
    for var in [
        "LD_PRELOAD",
        "LIBC_DEBUG_MALLOC_OPTIONS",
        "LIBC_DEBUG_MALLOC_PROGRAM",
        "LIBC_DEBUG_MALLOC_LIB",
    ] {
        cmd.env_remove(var);
    }
    cmd.stdin(Stdio::null());
    cmd
}

/// A command that runs `program args` with `LD_PRELOAD` = the front and
/// `LIBC_DEBUG_MALLOC_OPTIONS` = `options` (unset when `None`), plus `extra_env`.
pub fn front_command(
    program: impl AsRef<OsStr>,
    args: &[&str],
    options: Option<&str>,
    extra_env: &[(&str, &str)],
) -> Command {
    let mut cmd = clean_command(program);
    cmd.args(args).env("LD_PRELOAD", front_path());
    if let Some(options) = options {
        cmd.env("LIBC_DEBUG_MALLOC_OPTIONS", options);
    }
    for (key, value) in extra_env {
        cmd.env(key, value);
    }
    cmd
}

/// Runs `program args` under the front (see [`front_command`]) and waits for it.
pub fn run_under_front(
    program: impl AsRef<OsStr>,
    args: &[&str],
    options: Option<&str>,
    extra_env: &[(&str, &str)],
) -> Output {
    let mut cmd = front_command(program, args, options, extra_env);
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"))
}

/// Runs `program args` without the front (the reference run).
pub fn run_plain(program: impl AsRef<OsStr>, args: &[&str]) -> Output {
    let mut cmd = clean_command(program);
    cmd.args(args);
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"))
}

/// One line of the host log: `MM-DD HH:MM:SS.mmm  PID  TID P tag     : message`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogLine {
    pub pid: u32,
    pub tid: u32,
    pub prio: char,
    pub tag: String,
    pub msg: String,
}

/// Parses one line in the logcat "threadtime" layout; `None` if it is not one.
pub fn parse_log_line(line: &str) -> Option<LogLine> {
    let bytes = line.as_bytes();
    // "MM-DD HH:MM:SS.mmm"
    const STAMP: &[u8] = b"00-00 00:00:00.000";
    if bytes.len() < STAMP.len() + 1 {
        return None;
    }
    for (b, pattern) in bytes.iter().zip(STAMP) {
        let ok = if *pattern == b'0' {
            b.is_ascii_digit()
        } else {
            b == pattern
        };
        if !ok {
            return None;
        }
    }
    let rest = line.get(STAMP.len()..)?;
    let (pid, rest) = take_number(rest)?;
    let (tid, rest) = take_number(rest)?;
    let rest = rest.strip_prefix(' ')?;
    let mut chars = rest.chars();
    let prio = chars.next()?;
    if !"VDIWEF".contains(prio) {
        return None;
    }
    let rest = chars.as_str().strip_prefix(' ')?;
    let colon = rest.find(": ")?;
    let tag = rest[..colon].trim_end();
    if tag.is_empty() || tag.contains(' ') {
        return None;
    }
    Some(LogLine {
        pid,
        tid,
        prio,
        tag: tag.to_string(),
        msg: rest[colon + 2..].to_string(),
    })
}

/// Leading spaces, then decimal digits.
fn take_number(s: &str) -> Option<(u32, &str)> {
    let s = s.strip_prefix(' ')?.trim_start_matches(' ');
    let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let n = s[..end].parse().ok()?;
    Some((n, &s[end..]))
}

/// Every log line of a process's stderr (other lines are skipped; see [`non_log_lines`]).
pub fn log_lines(stderr: &[u8]) -> Vec<LogLine> {
    String::from_utf8_lossy(stderr)
        .lines()
        .filter_map(parse_log_line)
        .collect()
}

/// The lines of stderr that are not in the log layout.
pub fn non_log_lines(stderr: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(stderr)
        .lines()
        .filter(|l| parse_log_line(l).is_none())
        .map(str::to_string)
        .collect()
}

/// The messages logged with `tag`, in order.
pub fn messages_with_tag(output: &Output, tag: &str) -> Vec<String> {
    log_lines(&output.stderr)
        .into_iter()
        .filter(|l| l.tag == tag)
        .map(|l| l.msg)
        .collect()
}

/// The messages the library logged (tag `malloc_debug`), in order.
pub fn malloc_debug_messages(output: &Output) -> Vec<String> {
    messages_with_tag(output, "malloc_debug")
}

/// The messages the front logged as libc (tag `libc`), in order.
pub fn libc_messages(output: &Output) -> Vec<String> {
    messages_with_tag(output, "libc")
}

/// stdout as text.
pub fn stdout_of(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// stderr as text.
pub fn stderr_of(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Panics with the whole output unless the process exited with `code`.
pub fn assert_exit_code(output: &Output, code: i32) {
    assert_eq!(
        output.status.code(),
        Some(code),
        "unexpected exit status {:?}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        stdout_of(output),
        stderr_of(output)
    );
}

/// The program name the library and the front print for `path` (its file name).
pub fn progname(path: impl AsRef<Path>) -> String {
    path.as_ref()
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// A fresh, empty directory for one test's files: `<target>/release/test-tmp/<name>-<pid>`.
pub fn scratch_dir(name: &str) -> PathBuf {
    let dir = lib_dir()
        .join("test-tmp")
        .join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The frame lines among a report's messages, each reduced to `<file name> (<function>)`.
pub fn frames_of(messages: &[String]) -> Vec<String> {
    messages
        .iter()
        .filter_map(|m| m.trim_start().strip_prefix('#'))
        .map(|frame| {
            let f: Vec<&str> = frame.split_whitespace().collect();
            let file = f.get(3).map_or("", |p| p.rsplit('/').next().unwrap());
            let func = f
                .get(4)
                .map_or("", |s| s.trim_start_matches('(').split('+').next().unwrap());
            format!("{file} ({func})")
        })
        .collect()
}

/// Waits for `child` to exit, and kills it once `limit` has passed: false then. A hang is what
/// such tests guard against; it fails them instead of stalling the whole run.
pub fn wait_or_kill(child: &mut std::process::Child, limit: std::time::Duration) -> bool {
    let deadline = std::time::Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    true
}
