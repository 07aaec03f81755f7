//! Real programs under the glibc front: the exit dump read the way heap-dump viewers read it
//! (header, records, MAPS, END), its frames symbolized through MAPS and the executable's symbol
//! table, and a dump requested with `kill -47` from a running multi-threaded program.

mod common;

use common::*;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

fn leaker() -> std::path::PathBuf {
    compile_c("leaker", programs_dir().join("leaker.c"), &["-ldl"])
}

struct Record {
    zygote: bool,
    size: usize,
    num: usize,
    frames: Vec<u64>,
}

struct Map {
    start: u64,
    end: u64,
    offset: u64,
    path: String,
}

struct Dump {
    total: usize,
    records: Vec<Record>,
    maps: Vec<Map>,
}

/// Reads a v1.2 dump like native_heapdump_viewer.py does, checking every structural line.
fn parse_dump(text: &str) -> Dump {
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("Android Native Heap Dump v1.2"));
    assert_eq!(lines.next(), Some(""));
    assert!(lines.next().unwrap().starts_with("Build fingerprint: '"));
    assert_eq!(lines.next(), Some(""));
    let field = |line: Option<&str>, name: &str| -> usize {
        line.unwrap().strip_prefix(name).unwrap().parse().unwrap()
    };
    let total = field(lines.next(), "Total memory: ");
    let count = field(lines.next(), "Allocation records: ");
    assert_eq!(field(lines.next(), "Backtrace size: "), 16);
    assert_eq!(lines.next(), Some(""));
    let mut records = Vec::new();
    for line in lines.by_ref() {
        if line == "MAPS" {
            break;
        }
        let w: Vec<&str> = line.split_whitespace().collect();
        assert_eq!((w[0], w[2], w[4], w[6]), ("z", "sz", "num", "bt"), "{line}");
        records.push(Record {
            zygote: w[1] == "1",
            size: w[3].parse().unwrap(),
            num: w[5].parse().unwrap(),
            frames: w[7..]
                .iter()
                .map(|f| u64::from_str_radix(f, 16).unwrap())
                .collect(),
        });
    }
    let mut maps = Vec::new();
    let mut ended = false;
    for line in lines.by_ref() {
        if line == "END" {
            ended = true;
            break;
        }
        let w: Vec<&str> = line.split_whitespace().collect();
        let (start, end) = w[0].split_once('-').unwrap();
        maps.push(Map {
            start: u64::from_str_radix(start, 16).unwrap(),
            end: u64::from_str_radix(end, 16).unwrap(),
            offset: u64::from_str_radix(w[2], 16).unwrap(),
            path: w.get(5).copied().unwrap_or("").to_string(),
        });
    }
    assert!(ended && lines.next().is_none(), "no END or text after it");
    assert_eq!(records.len(), count);
    assert_eq!(records.iter().map(|r| r.size * r.num).sum::<usize>(), total);
    Dump {
        total,
        records,
        maps,
    }
}

/// Function names of `frames` that fall in `exe`, through MAPS and `addr2line -f`.
fn symbolize(dump: &Dump, frames: &[u64], exe: &Path) -> Vec<String> {
    let exe_str = exe.to_str().unwrap();
    let rel: Vec<String> = frames
        .iter()
        .filter_map(|&pc| {
            let map = dump
                .maps
                .iter()
                .find(|m| m.start <= pc && pc < m.end && m.path == exe_str)?;
            // Return addresses point after the call: look up the call instruction.
            Some(format!("{:x}", pc - 1 - map.start + map.offset))
        })
        .collect();
    if rel.is_empty() {
        return Vec::new();
    }
    let out = Command::new("addr2line")
        .arg("-f")
        .arg("-e")
        .arg(exe)
        .args(&rel)
        .output()
        .expect("addr2line");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// Runs `leaker MODE` with backtrace, leak_track and an exit dump; its output and the dump.
fn run_to_exit_dump(exe: &Path, mode: &str) -> (std::process::Output, String) {
    run_to_exit_dump_with(exe, mode, "")
}

/// `run_to_exit_dump` with more options (`extra`, with its leading space).
fn run_to_exit_dump_with(exe: &Path, mode: &str, extra: &str) -> (std::process::Output, String) {
    let dir = scratch_dir(&format!("heap-dumps-{mode}{}", extra.replace(' ', "-")));
    let prefix = dir.join("heap");
    let options = format!(
        "backtrace leak_track backtrace_dump_on_exit backtrace_dump_prefix={}{extra}",
        prefix.display()
    );
    let output = run_under_front(exe, &[mode], Some(&options), &[]);
    assert_exit_code(&output, 0);
    let path = dir.join(format!("heap.{}.exit.txt", output_pid(&output)));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}\n{}", path.display(), stderr_of(&output)));
    (output, text)
}

#[test]
fn exit_dump_is_symbolized_and_agrees_with_leak_info() {
    let exe = leaker();
    let (output, text) = run_to_exit_dump(&exe, "exit");
    let out = stdout_of(&output);
    let line = out.lines().find(|l| l.starts_with("total=")).unwrap();
    let dump = parse_dump(&text);
    assert_eq!(
        line,
        format!(
            "total={} records={} bt_size=16",
            dump.total,
            dump.records.len()
        ),
        "{text}"
    );
    let leaks: Vec<&Record> = dump
        .records
        .iter()
        .filter(|r| (1000..1003).contains(&r.size))
        .collect();
    assert_eq!(leaks.iter().map(|r| r.num).sum::<usize>(), 30, "{text}");
    // One call site, so one stack: the first walk from it only leaves a ghost tag, the second
    // records a memo and the other 28 replay it (src/backtrace/memo.rs). Every capture must be
    // the walk's: one record per size, all with the same frames.
    assert_eq!(leaks.len(), 3, "{text}");
    assert!(leaks.iter().all(|r| r.frames == leaks[0].frames), "{text}");
    for r in &leaks {
        assert!(!r.zygote);
        let names = symbolize(&dump, &r.frames, &exe);
        assert_eq!(
            names.first().map(String::as_str),
            Some("leaky_function"),
            "{names:?}"
        );
        assert!(names.iter().any(|n| n == "main"), "{names:?}");
    }
}

#[test]
fn blocks_keep_their_backtraces_while_unused_records_are_collected() {
    // 24,576 allocations from 8192 distinct stacks, all but eight freed at once: the backtrace
    // table passes its collection threshold (4096 records) several times, each collection
    // freeing the records of freed blocks while the live ones keep theirs. With a guard the ids
    // are in the blocks' headers, and collections read them there (docs/design.md, "Presence
    // map").
    let exe = leaker();
    for extra in ["", " guard"] {
        let (output, text) = run_to_exit_dump_with(&exe, "churn", extra);
        check_kept_backtraces(&exe, &output, &text);
    }
}

fn check_kept_backtraces(exe: &Path, output: &std::process::Output, text: &str) {
    let dump = parse_dump(text);
    // Call site i allocates 16 + (i & 63) bytes; the kept ones are i = 7 + 1024k.
    let kept: Vec<&Record> = dump.records.iter().filter(|r| r.size == 23).collect();
    assert_eq!(kept.len(), 8, "{text}");
    let mut sites = Vec::new();
    for r in &kept {
        assert_eq!(r.num, 1, "{text}");
        let names = symbolize(&dump, &r.frames, exe);
        assert_eq!(names[..2], ["alloc_at_site", "main"], "{text}");
        // The program's first frame: the call site.
        sites.push(
            r.frames
                .iter()
                .find(|&&pc| symbolize(&dump, &[pc], exe).len() == 1),
        );
    }
    sites.sort();
    sites.dedup();
    assert_eq!(sites.len(), 8, "eight distinct call sites: {text}");
    assert!(
        !stderr_of(output).contains("does not have matching frame data"),
        "{}",
        stderr_of(output)
    );
}

/// The pid of the program, from its malloc_debug log lines.
fn output_pid(output: &std::process::Output) -> u32 {
    log_lines(&output.stderr)
        .first()
        .map(|l| l.pid)
        .expect("no log line")
}

#[test]
fn kill_47_dumps_from_a_running_multithreaded_program() {
    let exe = leaker();
    let dir = scratch_dir("heap-dumps-signal");
    let prefix = dir.join("heap");
    let options = format!("backtrace backtrace_dump_prefix={}", prefix.display());
    // The program churns until the test creates `marker`, after it has seen the dump.
    let marker = dir.join("any");
    let mut cmd = front_command(
        &exe,
        &["signal", marker.to_str().unwrap()],
        Some(&options),
        &[],
    );
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn leaker");
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let pid = loop {
        line.clear();
        assert!(stdout.read_line(&mut line).unwrap() > 0, "no ready line");
        if let Some(pid) = line.trim().strip_prefix("ready ") {
            break pid.to_string();
        }
    };
    let status = Command::new("kill").args(["-47", &pid]).status().unwrap();
    assert!(status.success());
    let dump_path = dir.join(format!("heap.{pid}.txt"));
    // The dump is written whole (temp + rename); then tell the program it may stop.
    let mut waited = 0;
    while !dump_path.exists() {
        std::thread::sleep(std::time::Duration::from_millis(20));
        waited += 1;
        assert!(waited < 3000, "no dump at {}", dump_path.display());
    }
    std::fs::write(&marker, "").unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "{}", stderr_of(&output));
    let text = std::fs::read_to_string(&dump_path).unwrap();
    let dump = parse_dump(&text);
    let leaks = dump
        .records
        .iter()
        .filter(|r| (1000..1003).contains(&r.size));
    assert_eq!(leaks.map(|r| r.num).sum::<usize>(), 5, "{text}");
    assert_eq!(
        malloc_debug_messages(&output),
        vec![format!("Dumping to file: {}", dump_path.display())]
    );
}
