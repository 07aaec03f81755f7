//! `malloc-debug run`: the front is preloaded with the options, the exit status passes through.

mod common;
use common::*;
use std::path::Path;
use std::process::Command;

#[test]
fn runs_under_the_front_and_passes_the_exit_status() {
    let (dump, out) = real_dump("run", 3);
    // leaky.c returns 7.
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    let log = stderr(&out);
    assert!(
        log.contains(" E malloc_debug: +++ leaky leaked block of size 4096 at 0x"),
        "{log}"
    );
    let text = std::fs::read_to_string(dump).unwrap();
    assert!(text.starts_with("Android Native Heap Dump v1.2\n\nBuild fingerprint: 'unknown'\n"));
}

const DEFAULT_LINE: &str = "malloc-debug: using --options \"backtrace guard free_track leak_track \
     leak_unreachable error_backtraces\" (the default: overflow, use after free, double free, lost blocks at exit, \
     with backtraces)\n";
/// The default's exit report ends with the summary line (leak_unreachable), even with no leak.
const NO_LEAKS: &str = "leak summary: definitely lost: 0 bytes in 0 blocks, indirectly lost: 0 \
     bytes in 0 blocks, still reachable: 0 bytes in 0 blocks, suppressed: 0 bytes in 0 blocks\n";
const STARS: &str = "*** *** *** *** *** *** *** *** *** *** *** *** *** *** *** ***\n";

fn run_default(mode: &str) -> String {
    let out = cli()
        .args(["run", "--"])
        .arg(buggy())
        .arg(mode)
        .env_remove("LIBC_DEBUG_MALLOC_OPTIONS")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    normalize(&stderr(&out), buggy())
}

/// Without --options, `run` says which options it uses and they catch the four classic bugs,
/// each with the backtraces and the source lines of the program's frames; every error report
/// ends with where the block was allocated (the `error_backtraces` extension). Leaks are lost
/// blocks only (leak_unreachable): buggy.c's leak mode drops its only pointer to the block.
#[test]
fn without_options_the_default_catches_the_common_bugs() {
    let allocated = format!(
        "Backtrace at time of allocation of 0xADDR:\n#01 make at buggy.c:8\n\
         #02 main at buggy.c:14\n{STARS}"
    );
    assert_eq!(
        run_default("overflow"),
        format!(
            "{DEFAULT_LINE}{STARS}+++ ALLOCATION 0xADDR SIZE 20 HAS A CORRUPTED REAR GUARD\n  \
             allocation[20] = 0x01 (expected 0xbb)\nBacktrace at time of failure:\n\
             #01 drop at buggy.c:10\n#02 main at buggy.c:17\n{STARS}{allocated}{NO_LEAKS}"
        )
    );
    assert_eq!(
        run_default("use-after-free"),
        format!(
            "{DEFAULT_LINE}{STARS}+++ ALLOCATION 0xADDR USED AFTER FREE\n  \
             allocation[3] = 0x01 (expected 0xef)\nBacktrace at time of free:\n\
             #01 drop at buggy.c:10\n#02 main at buggy.c:19\n{STARS}{allocated}{NO_LEAKS}"
        )
    );
    assert_eq!(
        run_default("double-free"),
        format!(
            "{DEFAULT_LINE}{STARS}+++ ALLOCATION 0xADDR USED AFTER FREE (free)\n\
             Backtrace of original free:\n#01 drop at buggy.c:10\n#02 main at buggy.c:23\n\
             Backtrace at time of failure:\n#01 drop at buggy.c:10\n#02 main at buggy.c:24\n\
             {STARS}{allocated}{NO_LEAKS}"
        )
    );
    assert_eq!(
        run_default("leak"),
        format!(
            "{DEFAULT_LINE}+++ buggy leaked block of size 20 at 0xADDR (leak 1 of 1, definitely \
             lost)\nBacktrace at time of allocation:\n#01 make at buggy.c:8\n\
             #02 main at buggy.c:14\n{}",
            NO_LEAKS.replace(
                "definitely lost: 0 bytes in 0",
                "definitely lost: 20 bytes in 1"
            )
        )
    );
    assert_eq!(run_default("none"), format!("{DEFAULT_LINE}{NO_LEAKS}"));
    // The reference's report (every live block) is one --options away.
    let out = cli()
        .args(["run", "--options", "backtrace leak_track", "--"])
        .arg(buggy())
        .arg("leak")
        .output()
        .unwrap();
    assert_eq!(
        normalize(&stderr(&out), buggy()),
        "+++ buggy leaked block of size 20 at 0xADDR (leak 1 of 1)\n\
         Backtrace at time of allocation:\n#01 make at buggy.c:8\n#02 main at buggy.c:14\n"
    );
}

/// A bad option string is refused with the library's own lines, and the program never starts.
#[test]
fn bad_options_are_refused_before_anything_runs() {
    let dir = tmp_dir("bad-options");
    let marker = dir.join("ran");
    let script = format!("touch {}", marker.display());
    let cases = [
        ("gaurd leak_track", "sh: unknown option gaurd"),
        (
            "backtrace=300",
            "sh: bad value for option 'backtrace', value must be <= 256: 300",
        ),
        (
            "guard=12x",
            "sh: bad value for option 'guard', non space found after option: x",
        ),
        (
            "leak_track=1",
            "sh: value set for option 'leak_track' which does not take a value",
        ),
    ];
    for (options, message) in cases {
        let out = cli()
            .args(["run", "--options", options, "--", "sh", "-c", &script])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{options}");
        assert_eq!(
            stderr(&out),
            format!(
                "malloc-debug: the library refuses --options \"{options}\":\n{message}\n\
                 For malloc debug option descriptions go to:\n  \
                 https://android.googlesource.com/platform/bionic/+/main/libc/malloc_debug/\
                 README.md\n(see malloc-debug run --help)\n"
            )
        );
        assert_eq!(stdout(&out), "");
        assert!(!marker.exists(), "{options}: the program ran");
    }
}

#[test]
fn exit_status_and_signals_pass_through() {
    let lib = release_dir().join("libc_malloc_debug.so");
    let out = cli()
        .args(["run", "--options", "verbose", "--lib"])
        .arg(&lib)
        .args(["--", "sh", "-c", "exit 42"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(42));
    assert!(
        stderr(&out).contains("I malloc_debug: sh: malloc debug enabled"),
        "{}",
        stderr(&out)
    );
    // Killed: the CLI dies of the same signal, and leaves nothing in the temporary directory
    // (the annotation socket's directory, the --error-exitcode marker).
    // A short path: the socket's must fit in sun_path (108 bytes), or the CLI pipes instead.
    let tmp = std::env::temp_dir().join(format!("mdk-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    for gate in [&[][..], &["--error-exitcode", "9"]] {
        let out = cli()
            .args(["run", "--lib"])
            .arg(&lib)
            .args(gate)
            .args(["--", "sh", "-c", "kill -TERM $$"])
            .env("TMPDIR", &tmp)
            .output()
            .unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(out.status.signal(), Some(15), "{gate:?}");
        let left: Vec<_> = std::fs::read_dir(&tmp).unwrap().flatten().collect();
        assert!(left.is_empty(), "{gate:?}: left behind: {left:?}");
    }
    std::fs::remove_dir(&tmp).unwrap();
}

#[test]
fn missing_command_and_missing_program_are_errors() {
    let out = cli()
        .args(["run", "--options", "verbose"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("run: no command given"),
        "{}",
        stderr(&out)
    );
    let out = cli()
        .args(["run", "--lib"])
        .arg(release_dir().join("libc_malloc_debug.so"))
        .args(["--", "/nonexistent/program"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127));
    assert!(
        stderr(&out).contains("cannot run /nonexistent/program"),
        "{}",
        stderr(&out)
    );
    let out = cli()
        .args([
            "run",
            "--lib",
            "/nonexistent/libc_malloc_debug.so",
            "--",
            "true",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("libc_malloc_debug.so not found"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn finds_the_library_next_to_itself_or_in_malloc_debug_lib_dir() {
    // No --lib/--front: cargo put the CLI in target/release beside both shared objects.
    let out = cli()
        .args(["run", "--options", "verbose", "--", "sh", "-c", "exit 3"])
        .env_remove("MALLOC_DEBUG_LIB_DIR")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("I malloc_debug: sh: malloc debug enabled"),
        "{}",
        stderr(&out)
    );

    // $MALLOC_DEBUG_LIB_DIR is searched first: with only the library there, the library comes
    // from it and the front from beside the CLI.
    let dir = tmp_dir("libdir");
    std::fs::copy(
        release_dir().join("libc_malloc_debug.so"),
        dir.join("libc_malloc_debug.so"),
    )
    .unwrap();
    let out = cli()
        .args([
            "run",
            "--options",
            "verbose",
            "--",
            "sh",
            "-c",
            "echo $LIBC_DEBUG_MALLOC_LIB",
        ])
        .env("MALLOC_DEBUG_LIB_DIR", &dir)
        .output()
        .unwrap();
    assert_eq!(
        stdout(&out),
        format!("{}\n", dir.join("libc_malloc_debug.so").display()),
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("I malloc_debug: sh: malloc debug enabled"),
        "{}",
        stderr(&out)
    );

    // Nothing anywhere: the error says where it looked and what to do.
    let empty = tmp_dir("libdir-empty");
    let out = cli()
        .args(["run", "--lib"])
        .arg(empty.join("libc_malloc_debug.so"))
        .args(["--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        format!(
            "malloc-debug: libc_malloc_debug.so not found (looked at {}): build it with `cargo \
             build --release`, or pass --lib/--front, or set MALLOC_DEBUG_LIB_DIR\n",
            empty.join("libc_malloc_debug.so").display()
        )
    );
}

/// `--program NAME` plays libc.debug.malloc.program: only a process whose name contains NAME
/// gets malloc debug; here the shell does not, the leaky child it starts does.
#[test]
fn program_filter() {
    let script = format!("{} 1; echo $?", leaky().display());
    let out = cli()
        .args(["run", "--options", "verbose", "--program", "leaky", "--"])
        .args(["sh", "-c", &script])
        .output()
        .unwrap();
    assert_eq!(stdout(&out), "7\n", "{}", stderr(&out));
    let log = stderr(&out);
    assert!(
        log.contains("I malloc_debug: leaky: malloc debug enabled"),
        "{log}"
    );
    assert!(!log.contains("sh: malloc debug enabled"), "{log}");
}

/// With backtraces, `run` adds source locations to the log's frame lines without piping the
/// program's stderr: the library asks the CLI's annotation server for each distinct frame
/// (tools/malloc-debug/src/annotate.rs), so the program writes to the stderr it was given.
/// `--no-symbolize` adds nothing. The frame line of `make` is checked in both formats (the full
/// format's frame numbers have one digit: `#1  pc ...`).
#[test]
fn run_annotates_frames_and_leaves_the_program_its_own_stderr() {
    let prog = compile("stderr_kind");
    for (options, extra, expect_stderr, annotated) in [
        ("backtrace leak_track", None, "not a pipe", Some(true)),
        (
            "backtrace backtrace_full leak_track",
            None,
            "not a pipe",
            Some(true),
        ),
        (
            "backtrace leak_track",
            Some("--no-symbolize"),
            "not a pipe",
            Some(false),
        ),
    ] {
        let dir = tmp_dir("stderr-kind");
        let log_path = dir.join("stderr.txt");
        let log_file = std::fs::File::create(&log_path).unwrap();
        let mut cmd = cli();
        cmd.args(["run", "--options", options]);
        if let Some(e) = extra {
            cmd.arg(e);
        }
        let out = cmd.arg("--").arg(&prog).stderr(log_file).output().unwrap();
        let log = std::fs::read_to_string(&log_path).unwrap();
        assert_eq!(out.status.code(), Some(0), "{options}: {log}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("{expect_stderr}\n"),
            "{options}"
        );
        let Some(annotated) = annotated else {
            continue;
        };
        let make = log
            .lines()
            .find(|l| l.contains(" (make+") || l.contains(" (make)"))
            .unwrap_or_else(|| panic!("{options}: no frame of make in\n{log}"));
        assert_eq!(
            make.contains("  make at ") && make.ends_with("stderr_kind.c:8"),
            annotated,
            "{options} {extra:?}: {make}"
        );
    }
}

/// Under `run`, the exit report of a thread whose stack is as small as glibc allows (16 KiB)
/// is complete and annotated: the report, with the annotation round trips' buffers, runs on the
/// library's own stack (src/report_stack.rs); on the thread's, it crashed the program.
#[test]
fn run_reports_the_leaks_of_a_thread_with_a_small_stack() {
    let prog = compile_source(
        "small_stack",
        &workspace_root().join("tests/programs/small_stack.c"),
    );
    let out = cli()
        .args(["run", "--options", "backtrace leak_track", "--"])
        .arg(&prog)
        .arg("exit")
        .output()
        .unwrap();
    let log = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{log}");
    for size in 16..66 {
        assert!(
            log.contains(&format!("small_stack leaked block of size {size} at 0x")),
            "size {size}: {log}"
        );
    }
    let annotated = log
        .lines()
        .filter(|l| {
            l.contains("(leak_here+")
                && l.contains("  leak_here at ")
                && l.contains("small_stack.c:")
        })
        .count();
    assert_eq!(annotated, 50, "{log}");
}

/// A statically linked program never loads the front: `run` says so before it starts it (a run
/// that prints nothing would pass for a clean one), then runs it with its exit status. A
/// dynamic one gets no such line (the exact stderr of the other tests).
#[test]
fn run_warns_that_a_static_program_is_not_checked() {
    let dir = tmp_dir("static-leaky");
    let program = dir.join("leaky-static");
    let status = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-O1", "-static", "-o"])
        .arg(&program)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs/leaky.c"))
        .status()
        .expect("run cc");
    assert!(
        status.success(),
        "cc -static failed (libc.a is in libc6-dev)"
    );
    let out = cli()
        .args(["run", "--options", "leak_track", "--"])
        .arg(&program)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    assert_eq!(
        stderr(&out),
        format!(
            "malloc-debug: warning: {p} is statically linked: no dynamic loader preloads the \
             front into it, so malloc debug will not run in {p}\n",
            p = program.display()
        )
    );
}
