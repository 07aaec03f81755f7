//! Allocation-time detection on a real program under the glibc front (tests/programs/bugs.c):
//! each classic heap bug reported with the spec's exact lines and a backtrace naming the buggy
//! function, the program otherwise unaffected — or aborted right after the report under
//! abort_on_error. Also the README's demo (scripts/demo).

mod common;

use common::*;
use std::os::unix::process::ExitStatusExt;
use std::process::Output;

const DIVIDER: &str = "*** *** *** *** *** *** *** *** *** *** *** *** *** *** *** ***";

fn run(mode: &str, options: &str) -> Output {
    let program = compile_c("bugs", "tests/programs/bugs.c", &["-O1", "-g", "-w"]);
    run_under_front(program, &[mode], Some(options), &[])
}

/// The messages with the block address (`ALLOCATION 0x…`, `at 0x…`) replaced by `P`, and
/// frame lines reduced to `#NN <file name> (<function>)`.
fn normalised(out: &Output) -> Vec<String> {
    malloc_debug_messages(out)
        .into_iter()
        .map(|m| {
            if let Some(frame) = m.trim_start().strip_prefix('#') {
                let f: Vec<&str> = frame.split_whitespace().collect();
                let file = f
                    .get(3)
                    .map(|p| p.rsplit('/').next().unwrap())
                    .unwrap_or("");
                let func = f
                    .get(4)
                    .map(|s| s.trim_start_matches('(').split('+').next().unwrap())
                    .unwrap_or("");
                format!("#{} {file} ({func})", f[0])
            } else if let Some(i) = m
                .find("ALLOCATION 0x")
                .map(|i| i + 11)
                .or_else(|| m.find(" at 0x").map(|i| i + 4))
            {
                let end = m[i + 2..]
                    .find(|c: char| !c.is_ascii_hexdigit())
                    .map_or(m.len(), |e| i + 2 + e);
                format!("{}P{}", &m[..i], &m[end..])
            } else {
                m
            }
        })
        .collect()
}

/// The report's lines up to and including the first frame of the program itself.
fn head(lines: &[String], up_to_function: &str) -> Vec<String> {
    let end = lines
        .iter()
        .position(|l| l.ends_with(&format!("bugs ({up_to_function})")))
        .unwrap_or_else(|| panic!("no frame in {up_to_function}: {lines:#?}"));
    lines[..=end].to_vec()
}

fn assert_unaffected(out: &Output) {
    assert_exit_code(out, 0);
    assert_eq!(stdout_of(out), "done\n");
}

#[test]
fn off_by_one_write_hits_the_rear_guard() {
    let out = run("off-by-one", "guard");
    assert_unaffected(&out);
    let lines = normalised(&out);
    assert_eq!(
        head(&lines, "off_by_one"),
        [
            DIVIDER,
            "+++ ALLOCATION P SIZE 10 HAS A CORRUPTED REAR GUARD",
            "  allocation[10] = 0x61 (expected 0xbb)",
            "Backtrace at time of failure:",
            "#00 libmalloc_debug_front.so (free)",
            "#01 bugs (off_by_one)",
        ]
    );
    assert_eq!(lines.last().unwrap(), DIVIDER);
}

#[test]
fn underflow_hits_the_front_guard() {
    let out = run("underflow", "guard");
    assert_unaffected(&out);
    assert_eq!(
        head(&normalised(&out), "underflow"),
        [
            DIVIDER,
            "+++ ALLOCATION P SIZE 10 HAS A CORRUPTED FRONT GUARD",
            "  allocation[-1] = 0x75 (expected 0xaa)",
            "Backtrace at time of failure:",
            "#00 libmalloc_debug_front.so (free)",
            "#01 bugs (underflow)",
        ]
    );
}

/// bugs.c's use_after_free, reported when the block leaves free_track's queue.
const USE_AFTER_FREE_REPORT: [&str; 6] = [
    DIVIDER,
    "+++ ALLOCATION P USED AFTER FREE",
    "  allocation[4] = 0x77 (expected 0xef)",
    "Backtrace at time of free:",
    "#00 libmalloc_debug_front.so (free)",
    "#01 bugs (use_after_free)",
];

#[test]
fn write_after_free_is_found_when_the_block_leaves_the_queue() {
    let out = run("use-after-free", "guard free_track=10");
    assert_unaffected(&out);
    assert_eq!(
        head(&normalised(&out), "use_after_free"),
        USE_AFTER_FREE_REPORT
    );
}

#[test]
fn a_block_damaged_by_an_exited_thread_leaves_the_queue_when_other_threads_free() {
    // free_track keeps a ring per thread under one bound: the thread's ring holds its five
    // blocks, main's frees fill the rest of the bound, and then one free in 16 takes its room
    // from a ring whose thread has stopped freeing, so the exited thread's oldest, the damaged
    // one, leaves and is reported then, not only at exit.
    let out = run("use-after-free-in-thread", "free_track=10");
    assert_unaffected(&out);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let joined = stderr.find("thread joined").expect("marker");
    let report = stderr.find("USED AFTER FREE").expect(&stderr);
    let pushed_out = stderr.find("pushed out").expect("marker");
    assert!(joined < report && report < pushed_out, "{stderr}");
    assert_eq!(stderr.matches("USED AFTER FREE").count(), 1, "{stderr}");
    assert_eq!(
        head(&normalised(&out), "use_after_free"),
        USE_AFTER_FREE_REPORT
    );
}

#[test]
fn double_free_is_reported_with_both_backtraces() {
    let out = run("double-free", "guard free_track");
    assert_unaffected(&out);
    let lines = normalised(&out);
    assert_eq!(
        lines[..2],
        [DIVIDER, "+++ ALLOCATION P USED AFTER FREE (free)"]
    );
    let original = lines
        .iter()
        .position(|l| l == "Backtrace of original free:");
    let failure = lines
        .iter()
        .position(|l| l == "Backtrace at time of failure:");
    assert!(original.is_some() && failure > original, "{lines:#?}");
    assert_eq!(lines[original.unwrap() + 2], "#01 bugs (double_free)");
    assert_eq!(lines[failure.unwrap() + 2], "#01 bugs (double_free)");
}

#[test]
fn wild_free_of_a_stack_pointer_is_an_unknown_pointer() {
    for options in ["verify_pointers", "guard verify_pointers", "guard"] {
        let out = run("wild-free", options);
        assert_unaffected(&out);
        let lines = normalised(&out);
        let expected = if options.contains("guard") {
            // Header mode checks the tag first, as the reference does (read without faulting).
            "+++ ALLOCATION P HAS INVALID TAG"
        } else {
            "+++ ALLOCATION P UNKNOWN POINTER (free)"
        };
        assert!(lines[1].starts_with(expected), "{options}: {lines:#?}");
        assert!(
            lines.contains(&"#01 bugs (wild_free)".to_string()),
            "{lines:#?}"
        );
    }
}

#[test]
fn leak_is_reported_at_exit_with_its_allocation_site() {
    let out = run("leak", "leak_track backtrace");
    assert_unaffected(&out);
    let lines = normalised(&out);
    let name = progname(compile_c(
        "bugs",
        "tests/programs/bugs.c",
        &["-O1", "-g", "-w"],
    ));
    assert_eq!(
        lines[..4],
        [
            format!("+++ {name} leaked block of size 40 at P (leak 1 of 1)"),
            "Backtrace at time of allocation:".to_string(),
            "#00 libmalloc_debug_front.so (malloc)".to_string(),
            "#01 bugs (leak)".to_string(),
        ]
    );
}

#[test]
fn abort_on_error_stops_right_after_the_report() {
    let out = run("off-by-one", "guard abort_on_error");
    assert_eq!(out.status.signal(), Some(libc_sigabrt()), "{out:?}");
    assert_eq!(stdout_of(&out), "", "nothing after the bug ran");
    let lines = normalised(&out);
    assert_eq!(
        lines[1],
        "+++ ALLOCATION P SIZE 10 HAS A CORRUPTED REAR GUARD"
    );
    assert_eq!(lines.last().unwrap(), DIVIDER);
    // Leaks at exit never abort.
    let out = run("leak", "leak_track abort_on_error");
    assert_unaffected(&out);
}

fn libc_sigabrt() -> i32 {
    6
}

#[test]
fn the_readme_demo_reports_the_overflow_and_the_leak() {
    let out = std::process::Command::new("bash")
        .arg(manifest_dir().join("scripts/demo"))
        .output()
        .expect("scripts/demo");
    assert_exit_code(&out, 0);
    assert_eq!(stdout_of(&out), "hello, malloc debug\n");
    let messages = malloc_debug_messages(&out);
    let has = |s: &str| messages.iter().any(|m| m.contains(s));
    assert!(has(" SIZE 12 HAS A CORRUPTED REAR GUARD"), "{messages:#?}");
    assert!(
        has("  allocation[12] = 0x00 (expected 0xbb)"),
        "{messages:#?}"
    );
    assert!(has("demo leaked block of size 64 at 0x"), "{messages:#?}");
    assert!(has("/demo (make_greeting+"), "{messages:#?}");
}
