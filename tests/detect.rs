//! Allocation-time detection through the C ABI (tests/detect/driver.c, one scenario per process,
//! the library loaded and initialised the way bionic does it): fill patterns and limits,
//! expand_alloc, free_track's fill and its checks at exit, the reports for freed, unknown and
//! corrupted pointers with their function names, the leak order at exit, size and errno limits
//! in header mode, and malloc_iterate after malloc_disable on the same thread.

mod common;

use common::*;
use std::process::Output;

const DIVIDER: &str = "*** *** *** *** *** *** *** *** *** *** *** *** *** *** *** ***";

fn run(scenario: &str, options: &str) -> Output {
    let driver = compile_c("detect_driver", "tests/detect/driver.c", &["-O0", "-w"]);
    let mut cmd = clean_command(driver);
    cmd.arg(lib_path()).arg(scenario).arg(options);
    let out = cmd.output().unwrap();
    assert_exit_code(&out, 0);
    out
}

/// The driver's facts, without the initialize line.
fn facts(out: &Output) -> Vec<String> {
    stdout_of(out)
        .lines()
        .filter(|l| *l != "initialize=1" && !l.starts_with("p "))
        .map(str::to_string)
        .collect()
}

/// The pointers the driver printed on its `p` line, as the log writes them.
fn pointers(out: &Output) -> Vec<String> {
    stdout_of(out)
        .lines()
        .find_map(|l| l.strip_prefix("p "))
        .unwrap_or_default()
        .split(' ')
        .map(str::to_string)
        .collect()
}

/// Log messages without backtrace frame lines.
fn report(out: &Output) -> Vec<String> {
    malloc_debug_messages(out)
        .into_iter()
        .filter(|m| !m.trim_start().starts_with('#'))
        .collect()
}

#[test]
fn fill_on_alloc_fills_fresh_and_grown_memory_but_not_calloc() {
    let out = run("fill", "fill");
    assert_eq!(
        facts(&out),
        [
            "alloc_filled 1",
            "calloc_zero 1",
            "realloc_kept 1 grown_filled 1"
        ]
    );
    assert_eq!(report(&out), Vec::<String>::new());
}

#[test]
fn fill_limits_and_expand_alloc() {
    assert_eq!(
        facts(&run("fill_limit", "fill_on_alloc=8")),
        ["head 1 tail_untouched 1"]
    );
    assert_eq!(
        facts(&run("expand", "expand_alloc=16")),
        ["usable_at_least_26 1"]
    );
    assert_eq!(facts(&run("free_fill", "free_track")), ["freed_filled 1"]);
}

#[test]
fn writes_after_free_are_reported_byte_by_byte_at_exit() {
    let out = run("write_after_free", "free_track");
    let p = &pointers(&out)[0];
    assert_eq!(
        report(&out),
        [
            DIVIDER.to_string(),
            format!("+++ ALLOCATION {p} USED AFTER FREE"),
            "  allocation[0] = 0x78 (expected 0xef)".to_string(),
            "  allocation[99] = 0x79 (expected 0xef)".to_string(),
            "Backtrace at time of free:".to_string(),
            DIVIDER.to_string(),
        ]
    );
}

#[test]
fn a_damaged_header_in_the_queue_is_reported_without_checking_contents() {
    let out = run("tag_after_free", "guard free_track");
    let p = &pointers(&out)[0];
    assert_eq!(
        report(&out),
        [
            DIVIDER.to_string(),
            format!("+++ ALLOCATION {p} HAS CORRUPTED HEADER TAG 0x0 AFTER FREE"),
            DIVIDER.to_string(),
        ]
    );
}

#[test]
fn freed_pointers_are_reported_with_the_function_used() {
    let out = run("freed_pointer_calls", "guard free_track");
    let p = &pointers(&out)[0];
    let one = |function: &str| {
        [
            DIVIDER.to_string(),
            format!("+++ ALLOCATION {p} USED AFTER FREE ({function})"),
            "Backtrace of original free:".to_string(),
            "Backtrace at time of failure:".to_string(),
            DIVIDER.to_string(),
        ]
    };
    assert_eq!(
        report(&out),
        [one("malloc_usable_size"), one("realloc")].concat()
    );
    assert_eq!(facts(&out), ["usable 0", "realloc_null 1"]);
}

#[test]
fn unknown_pointers_are_reported_without_being_read() {
    // An unmapped address, the middle of a block, a stack address: no crash, one report each.
    let out = run("unknown_pointers", "verify_pointers");
    let p = pointers(&out);
    let one = |pointer: &str, function: &str| {
        [
            DIVIDER.to_string(),
            format!("+++ ALLOCATION {pointer} UNKNOWN POINTER ({function})"),
            "Backtrace at time of failure:".to_string(),
            DIVIDER.to_string(),
        ]
    };
    assert_eq!(
        report(&out),
        [
            one(&p[0], "free"),
            one(&p[1], "realloc"),
            one(&p[2], "malloc_usable_size")
        ]
        .concat()
    );
    assert_eq!(facts(&out), ["realloc_null 1", "usable 0"]);
}

#[test]
fn leaks_at_exit_biggest_first() {
    let out = run("leaks", "leak_track");
    let p = pointers(&out);
    let name = progname(compile_c(
        "detect_driver",
        "tests/detect/driver.c",
        &["-O0", "-w"],
    ));
    assert_eq!(
        report(&out),
        [
            format!(
                "+++ {name} leaked block of size 300 at {} (leak 1 of 3)",
                p[0]
            ),
            format!(
                "+++ {name} leaked block of size 20 at {} (leak 2 of 3)",
                p[1]
            ),
            format!(
                "+++ {name} leaked block of size 10 at {} (leak 3 of 3)",
                p[2]
            ),
        ]
    );
}

#[test]
fn size_and_alignment_rules_in_header_mode() {
    assert_eq!(
        facts(&run("limits", "guard")),
        [
            "malloc_2g 1 1",
            "calloc_overflow 1 1",
            "posix_memalign_3 1",
            "aligned_alloc_0 1 1",
            "memalign_4096 1 1",
            "memalign_24 1",
            "malloc_0 1",
        ]
    );
}

/// malloc_iterate reports each live block once with its usable size and nothing else, with the
/// allocator disabled and while it runs, whichever structure tracks the blocks: the live table
/// (verify_pointers, free_track, leak_track, backtrace) or the presence map (guard and the
/// other header options without leak_track or backtrace; docs/design.md, "Presence map").
#[test]
fn iterate_reports_exactly_the_live_blocks() {
    for options in [
        "guard",
        "verify_pointers",
        "free_track=10",
        "guard fill free_track verify_pointers",
        "rear_guard free_track=10",
        "leak_track",
        "backtrace guard",
    ] {
        assert_eq!(
            facts(&run("iterate_exact", options)),
            ["iterate_exact disabled 1", "iterate_exact running 1"],
            "{options}"
        );
    }
}

#[test]
fn iterate_after_disable_on_the_same_thread() {
    assert_eq!(
        facts(&run("iterate_disabled", "leak_track")),
        ["iterated_at_least_3 1"]
    );
}
