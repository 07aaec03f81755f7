//! Backtrace capture, leak info, malloc_backtrace and heap dumps (docs/spec/abi.md) driven the way
//! bionic drives the library: a C driver dlopens libc_malloc_debug.so (tests/leak_info/driver.c),
//! one scenario per process.

mod common;

use common::*;
use std::process::Output;

fn driver() -> std::path::PathBuf {
    compile_c("leak_info_driver", "tests/leak_info/driver.c", &[])
}

fn run(scenario: &str, options: &str, path: &str) -> Output {
    let mut cmd = clean_command(driver());
    cmd.arg(lib_path()).arg(scenario).arg(options).arg(path);
    cmd.output().expect("run driver")
}

fn ok(output: &Output) -> String {
    let out = stdout_of(output);
    assert!(
        output.status.success() && out.ends_with("done\n"),
        "driver failed: {out}\n{}",
        stderr_of(output)
    );
    out
}

#[test]
fn leak_info_layout_sort_merge_zygote_and_malloc_backtrace() {
    let out = ok(&run("leak-info", "backtrace", ""));
    assert!(out.contains("entry size=0x8000019"), "{out}");
    assert!(
        out.ends_with("overall=0 info_size=0 total=0 bt_size=0\ndone\n"),
        "{out}"
    );
    // With a guard the ids are in the headers, the same answers.
    assert_eq!(ok(&run("leak-info", "backtrace guard", "")), out);
}

#[test]
fn only_adjacent_identical_entries_merge() {
    let out = ok(&run("adjacency", "backtrace", ""));
    assert!(out.contains("entry size=0x40 num="), "{out}");
}

#[test]
fn leak_info_empty_and_untracked() {
    let out = ok(&run("leak-empty", "backtrace", ""));
    assert!(out.contains("overall=0 info_size=0 total=0 bt_size=0\n"));
    let output = run("leak-empty", "guard", "");
    ok(&output);
    assert_eq!(
        malloc_debug_messages(&output),
        vec![
            "get_malloc_leak_info: Allocations not being tracked, to enable set the option 'backtrace'."
        ]
    );
}

#[test]
fn leak_info_null_parameter_writes_nothing() {
    let output = run("leak-null", "backtrace", "");
    ok(&output);
    assert_eq!(
        malloc_debug_messages(&output),
        vec!["get_malloc_leak_info: At least one invalid parameter."]
    );
}

#[test]
fn backtrace_frames_option_sets_entry_width() {
    let out = ok(&run("leak-empty", "backtrace=4", ""));
    assert!(
        out.contains("overall=0 info_size=0 total=0 bt_size=0\n"),
        "{out}"
    );
}

#[test]
fn size_filters_keep_frameless_entries() {
    let out = ok(&run(
        "size-filter",
        "backtrace backtrace_min_size=100 backtrace_max_size=200",
        "",
    ));
    assert!(out.contains("entry size=0x1f4 num=1 frames=0\n"), "{out}");
    assert!(out.contains("entry size=0x96 num=1 frames="), "{out}");
    assert!(!out.contains("entry size=0x96 num=1 frames=0\n"), "{out}");
    assert!(out.contains("entry size=0x32 num=1 frames=0\n"), "{out}");
    let out = ok(&run("size-filter", "backtrace backtrace_size=150", ""));
    assert!(out.contains("entry size=0x96 num=1 frames="), "{out}");
    assert!(!out.contains("entry size=0x96 num=1 frames=0\n"), "{out}");
    assert!(out.contains("entry size=0x1f4 num=1 frames=0\n"), "{out}");
    assert!(out.contains("entry size=0x32 num=1 frames=0\n"), "{out}");
}

#[test]
fn enable_on_signal_excludes_earlier_allocations() {
    let out = ok(&run("enable-on-signal", "backtrace_enable_on_signal", ""));
    assert!(out.contains("entry size=0xc8 num=1 frames="), "{out}");
    assert!(!out.contains("entry size=0xc8 num=1 frames=0\n"), "{out}");
    assert!(!out.contains("entry size=0x64"), "{out}");
}

/// Parses a v1.2 dump: returns (record lines, maps text) after checking header, totals and END.
fn parse_dump(text: &str, frames: usize) -> (Vec<String>, String) {
    let (head, rest) = text.split_at(text.find("\n\n").unwrap() + 2);
    assert_eq!(head, "Android Native Heap Dump v1.2\n\n");
    let mut lines = rest.split_inclusive('\n');
    assert!(lines.next().unwrap().starts_with("Build fingerprint: '"));
    assert_eq!(lines.next().unwrap(), "\n");
    let total: usize = lines
        .next()
        .unwrap()
        .strip_prefix("Total memory: ")
        .unwrap()
        .trim_end()
        .parse()
        .unwrap();
    let count: usize = lines
        .next()
        .unwrap()
        .strip_prefix("Allocation records: ")
        .unwrap()
        .trim_end()
        .parse()
        .unwrap();
    assert_eq!(lines.next().unwrap(), format!("Backtrace size: {frames}\n"));
    assert_eq!(lines.next().unwrap(), "\n");
    let mut records = Vec::new();
    let mut sum = 0usize;
    for line in lines.by_ref() {
        if line == "MAPS\n" {
            break;
        }
        if line.starts_with("  bt_info") {
            records.push(line.to_string());
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(
            (words[0], words[2], words[4], words[6]),
            ("z", "sz", "num", "bt")
        );
        let sz: usize = words[3].parse().unwrap();
        let num: usize = words[5].parse().unwrap();
        sum += sz * num;
        records.push(line.to_string());
    }
    let maps: String = lines.collect();
    assert!(maps.ends_with("END\n"), "{maps}");
    assert_eq!(
        records
            .iter()
            .filter(|l| !l.starts_with("  bt_info"))
            .count(),
        count
    );
    assert_eq!(sum, total);
    (records, maps[..maps.len() - 4].to_string())
}

fn check_record(line: &str, z: u8, sz: usize, num: usize) {
    let prefix = format!("z {z}  sz {sz:>8}  num    {num}  bt");
    assert!(line.starts_with(&prefix), "{line:?} vs {prefix:?}");
    let frames = &line[prefix.len()..line.len() - 1];
    assert!(!frames.is_empty(), "{line:?}");
    for f in frames.strip_prefix(' ').unwrap().split(' ') {
        assert!(u64::from_str_radix(f, 16).unwrap() != 0, "{line:?}");
        assert_eq!(f, f.to_lowercase());
    }
}

#[test]
fn dump_heap_v1_2_format() {
    let dir = scratch_dir("leak-info-dump");
    let path = dir.join("heap.txt");
    let output = run("dump-heap", "backtrace", path.to_str().unwrap());
    assert!(ok(&output).contains("maps-equal=1\n"));
    assert_eq!(
        malloc_debug_messages(&output),
        // The message ends with "\n"; logcat's threadtime layout drops a trailing newline.
        vec![format!("Dumping to file: {}", path.display())]
    );
    let text = std::fs::read_to_string(&path).unwrap();
    let (records, maps) = parse_dump(&text, 16);
    assert_eq!(records.len(), 3, "{text}");
    check_record(&records[0], 0, 300, 2);
    check_record(&records[1], 0, 20, 1);
    check_record(&records[2], 1, 1_000_000_000, 1);
    assert!(maps.contains("libc_malloc_debug.so"), "{maps}");
    assert!(maps.contains("[stack]"), "{maps}");
}

#[test]
fn dump_heap_full_has_bt_info() {
    let dir = scratch_dir("leak-info-dumpfull");
    let path = dir.join("heap.txt");
    ok(&run(
        "dump-heap",
        "backtrace backtrace_full",
        path.to_str().unwrap(),
    ));
    let text = std::fs::read_to_string(&path).unwrap();
    let (records, _) = parse_dump(&text, 16);
    assert_eq!(records.len(), 6, "{text}");
    for pair in records.chunks(2) {
        assert!(pair[1].starts_with("  bt_info {\""), "{text}");
        assert!(pair[1].contains("leak_info_driver"), "{text}");
    }
    assert!(
        text.contains("\"site_a\" ") || text.contains("\"site_b\" "),
        "{text}"
    );
}

#[test]
fn dump_heap_unwritable_path_logs_error() {
    let output = run("dump-heap", "backtrace", "/nonexistent-dir/heap.txt");
    ok(&output);
    assert_eq!(
        malloc_debug_messages(&output),
        vec!["Unable to create file: /nonexistent-dir/heap.txt"]
    );
}

#[test]
fn write_malloc_leak_info_to_file() {
    let dir = scratch_dir("leak-info-write");
    let path = dir.join("out.txt");
    let out = ok(&run("write-leak-info", "backtrace", path.to_str().unwrap()));
    assert!(out.contains("write=1\n"), "{out}");
    let text = std::fs::read_to_string(&path).unwrap();
    let body = text.strip_prefix("before\n").unwrap();
    let body = body.strip_suffix("after\n").unwrap();
    let (records, _) = parse_dump(body, 16);
    assert_eq!(records.len(), 1);
    check_record(&records[0], 0, 77, 1);
    let out = ok(&run("write-leak-info", "guard", path.to_str().unwrap()));
    assert!(out.contains("write=0\n"), "{out}");
}

/// Runs `scenario`, which raises SIGRTMAX-17 with `backtrace` on, and returns the one dump file's
/// name and text.
fn dump_on_signal(scenario: &str) -> (String, String) {
    let dir = scratch_dir(&format!("leak-info-{scenario}"));
    let prefix = dir.join("heap");
    let output = run(
        scenario,
        &format!("backtrace backtrace_dump_prefix={}", prefix.display()),
        "",
    );
    ok(&output);
    let files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let text = std::fs::read_to_string(dir.join(&files[0])).unwrap();
    (files[0].clone(), text)
}

fn has_record(text: &str, prefix: &str) -> bool {
    parse_dump(text, 16).0.iter().any(|r| r.starts_with(prefix))
}

/// The dump a signal asks for runs at the next free before the freed block leaves the table, as
/// the reference's does: the block being freed is in it, and in "Total memory".
#[test]
fn dump_on_signal_at_a_free_lists_the_block_being_freed() {
    let (_, text) = dump_on_signal("dump-on-signal-free");
    assert!(
        has_record(&text, "z 0  sz      123  num    1  bt "),
        "{text}"
    );
    assert!(
        has_record(&text, "z 0  sz       45  num    1  bt "),
        "{text}"
    );
    assert!(text.contains("Total memory: 168\n"), "{text}");
}

#[test]
fn dump_on_signal_at_next_malloc() {
    let (name, text) = dump_on_signal("dump-on-signal");
    assert!(name.starts_with("heap.") && name.ends_with(".txt"));
    assert!(
        has_record(&text, "z 0  sz      123  num    1  bt "),
        "{text}"
    );
}

#[test]
fn fork_while_another_thread_unwinds() {
    for options in ["backtrace", "backtrace backtrace_full"] {
        let mut cmd = clean_command(driver());
        cmd.arg(lib_path()).arg("fork-unwind").arg(options).arg("");
        cmd.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = cmd.spawn().expect("spawn driver");
        // Generous bound: a deadlocked child (or parent) fails the test instead of hanging it.
        if !wait_or_kill(&mut child, std::time::Duration::from_secs(120)) {
            let output = child.wait_with_output().unwrap();
            panic!("deadlock with {options}: {}", stdout_of(&output));
        }
        let output = child.wait_with_output().unwrap();
        let out = ok(&output);
        assert!(out.contains("forks=1000\n"), "{out}");
    }
}
