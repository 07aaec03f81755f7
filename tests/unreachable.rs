//! check_unreachable_on_signal on a real multi-threaded program under the glibc front
//! (tests/programs/unreachable.c): after SIGRTMAX-16 the next allocation logs, in
//! libmemunreachable's layout, exactly the blocks nothing references any more. Blocks held by a
//! global, by another thread's stack and by a chain of heap blocks hanging off a global are not
//! reported; the dropped 40-byte block is, folding the 100-byte block only it points to.

mod common;

use common::*;
use std::process::Output;

fn program() -> std::path::PathBuf {
    compile_c(
        "unreachable",
        "tests/programs/unreachable.c",
        &["-O1", "-pthread"],
    )
}

fn run(options: &str, args: &[&str]) -> Output {
    let out = run_under_front(program(), args, Some(options), &[]);
    assert_exit_code(&out, 0);
    assert_eq!(stdout_of(&out), "checked\n");
    out
}

/// The program's allocations when the check runs: the global's 64 bytes, the 3 × 32-byte chain,
/// the holder thread's 48 bytes and glibc's 272-byte thread block, the 40-byte leak and the
/// 100 bytes it points to.
const SUMMARY: &str = "140 bytes in 2 allocations unreachable out of 620 bytes in 8 allocations";

/// The leak's record, with its address (from the record itself) substituted in.
fn expected_leak(record: &str) -> String {
    let addr = record
        .strip_prefix("  40 bytes unreachable at ")
        .and_then(|r| r.split('\n').next())
        .unwrap_or_else(|| panic!("leak record {record:?}"));
    let base = usize::from_str_radix(addr, 16).expect("hex address");
    let inner = &record.split('\n').nth(3).expect("first contents line")[..]
        .split_once(": ")
        .expect("contents line")
        .1[..24];
    format!(
        "  40 bytes unreachable at {addr}\n   referencing 100 unreachable bytes in 1 allocation\n   \
         first 32 bytes of contents:\n   {addr}: {inner}75 6e 72 65 61 63 68 61 {}unreacha\n   \
         {:x}: 62 6c 65 21 00 00 00 00 00 00 00 00 00 00 00 00 ble!............",
        ascii_of(inner),
        base + 16
    )
}

/// The ASCII column for the first 8 bytes (the pointer to the inner block), as printed.
fn ascii_of(hex: &str) -> String {
    hex.split_whitespace()
        .map(|b| {
            let b = u8::from_str_radix(b, 16).unwrap();
            if (b' '..0x7f).contains(&b) {
                b as char
            } else {
                '.'
            }
        })
        .collect()
}

/// malloc_debug's records, each joined back into one string (a multi-line record is logged as
/// consecutive lines with the same time stamp, pid and tid; here each message line that does not
/// start a new record is indented).
fn records(out: &Output) -> Vec<String> {
    let mut records: Vec<String> = Vec::new();
    for line in log_lines(&out.stderr)
        .into_iter()
        .filter(|l| l.tag == "malloc_debug")
    {
        let continues = line.msg.starts_with("   ")
            && records
                .last()
                .is_some_and(|r| r.starts_with("  40 bytes unreachable at "));
        if continues {
            let last = records.last_mut().unwrap();
            last.push('\n');
            last.push_str(&line.msg);
        } else {
            records.push(line.msg);
        }
    }
    records
}

#[test]
fn dropped_block_is_reported_and_reachable_ones_are_not() {
    let out = run("check_unreachable_on_signal", &[]);
    let records = records(&out);
    assert_eq!(records.len(), 3, "{records:#?}");
    assert_eq!(records[0], "Starting to check for unreachable memory.");
    assert_eq!(records[1], SUMMARY);
    assert_eq!(records[2], expected_leak(&records[2]));
    let lines = log_lines(&out.stderr);
    assert_eq!(lines[0].prio, 'I');
    assert!(lines[1..].iter().all(|l| l.prio == 'E'));
}

#[test]
fn with_backtraces_the_leak_names_where_it_was_allocated() {
    // With a guard the backtrace id is read from the block's header (docs/design.md, "Presence
    // map").
    for options in [
        "check_unreachable_on_signal backtrace",
        "check_unreachable_on_signal backtrace guard",
    ] {
        check_leak_names_its_allocation(options);
    }
}

fn check_leak_names_its_allocation(options: &str) {
    let out = run(options, &[]);
    let messages = malloc_debug_messages(&out);
    assert_eq!(messages[0], "Starting to check for unreachable memory.");
    assert_eq!(messages[1], SUMMARY);
    let frames: Vec<&String> = messages
        .iter()
        .skip_while(|m| !m.starts_with("   first 32 bytes"))
        .skip(3)
        .collect();
    assert!(
        frames[0].starts_with("          #00  pc "),
        "allocation backtrace after the contents: {messages:#?}"
    );
    assert!(
        frames.iter().any(|f| f.contains("/unreachable (leak+")),
        "the allocating function is named: {messages:#?}"
    );
}

#[test]
fn header_mode_and_free_track_see_the_same_heap() {
    for options in [
        "check_unreachable_on_signal guard",
        "check_unreachable_on_signal free_track",
    ] {
        let out = run(options, &[]);
        let records = records(&out);
        assert_eq!(records[1], SUMMARY, "{options}");
        assert_eq!(records[2], expected_leak(&records[2]), "{options}");
    }
}

#[test]
fn nothing_happens_without_the_signal() {
    let out = run("check_unreachable_on_signal", &["nosignal"]);
    assert_eq!(malloc_debug_messages(&out), Vec::<String>::new());
}

/// Checks racing frees in other threads (tests/programs/unreachable_race.c): every block is
/// referenced until its free returns, so no check may report one. A list of live blocks taken
/// before the check's fork reported those freed in between (39 of 500 checks). With guard the
/// live blocks are the presence map's (docs/design.md, "Presence map"), whose sizes the check
/// reads from headers.
#[test]
fn checks_racing_frees_report_nothing() {
    for options in [
        "check_unreachable_on_signal",
        "check_unreachable_on_signal guard",
    ] {
        checks_racing_frees_report_nothing_under(options);
    }
}

fn checks_racing_frees_report_nothing_under(options: &str) {
    const ROUNDS: usize = 500;
    let program = compile_c("unreachable_race", "tests/programs/unreachable_race.c", &[]);
    let out = run_under_front(program, &[&ROUNDS.to_string()], Some(options), &[]);
    assert_exit_code(&out, 0);
    assert_eq!(stdout_of(&out), format!("rounds {ROUNDS}\n"));
    let messages = malloc_debug_messages(&out);
    let summaries: Vec<&String> = messages
        .iter()
        .filter(|m| m.contains(" unreachable out of "))
        .collect();
    let false_reports: Vec<&&String> = summaries
        .iter()
        .filter(|m| !m.starts_with("0 bytes in 0 allocations unreachable out of "))
        .collect();
    assert_eq!(
        false_reports.len(),
        0,
        "{options}: checks reporting freed blocks: {false_reports:#?}"
    );
    // Nothing else was logged: one start and one summary per round.
    assert_eq!(messages.len(), 2 * ROUNDS, "{options}: one check per round");
    for pair in messages.chunks(2) {
        assert_eq!(pair[0], "Starting to check for unreachable memory.");
        assert!(pair[1].contains(" unreachable out of "), "{}", pair[1]);
    }
}
