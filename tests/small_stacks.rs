//! Reports asked for from a thread with the smallest stack glibc allows (16 KiB): the exit leak
//! report, write_malloc_leak_info, the heap dump and the unreachable check that signals ask
//! for, and error reports from inside the thread's allocation calls (whose first capture also
//! searches the unwinder's tables). Each is deeper than such a stack (symbolization,
//! kilobyte-sized records, CFI evaluation), and each crashed the program before the library
//! ran that work on a stack of its own (src/report_stack.rs, docs/design.md "Reports run on a
//! stack of their own").

mod common;

use common::*;

fn program() -> std::path::PathBuf {
    compile_c(
        "small_stack",
        "tests/programs/small_stack.c",
        &["-O1", "-g"],
    )
}

#[test]
fn the_exit_report_of_a_thread_with_a_small_stack_is_complete() {
    let out = run_under_front(program(), &["exit"], Some("backtrace leak_track"), &[]);
    assert_exit_code(&out, 0);
    let messages = malloc_debug_messages(&out);
    let name = progname(program());
    // The 50 blocks the thread leaked (16..65 bytes), each once, each with its backtrace (glibc's
    // thread-control block of the thread is reported too).
    let leaks: Vec<&String> = messages
        .iter()
        .filter(|m| m.starts_with(&format!("+++ {name} leaked block of size ")))
        .collect();
    for size in 16..66 {
        let prefix = format!("+++ {name} leaked block of size {size} at 0x");
        assert_eq!(
            leaks.iter().filter(|l| l.starts_with(&prefix)).count(),
            1,
            "size {size}: {messages:#?}"
        );
    }
    let total = leaks.len();
    assert!(
        leaks
            .iter()
            .enumerate()
            .all(|(i, l)| l.ends_with(&format!(" (leak {} of {total})", i + 1))),
        "{leaks:#?}"
    );
    let frames = messages
        .iter()
        .filter(|m| m.contains("(leak_here+"))
        .count();
    assert_eq!(frames, 50, "each leak's backtrace names leak_here");
}

#[test]
fn write_malloc_leak_info_from_a_thread_with_a_small_stack() {
    let out = run_under_front(program(), &["write"], Some("backtrace"), &[]);
    assert_exit_code(&out, 0);
    let stdout = stdout_of(&out);
    assert!(stdout.ends_with("done write\n"), "{stdout}");
    assert!(stdout.contains("Total memory: "), "{stdout}");
    // The 50 blocks are listed (one line each: sizes are distinct).
    for size in 16..66 {
        assert!(
            stdout.contains(&format!("z 0  sz {size:>8}  num    1  bt ")),
            "size {size}: {stdout}"
        );
    }
}

#[test]
fn a_heap_dump_asked_by_signal_on_a_thread_with_a_small_stack() {
    let dir = scratch_dir("small-stack-dump");
    let prefix = dir.join("heap");
    let options = format!("backtrace backtrace_dump_prefix={}", prefix.display());
    let out = run_under_front(program(), &["dump"], Some(&options), &[]);
    assert_exit_code(&out, 0);
    assert_eq!(stdout_of(&out), "done dump\n");
    let dump = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with(".txt"))
        .expect("a heap dump file");
    let text = std::fs::read_to_string(dump).unwrap();
    assert!(
        text.starts_with("Android Native Heap Dump v1.2\n"),
        "{text}"
    );
    assert!(text.contains("z 0  sz       65  num    1  bt "), "{text}");
    assert!(text.ends_with("END\n"), "{text}");
}

#[test]
fn an_unreachable_check_asked_by_signal_on_a_thread_with_a_small_stack() {
    let out = run_under_front(
        program(),
        &["check"],
        Some("backtrace leak_track check_unreachable_on_signal"),
        &[],
    );
    assert_exit_code(&out, 0);
    assert_eq!(stdout_of(&out), "done check\n");
    let messages = malloc_debug_messages(&out);
    let start = messages
        .iter()
        .position(|m| m == "Starting to check for unreachable memory.")
        .unwrap_or_else(|| panic!("{messages:#?}"));
    // The 50 blocks are kept in a global array: reachable, so the check finds nothing.
    let result = messages.get(start + 1).map_or("", String::as_str);
    assert!(
        result.starts_with("0 bytes in 0 allocations unreachable out of ")
            && result.ends_with(" in 51 allocations"),
        "{messages:#?}"
    );
}

/// An error report from inside a free on the small thread: the header line, the backtrace at
/// the time of failure (taken on the thread's own stack, so it names the program's `drop`), and
/// the allocation's backtrace.
fn error_report_of(mode: &str) -> Vec<String> {
    let out = run_under_front(
        program(),
        &[mode],
        Some("backtrace guard free_track leak_track error_backtraces"),
        &[],
    );
    assert_exit_code(&out, 0);
    assert_eq!(stdout_of(&out), format!("done {mode}\n"));
    malloc_debug_messages(&out)
}

fn assert_failure_backtrace_names(messages: &[String], function: &str) {
    let at = messages
        .iter()
        .position(|m| m == "Backtrace at time of failure:")
        .unwrap_or_else(|| panic!("{messages:#?}"));
    assert!(
        messages[at + 1..]
            .iter()
            .take_while(|m| m.starts_with("          #"))
            .any(|m| m.contains(&format!("({function}+"))),
        "{messages:#?}"
    );
}

#[test]
fn an_overflow_found_on_a_thread_with_a_small_stack_is_reported() {
    let messages = error_report_of("overflow");
    assert!(
        messages.iter().any(|m| m.starts_with("+++ ALLOCATION 0x")
            && m.ends_with(" SIZE 20 HAS A CORRUPTED REAR GUARD")),
        "{messages:#?}"
    );
    assert_failure_backtrace_names(&messages, "drop");
}

#[test]
fn a_double_free_on_a_thread_with_a_small_stack_is_reported() {
    let messages = error_report_of("double");
    assert!(
        messages
            .iter()
            .any(|m| m.starts_with("+++ ALLOCATION 0x") && m.ends_with(" USED AFTER FREE (free)")),
        "{messages:#?}"
    );
    assert!(messages.iter().any(|m| m == "Backtrace of original free:"));
    assert_failure_backtrace_names(&messages, "drop");
}
