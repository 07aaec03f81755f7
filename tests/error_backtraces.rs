//! The `error_backtraces` extension (README "Extensions", src/error_context.rs) on real programs
//! under the glibc front: every error report about a block — guard corruption, a write after
//! free, a double free — ends, after the reference's unchanged lines and closing divider, with
//! the block's allocation backtrace naming the program's allocating function; without the
//! option the reports are exactly the reference's. A queued block's allocation backtrace
//! survives collections of unused backtrace records.

mod common;

use common::*;
use std::collections::HashMap;
use std::process::Output;

const DIVIDER: &str = "*** *** *** *** *** *** *** *** *** *** *** *** *** *** *** ***";
const FRONT: &str = "libmalloc_debug_front.so";

fn bugs(mode: &str, options: &str) -> Vec<String> {
    let program = compile_c("bugs", "tests/programs/bugs.c", &["-O1", "-g", "-w"]);
    let out = run_under_front(program, &[mode], Some(options), &[]);
    assert_done(&out);
    normalised(&out, "bugs")
}

fn assert_done(out: &Output) {
    assert_exit_code(out, 0);
    assert_eq!(stdout_of(out), "done\n");
}

/// The log's messages with each distinct block address (`0x` and at least 6 hex digits, not a
/// frame's) replaced by `P1`, `P2`… in order of appearance, and frame lines reduced to
/// `#NN <file name> (<function>)` — only the frames in the front and in `program` (before its
/// `_start`), so that the C library's start-up frames of the machine do not matter.
fn normalised(out: &Output, program: &str) -> Vec<String> {
    let mut names: HashMap<String, String> = HashMap::new();
    let mut lines = Vec::new();
    for m in malloc_debug_messages(out) {
        if let Some(frame) = m.trim_start().strip_prefix('#') {
            let f: Vec<&str> = frame.split_whitespace().collect();
            let file = f.get(3).map_or("", |p| p.rsplit('/').next().unwrap());
            let func = f
                .get(4)
                .map_or("", |s| s.trim_start_matches('(').split('+').next().unwrap());
            if (file == FRONT || file == program) && func != "_start" {
                lines.push(format!("#{} {file} ({func})", f[0]));
            }
            continue;
        }
        let mut line = String::new();
        let mut rest = m.as_str();
        while let Some(i) = rest.find("0x") {
            let hex = rest[i + 2..]
                .bytes()
                .take_while(u8::is_ascii_hexdigit)
                .count();
            line.push_str(&rest[..i]);
            let token = &rest[i..i + 2 + hex];
            if hex >= 6 {
                let next = format!("P{}", names.len() + 1);
                line.push_str(names.entry(token.to_string()).or_insert(next));
            } else {
                line.push_str(token);
            }
            rest = &rest[i + 2 + hex..];
        }
        line.push_str(rest);
        lines.push(line);
    }
    lines
}

fn strings(lines: &[&str]) -> Vec<String> {
    lines.iter().map(|l| l.to_string()).collect()
}

/// The extension's block for a block allocated in `function` of bugs.c.
fn allocated_in(function: &str) -> Vec<String> {
    strings(&[
        "Backtrace at time of allocation of P1:",
        &format!("#00 {FRONT} (malloc)"),
        &format!("#01 bugs ({function})"),
        "#02 bugs (main)",
        DIVIDER,
    ])
}

#[test]
fn an_overflow_report_ends_with_the_allocation_site() {
    let reference = strings(&[
        DIVIDER,
        "+++ ALLOCATION P1 SIZE 10 HAS A CORRUPTED REAR GUARD",
        "  allocation[10] = 0x61 (expected 0xbb)",
        "Backtrace at time of failure:",
        &format!("#00 {FRONT} (free)"),
        "#01 bugs (off_by_one)",
        "#02 bugs (main)",
        DIVIDER,
    ]);
    assert_eq!(
        bugs("off-by-one", "guard backtrace error_backtraces"),
        [reference.clone(), allocated_in("off_by_one")].concat()
    );
    // Off: the reference's report alone.
    assert_eq!(bugs("off-by-one", "guard backtrace"), reference);
    // The front guard's report too.
    let lines = bugs("underflow", "guard backtrace error_backtraces");
    assert_eq!(
        lines[1],
        "+++ ALLOCATION P1 SIZE 10 HAS A CORRUPTED FRONT GUARD"
    );
    assert_eq!(lines[lines.len() - 5..], allocated_in("underflow"));
}

#[test]
fn a_write_after_free_report_ends_with_the_allocation_site() {
    let reference = strings(&[
        DIVIDER,
        "+++ ALLOCATION P1 USED AFTER FREE",
        "  allocation[4] = 0x77 (expected 0xef)",
        "Backtrace at time of free:",
        &format!("#00 {FRONT} (free)"),
        "#01 bugs (use_after_free)",
        "#02 bugs (main)",
        DIVIDER,
    ]);
    // Found when the block leaves the queue (the program frees 200 blocks after the bug).
    assert_eq!(
        bugs(
            "use-after-free",
            "guard free_track=10 backtrace error_backtraces"
        ),
        [reference.clone(), allocated_in("use_after_free")].concat()
    );
    assert_eq!(
        bugs("use-after-free", "guard free_track=10 backtrace"),
        reference
    );
}

#[test]
fn a_double_free_report_ends_with_the_allocation_site() {
    let reference = |message: &str| {
        strings(&[
            DIVIDER,
            message,
            "Backtrace of original free:",
            &format!("#00 {FRONT} (free)"),
            "#01 bugs (double_free)",
            "#02 bugs (main)",
            "Backtrace at time of failure:",
            &format!("#00 {FRONT} (free)"),
            "#01 bugs (double_free)",
            "#02 bugs (main)",
            DIVIDER,
        ])
    };
    // Header mode sees the free tag; without a header the pointer is unknown to the live
    // table, and its allocation is found in free_track's queue.
    for (options, message) in [
        (
            "guard free_track backtrace",
            "+++ ALLOCATION P1 USED AFTER FREE (free)",
        ),
        (
            "free_track backtrace",
            "+++ ALLOCATION P1 UNKNOWN POINTER (free)",
        ),
    ] {
        assert_eq!(
            bugs("double-free", &format!("{options} error_backtraces")),
            [reference(message), allocated_in("double_free")].concat(),
            "{options}"
        );
        assert_eq!(
            bugs("double-free", options),
            reference(message),
            "{options}"
        );
    }
}

#[test]
fn nothing_is_added_without_an_allocation_backtrace() {
    // No backtraces collected: the option adds nothing.
    let lines = bugs("off-by-one", "guard error_backtraces");
    assert_eq!(lines, bugs("off-by-one", "guard"));
    assert_eq!(lines.iter().filter(|l| *l == DIVIDER).count(), 2);
    // An unknown pointer has no allocation: the reference's report alone.
    let lines = bugs("wild-free", "verify_pointers backtrace error_backtraces");
    assert_eq!(lines[1], "+++ ALLOCATION P1 UNKNOWN POINTER (free)");
    assert_eq!(lines.last().unwrap(), DIVIDER);
    assert!(
        !lines
            .iter()
            .any(|l| l.starts_with("Backtrace at time of allocation")),
        "{lines:#?}"
    );
}

#[test]
fn an_unknown_pointer_inside_a_live_block_names_the_block_and_its_allocation() {
    // As ASan says "located 8 bytes inside of 32-byte region": the reference's report, then
    // the block the pointer points into and where that block was allocated.
    let lines = bugs(
        "interior-free",
        "verify_pointers backtrace error_backtraces",
    );
    let reference = strings(&[
        DIVIDER,
        "+++ ALLOCATION P1 UNKNOWN POINTER (free)",
        "Backtrace at time of failure:",
        &format!("#00 {FRONT} (free)"),
        "#01 bugs (interior_free)",
        "#02 bugs (main)",
        DIVIDER,
    ]);
    assert_eq!(
        lines,
        [
            reference.clone(),
            strings(&[
                "P1 points 8 bytes inside the block of 32 bytes at P2",
                "Backtrace at time of allocation of P2:",
                &format!("#00 {FRONT} (malloc)"),
                "#01 bugs (interior_free)",
                "#02 bugs (main)",
                DIVIDER,
            ]),
        ]
        .concat()
    );
    assert_eq!(
        bugs("interior-free", "verify_pointers backtrace"),
        reference
    );
}

#[test]
fn a_queued_block_keeps_its_allocation_backtrace_through_collections() {
    let program = compile_c(
        "freed_history",
        "tests/programs/freed_history.c",
        &["-O1", "-g", "-w"],
    );
    let out = run_under_front(
        program,
        &[],
        Some("free_track=16384 backtrace error_backtraces"),
        &[],
    );
    assert_done(&out);
    assert_eq!(
        normalised(&out, "freed_history"),
        strings(&[
            DIVIDER,
            "+++ ALLOCATION P1 USED AFTER FREE",
            "  allocation[5] = 0x77 (expected 0xef)",
            "Backtrace at time of free:",
            &format!("#00 {FRONT} (free)"),
            "#01 freed_history (victim_free)",
            "#02 freed_history (main)",
            DIVIDER,
            "Backtrace at time of allocation of P1:",
            &format!("#00 {FRONT} (malloc)"),
            "#01 freed_history (victim_alloc)",
            "#02 freed_history (main)",
            DIVIDER,
        ])
    );
}
