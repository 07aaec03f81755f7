//! Thread cancellation (glibc's `pthread_cancel`) and the library's slow paths: a report writes
//! to stderr and reads `/proc`, which are cancellation points. A thread cancelled inside one
//! unwound out of the library with its locks and counts held, and the process crashed or hung
//! (docs/design.md, "Thread cancellation (glibc)"). tests/programs/cancel_in_report.c cancels
//! a thread that spends its time in error reports.

mod common;

use common::*;
use std::process::Stdio;
use std::time::Duration;

#[test]
fn a_thread_cancelled_during_reports_leaves_the_library_working() {
    let program = compile_c(
        "cancel_in_report",
        programs_dir().join("cancel_in_report.c"),
        &["-O1", "-pthread"],
    );
    for options in ["guard", "backtrace leak_track guard"] {
        for round in 0..3 {
            // Files, not pipes: the reports fill a pipe nobody reads until the end.
            let dir = scratch_dir("cancel");
            let log = dir.join(format!("{}-{round}.err", options.replace(' ', "_")));
            let mut child = front_command(&program, &[], Some(options), &[])
                .stdout(Stdio::piped())
                .stderr(std::fs::File::create(&log).unwrap())
                .spawn()
                .expect("start cancel_in_report");
            // A hang is the failure this guards against: give it a minute, then kill it.
            assert!(
                wait_or_kill(&mut child, Duration::from_secs(60)),
                "{options}: cancel_in_report hung"
            );
            let mut out = child.wait_with_output().unwrap();
            out.stderr = std::fs::read(&log).unwrap();
            assert_exit_code(&out, 0);
            assert_eq!(stdout_of(&out), "cancelled=1\n", "{options}");
            assert!(
                malloc_debug_messages(&out)
                    .iter()
                    .any(|m| m.ends_with(" SIZE 16 HAS A CORRUPTED REAR GUARD")),
                "{options}: no report"
            );
        }
    }
}
