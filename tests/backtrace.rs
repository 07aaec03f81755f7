//! Leak info (docs/spec/abi.md#leak-info) and the backtrace controls through the C ABI, driven the
//! way bionic drives the library (tests/backtrace/driver.c, one scenario per process): entry
//! layout, sort order and merging of identical call sites, the zygote bit, total_memory, the empty
//! case, the size filters, the enable-on-signal toggle and malloc_backtrace.

mod common;

use common::*;

fn run(scenario: &str, options: &str) -> Vec<String> {
    run_with(scenario, options, &[]).0
}

/// (stdout lines, malloc_debug log messages) of a scenario with extra arguments.
fn run_with(scenario: &str, options: &str, extra: &[&str]) -> (Vec<String>, Vec<String>) {
    // -O0: each allocating loop keeps one call site (so its blocks share one backtrace).
    let driver = compile_c(
        "bt_driver",
        "tests/backtrace/driver.c",
        &["-O0", "-rdynamic"],
    );
    let mut cmd = clean_command(driver);
    cmd.arg(lib_path()).arg(scenario).arg(options).args(extra);
    let out = cmd.output().unwrap();
    assert_exit_code(&out, 0);
    let lines = stdout_of(&out)
        .lines()
        .filter(|l| *l != "initialize=1")
        .map(str::to_string)
        .collect();
    (lines, malloc_debug_messages(&out))
}

/// Entries as (size with zygote bit, count), asserting each has frames.
fn entries(lines: &[String]) -> Vec<(String, usize)> {
    lines
        .iter()
        .filter_map(|l| l.strip_prefix("entry "))
        .map(|e| {
            let f: Vec<&str> = e.split(' ').collect();
            assert!(f[2].parse::<usize>().unwrap() > 0, "frames recorded: {e}");
            (f[0].to_string(), f[1].parse().unwrap())
        })
        .collect()
}

/// Sizes (hex) of the entries that have frames, in buffer order.
fn sizes_with_frames(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .filter_map(|l| l.strip_prefix("entry "))
        .filter(|e| !e.ends_with(" 0"))
        .map(|e| e.split(' ').next().unwrap().to_string())
        .collect()
}

fn totals(lines: &[String]) -> String {
    lines.last().cloned().unwrap_or_default()
}

#[test]
fn identical_sites_merge_sizes_descend_zygote_last() {
    let lines = run("sites", "backtrace=4");
    assert_eq!(
        entries(&lines),
        [("c8".into(), 2), ("64".into(), 3), ("80000032".into(), 1)]
    );
    assert_eq!(
        totals(&lines),
        "total 750 info_size 48 overall 144 frames 4 null 0"
    );
}

#[test]
fn default_frames_give_the_reference_entry_size() {
    let lines = run("sites", "backtrace");
    assert_eq!(
        totals(&lines),
        "total 750 info_size 144 overall 432 frames 16 null 0"
    );
}

#[test]
fn size_filters_leave_allocations_without_frames_out() {
    // backtrace_min_size / backtrace_max_size / backtrace_size keep only matching sizes.
    for (options, kept) in [
        ("backtrace backtrace_min_size=100", vec!["3e8", "64"]),
        ("backtrace backtrace_max_size=100", vec!["64", "a"]),
        ("backtrace backtrace_size=100", vec!["64"]),
    ] {
        let lines = run("sizes", options);
        assert_eq!(sizes_with_frames(&lines), kept, "{options}: {lines:?}");
    }
}

#[test]
fn enable_on_signal_toggles_capture() {
    // Starts off: only the allocation made between the two signals has a backtrace.
    // With a guard the ids (or "none") are in the headers (docs/design.md, "Presence map").
    for extra in ["", " guard"] {
        let lines = run("toggle", &format!("backtrace_enable_on_signal{extra}"));
        assert_eq!(entries(&lines), [("16".into(), 1)], "{extra}");
        // With `backtrace` too, capture starts on and the first signal turns it off.
        let lines = run(
            "toggle",
            &format!("backtrace backtrace_enable_on_signal{extra}"),
        );
        assert_eq!(sizes_with_frames(&lines), ["21", "b"], "{extra}: {lines:?}");
    }
}

#[test]
fn nothing_tracked_gives_an_empty_buffer() {
    assert_eq!(
        run("empty", "backtrace"),
        ["total 0 info_size 0 overall 0 frames 0 null 1"]
    );
}

#[test]
fn malloc_backtrace_returns_the_allocation_frames() {
    // With a guard the id is in the block's header (docs/design.md, "Presence map").
    for options in [
        "backtrace",
        "backtrace guard",
        "backtrace rear_guard leak_track",
    ] {
        let lines = run("malloc_backtrace", options);
        let f: Vec<&str> = lines[0].split(' ').collect();
        // site_a, main, libc's start code, _start: at least the first two, main among them; an
        // unknown pointer has none.
        assert!(f[1].parse::<usize>().unwrap() >= 2, "{options}: {lines:?}");
        assert_eq!(
            f[2..],
            ["main", "1", "unknown", "0"],
            "{options}: {lines:?}"
        );
    }
}

#[test]
fn dump_heap_writes_records_and_bt_info_under_backtrace_full() {
    let dir = scratch_dir("bt-abi");
    let path = dir.join("heap.txt");
    let path_str = path.to_str().unwrap();
    let (lines, log) = run_with("dump", "backtrace=8 backtrace_full", &[path_str]);
    assert_eq!(lines, ["dumped"]);
    assert_eq!(log, [format!("Dumping to file: {path_str}")]);
    let text = std::fs::read_to_string(&path).unwrap();
    let body: Vec<&str> = text.split("MAPS\n").next().unwrap().lines().collect();
    assert_eq!(body[0], "Android Native Heap Dump v1.2");
    assert_eq!(
        body[4..7],
        [
            "Total memory: 500",
            "Allocation records: 2",
            "Backtrace size: 8"
        ]
    );
    // Each record line is followed by its bt_info line naming the driver's functions.
    assert!(
        body[8].starts_with("z 0  sz      300  num    1  bt "),
        "{text}"
    );
    assert!(body[9].starts_with("  bt_info {\""), "{text}");
    assert!(body[9].contains(" \"site_b\" "), "{text}");
    assert!(
        body[10].starts_with("z 0  sz      100  num    2  bt "),
        "{text}"
    );
    assert!(body[11].contains(" \"site_a\" "), "{text}");
    assert!(text.ends_with("END\n"));
    // MAPS is the process's own: the ELF files the library mapped to name bt_info's functions
    // are gone by then (each file is mapped from offset 0 once, by the loader).
    let maps = text.split("MAPS\n").nth(1).unwrap();
    let mut offset_zero: std::collections::HashMap<&str, usize> = Default::default();
    for line in maps.lines().filter(|l| *l != "END") {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() >= 6 && f[5].starts_with('/') && u64::from_str_radix(f[2], 16) == Ok(0) {
            *offset_zero.entry(f[5]).or_default() += 1;
        }
    }
    assert!(
        offset_zero.values().all(|&n| n == 1) && !offset_zero.is_empty(),
        "{offset_zero:?}\n{maps}"
    );
    // Without backtrace_full: no bt_info lines.
    let (_, _) = run_with("dump", "backtrace=8", &[path_str]);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(!text.contains("bt_info"));
    // An unwritable path: logged, nothing else happens.
    let missing = dir.join("no/such/dir/heap.txt");
    let missing = missing.to_str().unwrap();
    let (lines, log) = run_with("dump", "backtrace", &[missing]);
    assert_eq!(lines, ["dumped"]);
    assert_eq!(log, [format!("Unable to create file: {missing}")]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn write_malloc_leak_info_goes_through_a_stream_without_a_descriptor() {
    let (lines, log) = run_with("write_leak_info", "backtrace", &[]);
    assert_eq!(log, Vec::<String>::new());
    assert_eq!(lines[0], "Android Native Heap Dump v1.2");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("z 0  sz      100  num    1  bt "))
    );
    assert_eq!(lines.last().unwrap(), "END");
}
