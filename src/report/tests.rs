//! The heap dump's text format and the merging of equal records, in process (the dump of a
//! process with live blocks is tested through the built library: tests/backtrace.rs).

use super::*;
use std::string::String;
use std::vec::Vec;

fn record(size: usize, zygote: bool, backtrace_id: u32) -> LiveBlock {
    LiveBlock {
        pointer: 0x1000 + size,
        size,
        zygote,
        backtrace_id,
        frames: 0,
    }
}

#[test]
fn only_adjacent_equal_records_merge() {
    let records = [
        record(16, false, 7),
        record(16, false, 7),
        record(16, true, 7),
        record(16, false, 7),
        record(32, false, 7),
        record(32, false, 8),
        record(32, false, 8),
    ];
    let runs: Vec<(usize, bool, u32, usize)> = unique(records.iter())
        .map(|u| (u.first.size, u.first.zygote, u.first.backtrace_id, u.count))
        .collect();
    assert_eq!(
        runs,
        [
            (16, false, 7, 2),
            (16, true, 7, 1),
            (16, false, 7, 1),
            (32, false, 7, 1),
            (32, false, 8, 2),
        ]
    );
    assert_eq!(unique([].iter()).count(), 0);
}

/// What the writer wrote into a file descriptor, read back.
fn written(write: impl FnOnce(&mut FdWriter)) -> String {
    // SAFETY: tmpfile has no preconditions.
    let file = unsafe { libc::tmpfile() };
    assert!(!file.is_null());
    // SAFETY: a fresh stdio file of our own.
    let fd = unsafe { libc::fileno(file) };
    let mut w = FdWriter::new(fd);
    write(&mut w);
    assert!(w.flush());
    let text = std::fs::read_to_string(format!("/proc/self/fd/{fd}")).unwrap();
    // SAFETY: closing our own stdio file.
    unsafe { libc::fclose(file) };
    text
}

#[test]
fn an_empty_heap_dump_has_the_v1_2_header_the_maps_and_end() {
    let state = crate::state::for_tests("backtrace=12");
    let text = written(|w| write_dump(state, w));
    let expected_head = "Android Native Heap Dump v1.2\n\n\
                         Build fingerprint: 'unknown'\n\n\
                         Total memory: 0\n\
                         Allocation records: 0\n\
                         Backtrace size: 12\n\n\
                         MAPS\n";
    assert!(text.starts_with(expected_head), "{text}");
    assert!(text.ends_with("END\n"), "{text}");
    // The maps section is this process's /proc/self/maps, whole.
    let maps = &text[expected_head.len()..text.len() - "END\n".len()];
    assert!(maps.lines().count() > 5, "{maps}");
    assert!(
        maps.lines().all(|l| l.split_whitespace().count() >= 5),
        "{maps}"
    );
}

#[unsafe(no_mangle)]
#[inline(never)]
extern "C" fn report_tests_named_function() -> usize {
    core::hint::black_box(42)
}

#[test]
fn bt_info_names_the_map_the_function_and_the_offsets() {
    let pc = report_tests_named_function as *const () as usize + 4;
    let text = written(|w| write_bt_info(w, &[pc, 0]));
    let exe = std::env::current_exe().unwrap();
    let fields: Vec<&str> = text.trim_end().split(['{', '}']).collect();
    assert_eq!(fields[0], "  bt_info ", "{text}");
    let named = fields[1];
    assert!(
        named.starts_with(&format!("\"{}\" ", exe.display())),
        "{text}"
    );
    assert!(
        named.ends_with("\"report_tests_named_function\" 4"),
        "{text}"
    );
    // A pc in no map: its absolute value, no map name, no function.
    assert_eq!(fields[3], "\"\" 0 \"\" 0", "{text}");
    assert!(text.ends_with("}\n"));
}
