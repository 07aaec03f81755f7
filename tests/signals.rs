//! Signal handlers that allocate while their thread is inside the library (docs/design.md,
//! "The signal-33 rule"): a profiling timer's handler mallocs and frees while the main thread
//! allocates under every option. A lock held where the signal lands would deadlock the thread
//! on itself; the test fails on a hang (a generous bound, no timing threshold on speed).

mod common;
use common::*;
use std::time::Duration;

fn run_bounded(options: &str) -> std::process::Output {
    let exe = compile_c(
        "signal_alloc",
        programs_dir().join("signal_alloc.c"),
        &["-O1"],
    );
    let mut cmd = front_command(&exe, &[], Some(options), &[]);
    cmd.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().expect("spawn signal_alloc");
    if !wait_or_kill(&mut child, Duration::from_secs(240)) {
        let out = child.wait_with_output().unwrap();
        panic!("{options}: hung\n{}", stderr_of(&out));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn allocating_signal_handlers_never_deadlock() {
    for options in [
        "leak_track",
        "verify_pointers",
        "guard fill",
        "free_track",
        "backtrace",
        "backtrace leak_track guard free_track",
        "record_allocs",
    ] {
        let out = run_bounded(options);
        assert_exit_code(&out, 0);
        assert_eq!(
            stdout_of(&out),
            "signal_alloc ok\n",
            "{options}: {}",
            stderr_of(&out)
        );
        assert!(
            malloc_debug_messages(&out)
                .iter()
                .all(|m| !m.contains("+++")),
            "{options}: {}",
            stderr_of(&out)
        );
    }
}
