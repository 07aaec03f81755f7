//! Issue 20 through the glibc front: blocks that cross the "debug calls disabled" boundary
//! (point 1) and blocks the live table could not take under memory exhaustion (point 7) are
//! freed by the allocator that made them and never reported.

mod common;

use common::*;

const TABLE_FULL: &str =
    "out of memory for the live allocation table: some allocations are not tracked";

/// Point 7: once the live table cannot grow (every new mapping fails, the heap still has room),
/// untracked blocks are freed, resized and measured like tracked ones: no UNKNOWN POINTER, one
/// line in the log, and 30 rounds that need twice the heap's room (so any block left unfreed
/// makes a malloc fail).
#[test]
fn blocks_the_full_table_could_not_take_are_freed_and_not_reported() {
    let program = compile_c(
        "table_exhaustion",
        "tests/programs/table_exhaustion.c",
        &["-O1"],
    );
    let mut expected = String::from("start\n");
    for round in 0..30 {
        expected += &format!("round {round} ok\n");
    }
    expected += "done\n";
    for options in [
        "guard",
        "leak_track",
        "free_track",
        "guard backtrace leak_track free_track",
    ] {
        let out = run_under_front(&program, &["20000", "30"], Some(options), &[]);
        assert_eq!(stdout_of(&out), expected, "{options}: {}", stderr_of(&out));
        assert_exit_code(&out, 0);
        assert_eq!(
            malloc_debug_messages(&out),
            [TABLE_FULL],
            "{options}: {}",
            stderr_of(&out)
        );
    }
}

/// Point 1: the thread between malloc_disable and malloc_enable is marked, as a thread inside
/// the library running foreign code is. Blocks made by the native allocator while marked are
/// freed, resized and measured natively once unmarked; blocks of the library freed, resized
/// and measured while marked go back through the debug layout. Before: `munmap_chunk(): invalid
/// pointer` under guard, UNKNOWN POINTER reports and leaks without headers.
#[test]
fn blocks_crossing_the_disabled_boundary_go_back_to_their_allocator() {
    let program = compile_c(
        "disabled_boundary",
        "tests/programs/disabled_boundary.c",
        &["-O1"],
    );
    for options in [
        "guard",
        "leak_track",
        "backtrace guard leak_track free_track",
        "fill expand_alloc=16",
        "rear_guard record_allocs",
    ] {
        let out = run_under_front(&program, &[], Some(options), &[]);
        assert_eq!(
            stdout_of(&out),
            "usable 16 of 16\ndone\n",
            "{options}: {}",
            stderr_of(&out)
        );
        assert_exit_code(&out, 0);
        let messages = malloc_debug_messages(&out);
        assert!(messages.is_empty(), "{options}: {messages:#?}");
    }
}
