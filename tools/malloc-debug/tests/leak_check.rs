//! `malloc-debug run --suppressions FILE --log-file FILE --error-exitcode N` (docs/tools.md
//! "Leak checking on Linux") on the workspace's tests/programs/leak_kinds.c: three definitely
//! lost blocks, two still reachable ones.

mod common;
use common::*;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

fn leak_kinds() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let out = tmp_dir("leak_kinds-bin").join("leak_kinds");
        let src = workspace_root().join("tests/programs/leak_kinds.c");
        let status = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
            .args(["-g", "-O1", "-o"])
            .arg(&out)
            .arg(&src)
            .status()
            .expect("run cc");
        assert!(status.success(), "cc {} failed", src.display());
        out
    })
}

fn run(flags: &[&str], args: &[&str]) -> Output {
    cli()
        .arg("run")
        .arg("--lib")
        .arg(release_dir().join("libc_malloc_debug.so"))
        .args(flags)
        .arg("--")
        .arg(leak_kinds())
        .args(args)
        .env_remove("LIBC_DEBUG_MALLOC_OPTIONS")
        .output()
        .expect("run malloc-debug run")
}

/// The library's messages (the part after `malloc_debug: `), in order.
fn messages(log: &str) -> Vec<&str> {
    log.lines()
        .filter_map(|l| l.split_once(" malloc_debug: ").map(|(_, m)| m))
        .collect()
}

const LOST: &str = "leak summary: definitely lost: 600 bytes in 3 blocks, indirectly lost: 0 \
                    bytes in 0 blocks, still reachable: 40 bytes in 2 blocks, suppressed: 0 \
                    bytes in 0 blocks";
const SUPPRESSED: &str = "leak summary: definitely lost: 0 bytes in 0 blocks, indirectly lost: \
                          0 bytes in 0 blocks, still reachable: 40 bytes in 2 blocks, \
                          suppressed: 600 bytes in 3 blocks";

#[test]
fn leaks_fail_the_run_and_suppressed_ones_do_not() {
    let opts = ["--options", "backtrace leak_unreachable"];
    let out = run(
        &[&opts[..], &["--error-exitcode", "23"]].concat(),
        &["simple"],
    );
    assert_eq!(out.status.code(), Some(23), "{}", stderr(&out));
    let log = stderr(&out);
    let m = messages(&log);
    assert_eq!(
        m.iter().filter(|m| m.starts_with("+++ ")).count(),
        3,
        "{log}"
    );
    assert_eq!(m.last(), Some(&LOST));

    let dir = tmp_dir("leak_check_supp");
    let supp = dir.join("ci.supp");
    std::fs::write(&supp, "# known leaks of the test program\nleak:^drop$\n").unwrap();
    let out = run(
        &[
            &opts[..],
            &["--error-exitcode", "23", "--suppressions"],
            &[supp.to_str().unwrap()],
        ]
        .concat(),
        &["simple"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(messages(&stderr(&out)), [SUPPRESSED]);

    // Without --error-exitcode the program's status is passed through, leaks or not.
    let out = run(&opts, &["simple"]);
    assert_eq!(out.status.code(), Some(0));
    // No leak: the program's own status.
    let out = run(
        &[&opts[..], &["--error-exitcode", "23"]].concat(),
        &["clean", "5"],
    );
    assert_eq!(out.status.code(), Some(5));
}

/// The Linux workflow with `run`'s default options (lost blocks only): the gate fails on the
/// three lost blocks, and a rule naming their source file (not a function or module name)
/// suppresses them.
#[test]
fn the_default_options_gate_and_a_source_file_rule_suppresses() {
    let out = run(&["--error-exitcode", "23"], &["simple"]);
    assert_eq!(out.status.code(), Some(23), "{}", stderr(&out));
    let log = stderr(&out);
    assert!(
        log.starts_with(
            "malloc-debug: using --options \"backtrace guard free_track leak_track \
                         leak_unreachable error_backtraces\""
        ),
        "{log}"
    );
    assert_eq!(messages(&log).last(), Some(&LOST));
    let supp = tmp_dir("leak_check_file_supp").join("file.supp");
    std::fs::write(&supp, "leak:tests/programs/leak_kinds.c$\n").unwrap();
    let out = run(
        &[
            "--error-exitcode",
            "23",
            "--suppressions",
            supp.to_str().unwrap(),
        ],
        &["simple"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(messages(&stderr(&out)), [SUPPRESSED]);
}

#[test]
fn an_error_fails_the_run() {
    let out = run(
        &["--options", "guard", "--error-exitcode", "9"],
        &["overflow"],
    );
    assert_eq!(out.status.code(), Some(9));
    assert!(
        messages(&stderr(&out)).contains(&"  allocation[10] = 0x00 (expected 0xbb)"),
        "{}",
        stderr(&out)
    );
    let out = run(&["--options", "guard"], &["overflow"]);
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn the_reference_report_gates_too() {
    // leak_track without the extension lists every live block: five leaks.
    let out = run(
        &["--options", "leak_track", "--error-exitcode", "1"],
        &["simple"],
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(messages(&stderr(&out)).len(), 5);
}

#[test]
fn log_file_keeps_the_program_output_its_own() {
    let dir = tmp_dir("leak_check_log");
    let log = dir.join("md.log");
    let theirs = dir.join("theirs.txt");
    let bare = Command::new(leak_kinds())
        .args(["io", theirs.to_str().unwrap()])
        .output()
        .unwrap();
    let out = run(
        &[
            "--options",
            "backtrace leak_unreachable",
            "--log-file",
            log.to_str().unwrap(),
            "--error-exitcode",
            "3",
        ],
        &["io", theirs.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(out.stdout, bare.stdout);
    assert_eq!(out.stderr, bare.stderr);
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(messages(&text).last(), Some(&LOST));
    assert_eq!(std::fs::read_to_string(&theirs).unwrap(), "mine\n");
}

#[test]
fn bad_flags_are_errors() {
    for (flags, message) in [
        (
            &["--error-exitcode", "0"][..],
            "malloc-debug: --error-exitcode: expected 1 to 255, got 0\n",
        ),
        (
            &["--error-exitcode", "256"][..],
            "malloc-debug: --error-exitcode: expected 1 to 255, got 256\n",
        ),
        (
            &["--error-exitcode", "x"][..],
            "malloc-debug: --error-exitcode: expected a number, got \"x\"\n",
        ),
        (
            &["--suppressions", "/nonexistent/x.supp"][..],
            "malloc-debug: --suppressions /nonexistent/x.supp: no such file\n",
        ),
    ] {
        let out = run(flags, &["clean"]);
        assert_eq!(out.status.code(), Some(2), "{flags:?}");
        assert_eq!(stderr(&out), message);
    }
}

#[test]
fn signals_pass_through_with_error_exitcode() {
    use std::os::unix::process::ExitStatusExt;
    let out = cli()
        .arg("run")
        .arg("--lib")
        .arg(release_dir().join("libc_malloc_debug.so"))
        .args([
            "--options",
            "leak_unreachable",
            "--error-exitcode",
            "7",
            "--",
            "sh",
            "-c",
            "kill -TERM $$",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.signal(), Some(15));
}
