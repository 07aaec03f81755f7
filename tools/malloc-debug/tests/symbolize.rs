//! `malloc-debug symbolize`: source locations for the frames of a saved log (a host run's
//! stderr, logcat text from a device), from the module's own DWARF or its separate debug file.

mod common;
use common::*;
use std::path::{Path, PathBuf};
use std::process::Stdio;

/// A raw log (frames as the library writes them) of `prog leak`.
fn raw_log(prog: &Path) -> String {
    let out = cli()
        .args(["run", "--no-symbolize", "--"])
        .arg(prog)
        .arg("leak")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    stderr(&out)
}

fn symbolize(args: &[&str], input: &str) -> String {
    use std::io::Write;
    let mut child = cli()
        .arg("symbolize")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    ok(child.wait_with_output().unwrap())
}

/// The default options' report of `buggy leak` (leak_unreachable: its kind, then the summary).
const LEAK: &str = "+++ NAME leaked block of size 20 at 0xADDR (leak 1 of 1, definitely lost)\n\
                    Backtrace at time of allocation:\n#01 make at buggy.c:8\n#02 main at buggy.c:14\n\
                    leak summary: definitely lost: 20 bytes in 1 blocks, indirectly lost: 0 bytes \
                    in 0 blocks, still reachable: 0 bytes in 0 blocks, suppressed: 0 bytes in 0 \
                    blocks\n";

/// Symbolizing a saved log gives what `run` shows live; every other byte is unchanged.
#[test]
fn a_saved_host_log_gets_what_run_shows() {
    let log = raw_log(buggy());
    let file = tmp_dir("saved-log").join("log.txt");
    std::fs::write(&file, &log).unwrap();
    let text = ok(cli().arg("symbolize").arg(&file).output().unwrap());
    assert_eq!(symbolize(&[], &log), text);
    assert_eq!(symbolize(&["-"], &log), text);
    let live = cli()
        .args(["run", "--"])
        .arg(buggy())
        .arg("leak")
        .output()
        .unwrap();
    assert_eq!(
        normalize(&text, buggy()),
        normalize(&stderr(&live), buggy())
    );
    let expected = format!(
        "{}{}",
        "malloc-debug: using --options \"backtrace guard free_track leak_track leak_unreachable error_backtraces\" \
         (the default: overflow, use after free, double free, lost blocks at exit, with \
         backtraces)\n",
        LEAK.replace("NAME", "buggy")
    );
    assert_eq!(normalize(&text, buggy()), expected);
    // Line for line: the input line, then (frames with a source file only) the location.
    let (inp, outp): (Vec<&str>, Vec<&str>) = (log.lines().collect(), text.lines().collect());
    assert_eq!(inp.len(), outp.len());
    let mut added = 0;
    for (i, o) in inp.iter().zip(&outp) {
        assert!(o.starts_with(i), "{o}");
        if o.len() > i.len() {
            assert!(i.contains(" pc "), "{o}");
            assert!(o[i.len()..].starts_with("  "), "{o}");
            added += 1;
        }
    }
    // malloc in the front, make and main in the program; libc and _start have no lines.
    assert_eq!(added, 3, "{text}");
}

/// Device logcat text (any layout) with `--symbols DIR`, a tree mirroring the device, as
/// $ANDROID_PRODUCT_OUT/symbols is.
#[test]
fn logcat_text_from_a_device_with_a_symbols_tree() {
    let log = raw_log(buggy());
    let prog = buggy().to_str().unwrap();
    let dir = tmp_dir("symbols-tree");
    std::fs::create_dir_all(dir.join("system/bin")).unwrap();
    std::fs::copy(buggy(), dir.join("system/bin/buggy")).unwrap();
    let frame = log
        .lines()
        .find(|l| l.contains(" #01 ") && l.contains(prog))
        .unwrap();
    let tail = &frame[frame.find("#01").unwrap()..].replace(prog, "/system/bin/buggy");
    let logcat = format!(
        "--------- beginning of main\n\
         11-26 06:23:53.834  1234  1234 E malloc_debug:           {tail}\n\
         E/malloc_debug( 1234):           {tail}\n\
         E/malloc_debug( 1234):           #02  pc 0000000000000001  /system/lib64/libc.so\n"
    );
    let dir_s = dir.to_str().unwrap();
    let loc = format!(
        "  make at {}",
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/programs/buggy.c:8")
            .display()
    );
    assert_eq!(
        symbolize(&["--symbols", dir_s], &logcat),
        format!(
            "--------- beginning of main\n\
             11-26 06:23:53.834  1234  1234 E malloc_debug:           {tail}{loc}\n\
             E/malloc_debug( 1234):           {tail}{loc}\n\
             E/malloc_debug( 1234):           #02  pc 0000000000000001  /system/lib64/libc.so\n"
        )
    );
    // Without the tree the device path means nothing here: the text passes through.
    assert_eq!(symbolize(&[], &logcat), logcat);
}

fn tool(program: &str, args: &[&Path]) {
    let status = std::process::Command::new(program)
        .args(args)
        .status()
        .unwrap();
    assert!(status.success(), "{program} {args:?}");
}

/// The stripped program and its debug file (objcopy --only-keep-debug).
fn split(name: &str) -> (PathBuf, PathBuf, PathBuf) {
    let dir = tmp_dir(name);
    let stripped = dir.join("buggy");
    let debug = dir.join("buggy.debug");
    tool(
        "objcopy",
        &[Path::new("--only-keep-debug"), buggy(), &debug],
    );
    tool(
        "strip",
        &[Path::new("-g"), buggy(), Path::new("-o"), &stripped],
    );
    (dir, stripped, debug)
}

fn build_id(file: &Path) -> String {
    let out = std::process::Command::new("readelf")
        .arg("-n")
        .arg(file)
        .output()
        .unwrap();
    let text = stdout(&out);
    let line = text
        .lines()
        .find(|l| l.contains("Build ID: "))
        .expect("build id");
    line.split("Build ID: ").nth(1).unwrap().trim().to_string()
}

/// Separate debug info, found as gdb finds it: by .gnu_debuglink next to the module, by build id
/// under --symbols DIR/.build-id; a module without any keeps its frame lines as they are.
#[test]
fn separate_debug_info() {
    let want = LEAK.replace("NAME", "buggy");
    // Stripped, no debug file anywhere: the program's frames get nothing.
    let (_, stripped, debug) = split("debug-none");
    let log = raw_log(&stripped);
    let lines = |t: &str, prog: &Path| {
        let n = normalize(t, prog);
        n.lines()
            .skip(1)
            .map(|l| format!("{l}\n"))
            .collect::<String>()
    };
    let unresolved = LEAK
        .replace("NAME", "buggy")
        .replace("#01 make at buggy.c:8\n#02 main at buggy.c:14\n", "");
    assert_eq!(lines(&symbolize(&[], &log), &stripped), unresolved);

    // .gnu_debuglink: the debug file next to the module (its CRC checked).
    tool(
        "objcopy",
        &[
            Path::new(&format!("--add-gnu-debuglink={}", debug.display())),
            &stripped,
        ],
    );
    let log = raw_log(&stripped);
    assert_eq!(lines(&symbolize(&[], &log), &stripped), want);
    // Another program's debug file under that name (another CRC) is not used.
    tool(
        "objcopy",
        &[Path::new("--only-keep-debug"), leaky(), &debug],
    );
    assert_eq!(lines(&symbolize(&[], &log), &stripped), unresolved);

    // By build id under --symbols DIR.
    let (dir, stripped, debug) = split("debug-build-id");
    let id = build_id(&stripped);
    let syms = dir.join("syms");
    let target = syms.join(format!(".build-id/{}/{}.debug", &id[..2], &id[2..]));
    std::fs::create_dir_all(target.parent().unwrap()).unwrap();
    std::fs::rename(&debug, &target).unwrap();
    let log = raw_log(&stripped);
    assert_eq!(lines(&symbolize(&[], &log), &stripped), unresolved);
    let with = symbolize(&["--symbols", syms.to_str().unwrap()], &log);
    assert_eq!(lines(&with, &stripped), want);
    // `run` finds it the same way.
    let live = cli()
        .args(["run", "--symbols"])
        .arg(&syms)
        .arg("--")
        .arg(&stripped)
        .arg("leak")
        .output()
        .unwrap();
    assert_eq!(lines(&stderr(&live), &stripped), want);
}
