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

/// Six allocation paths that differ only in their innermost frames (leaf0..leaf5, all called
/// from one `pick` called from one `main`) replay one stack-walk memo; the interned backtrace
/// noted on it (src/backtrace/note.rs) must be told apart by those first frames. Every leak of
/// size 1000 + k names leaf<k> right after the front's malloc. With "churn", collections of
/// unused backtrace records run in between (8,192 distinct stacks a round) and free the
/// records of the paths' earlier blocks: an id noted before a collection is not used after it.
#[test]
fn blocks_sharing_a_walk_memo_keep_the_backtrace_of_their_own_path() {
    let program = compile_c(
        "shared_memo",
        "tests/programs/shared_memo.c",
        &["-O1", "-g"],
    );
    for args in [&[][..], &["churn"][..]] {
        let out = run_under_front(&program, args, Some("backtrace leak_track"), &[]);
        assert_exit_code(&out, 0);
        check_paths(&log_lines(&out.stderr), args);
    }
}

fn check_paths(parsed: &[LogLine], args: &[&str]) {
    let mut checked = [0usize; 6];
    for (i, line) in parsed.iter().enumerate() {
        assert!(
            !line.msg.contains("does not have matching frame data"),
            "{args:?}: {}",
            line.msg
        );
        let Some(rest) = line.msg.split(" leaked block of size ").nth(1) else {
            continue;
        };
        let size: usize = rest.split(' ').next().unwrap().parse().unwrap();
        let Some(k) = size.checked_sub(1000).filter(|&k| k < 6) else {
            continue;
        };
        assert_eq!(parsed[i + 1].msg, "Backtrace at time of allocation:");
        let first = &parsed[i + 3].msg;
        assert!(
            first.starts_with("          #01  pc ") && first.contains(&format!("(leaf{k}+")),
            "{args:?}: leak of size {size}: first frame {first:?}"
        );
        assert!(
            parsed[i + 4].msg.contains("(pick+"),
            "leak of size {size}: {:?}",
            parsed[i + 4].msg
        );
        checked[k] += 1;
    }
    assert_eq!(checked, [40; 6], "{args:?}: every leak of every path");
}
