//! The exit leak report at scale through the glibc front: on the host its lines are gathered
//! into 64 KiB writes (src/log/host.rs) and its backtraces share one symbol resolver
//! (src/backtrace/report_scope.rs). Every line must still be a whole log line, every leak
//! reported once, in order (largest first), each with its backtrace naming the allocating
//! function.

mod common;

use common::*;

#[test]
fn twenty_thousand_leaks_are_reported_whole_and_in_order() {
    const N: usize = 20_000;
    let program = compile_c("many_leaks", "tests/programs/many_leaks.c", &["-O1", "-g"]);
    let out = run_under_front(
        &program,
        &[&N.to_string()],
        Some("backtrace=4 leak_track"),
        &[],
    );
    assert_exit_code(&out, 0);
    let stderr = stderr_of(&out);
    let lines: Vec<&str> = stderr.lines().collect();
    let parsed = log_lines(&out.stderr);
    assert_eq!(
        parsed.len(),
        lines.len(),
        "every stderr line is a whole log line"
    );
    let name = progname(&program);
    let mut leak = 0;
    let mut i = 0;
    while i < parsed.len() {
        let msg = &parsed[i].msg;
        leak += 1;
        let size = N + 1 - leak;
        let expected_prefix = format!("+++ {name} leaked block of size {size} at 0x");
        assert!(
            msg.starts_with(&expected_prefix) && msg.ends_with(&format!(" (leak {leak} of {N})")),
            "line {i}: {msg:?}, expected leak {leak} of size {size}"
        );
        assert_eq!(parsed[i + 1].msg, "Backtrace at time of allocation:");
        i += 2;
        let frames_start = i;
        while i < parsed.len() && parsed[i].msg.starts_with("          #") {
            i += 1;
        }
        assert!(
            parsed[frames_start..i]
                .iter()
                .any(|l| l.msg.contains("(leak_here+")),
            "leak {leak}: no leak_here frame in {:?}",
            &parsed[frames_start..i]
        );
    }
    assert_eq!(leak, N);
}
