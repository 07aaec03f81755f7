//! record_allocs through the glibc front on a real threaded program (tests/programs/record.c):
//! one line per call in the spec's format, a thread_done line for the thread that exits, the
//! file written on SIGRTMAX-18 (and emptied), the rest at exit under `.PID`, the entry limit.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Output;

fn program() -> PathBuf {
    compile_c("record", "tests/programs/record.c", &["-O0", "-pthread"])
}

/// (pid, stdout) of a run.
fn run(options: &str, args: &[&str]) -> (u32, std::process::Output) {
    let out = run_under_front(program(), args, Some(options), &[]);
    assert_exit_code(&out, 0);
    let pid = stdout_of(&out)
        .strip_prefix("pid ")
        .and_then(|r| r.trim().parse().ok())
        .expect("pid line");
    (pid, out)
}

/// A line with its numbers replaced by placeholders: `T` a thread id, `P` a pointer, `N` a
/// timestamp, so the shapes can be compared exactly.
fn shape(line: &str, pid: u32) -> String {
    let mut f: Vec<String> = line.split(' ').map(str::to_string).collect();
    let tid = f[0].trim_end_matches(':');
    f[0] = if tid == pid.to_string() {
        "MAIN:".into()
    } else {
        "T:".into()
    };
    for x in f.iter_mut().skip(2) {
        if x.starts_with("0x") && x != "0x0" {
            *x = "P".into();
        }
    }
    f.join(" ")
}

/// Timestamps (start, end) are the two numbers after the type's fields; checks they are
/// monotonic and replaces them.
fn without_times(line: &str, fields: usize) -> String {
    let f: Vec<&str> = line.split(' ').collect();
    if f.len() < fields + 2 {
        return line.to_string();
    }
    let (s, e): (u64, u64) = (f[fields].parse().unwrap(), f[fields + 1].parse().unwrap());
    assert!(s > 0 && e >= s, "timestamps in {line}");
    let mut g: Vec<&str> = f[..fields].to_vec();
    g.push("S");
    g.push("E");
    g.extend(&f[fields + 2..]);
    g.join(" ")
}

/// The rest of the program's stderr line that starts with `prefix` (the values the test
/// programs print for the tests to compare with).
fn stderr_line(out: &Output, prefix: &str) -> String {
    stderr_of(out)
        .lines()
        .find_map(|l| l.strip_prefix(prefix).map(str::to_string))
        .unwrap_or_else(|| panic!("no stderr line starting with {prefix:?}"))
}

/// A record file in a scratch directory and options that write it on the signal and at exit.
fn recording_on_exit(name: &str) -> (PathBuf, String) {
    let dir = scratch_dir(name);
    let file = dir.join("rec.txt");
    let options = format!(
        "record_allocs record_allocs_file={} record_allocs_on_exit",
        file.display()
    );
    (file, options)
}

/// Runs the program in `mode` with records written on its signal and at exit; nothing may be
/// logged. Returns the record file, the pid, the output and the records written on the signal.
fn run_with_signal_write(name: &str, mode: &str) -> (PathBuf, u32, Output, String) {
    let (file, options) = recording_on_exit(name);
    let (pid, out) = run(&options, &[mode]);
    assert_eq!(malloc_debug_messages(&out), Vec::<String>::new());
    let on_signal = std::fs::read_to_string(&file).expect("file written on the signal");
    (file, pid, out, on_signal)
}

/// The file written at exit by process `pid`: the record file's name with `.<pid>` appended
/// (spec §7.5).
fn exit_records(file: &Path, pid: u32) -> String {
    let path = PathBuf::from(format!("{}.{pid}", file.display()));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn normalise(text: &str, pid: u32) -> Vec<String> {
    text.lines()
        .map(|l| {
            let s = shape(l, pid);
            let kind = s.split(' ').nth(1).unwrap_or_default().to_string();
            match kind.as_str() {
                "malloc" => without_times(&s, 4),
                "calloc" | "memalign" | "realloc" => without_times(&s, 5),
                "free" => without_times(&s, 3),
                // thread_done: its exit time.
                _ => match s.rsplit_once(' ') {
                    Some((head, t)) if t.parse::<u64>().is_ok_and(|t| t > 0) => format!("{head} E"),
                    _ => s,
                },
            }
        })
        .collect()
}

#[test]
fn every_call_type_signal_write_and_exit_write() {
    let (file, pid, out, first) = run_with_signal_write("record-all", "signal");
    // memalign's and posix_memalign's usable sizes, as the program saw them.
    let usable_line = stderr_line(&out, "usable ");
    let usable: Vec<&str> = usable_line.split(' ').collect();
    assert_eq!(
        normalise(&first, pid),
        [
            // stdout's buffer, for the pid line.
            "MAIN: malloc P 4096 S E",
            "MAIN: malloc P 100 S E",
            "MAIN: free P S E 104",
            "MAIN: calloc P 4 32 S E",
            "MAIN: realloc P P 300 S E 136",
            "MAIN: realloc 0x0 P 0 S E 312",
            "MAIN: malloc P 50 S E",
            "MAIN: free P S E 56",
            "MAIN: memalign P 64 104 S E",
            &format!("MAIN: free P S E {}", usable[0]),
            "MAIN: memalign P 32 7 S E",
            &format!("MAIN: free P S E {}", usable[1]),
            "MAIN: memalign P 16 32 S E",
            "MAIN: free P S E 40",
            // glibc's pthread_create (its thread's TLS block).
            "MAIN: calloc P 17 16 S E",
            "T: malloc P 10 S E",
            "T: free P S E 24",
            "T: malloc P 11 S E",
            "T: free P S E 24",
            "T: malloc P 12 S E",
            "T: free P S E 24",
            "T: thread_done 0x0 E",
        ]
    );
    // One thread id for all of the thread's lines.
    let tids: std::collections::BTreeSet<&str> = first
        .lines()
        .map(|l| l.split(':').next().unwrap())
        .collect();
    assert_eq!(tids.len(), 2, "{first}");
    // After the signal's write the entries start over: the exit file holds only what followed.
    let at_exit = exit_records(&file, pid);
    assert_eq!(
        normalise(&at_exit, pid),
        [
            "MAIN: malloc P 1 S E",
            "MAIN: free P S E 24",
            // stdout's buffer, freed by exit() before the exit-time write.
            "MAIN: free P S E 4104",
        ]
    );
}

#[test]
fn the_entry_limit_drops_later_calls_and_says_so() {
    let dir = scratch_dir("record-limit");
    let file = dir.join("rec.txt");
    let options = format!(
        "record_allocs=5 record_allocs_file={} record_allocs_on_exit",
        file.display()
    );
    let (pid, out) = run(&options, &[]);
    assert_eq!(
        malloc_debug_messages(&out),
        ["Maximum number of records added, all new operations will be dropped."]
    );
    let text = exit_records(&file, pid);
    assert_eq!(text.lines().count(), 5, "{text}");
    assert!(!file.exists(), "no signal, no plain file");
}

#[test]
fn nothing_to_write_and_unwritable_files_are_reported() {
    let (_, out) = run(
        "record_allocs record_allocs_file=/nonexistent-md-dir/rec.txt record_allocs_on_exit",
        &[],
    );
    let messages = malloc_debug_messages(&out);
    assert_eq!(messages.len(), 1, "{messages:?}");
    assert!(
        messages[0].starts_with("Cannot create record alloc file /nonexistent-md-dir/rec.txt.")
            && messages[0].ends_with(": No such file or directory"),
        "{messages:?}"
    );
}

#[test]
fn verbose_names_the_signal() {
    let dir = scratch_dir("record-verbose");
    let options = format!(
        "record_allocs verbose record_allocs_file={}",
        dir.join("r").display()
    );
    let (pid, out) = run(&options, &[]);
    let name = progname(program());
    assert_eq!(
        malloc_debug_messages(&out),
        [
            format!("{name}: Run: 'kill -46 {pid}' to dump the allocation records."),
            format!("{name}: malloc debug enabled"),
        ]
    );
}

#[test]
fn allocator_stats_on_signal_and_at_exit() {
    let (_, out) = run(
        "log_allocator_stats_on_signal log_allocator_stats_on_exit",
        &["stats"],
    );
    // glibc's mallopt accepts M_LOG_STATS (-205) without complaint (it ignores unknown
    // parameters), so no failure line follows; bionic's allocators log their statistics.
    let once = ["Logging allocator stats..."];
    assert_eq!(malloc_debug_messages(&out), [once, once].concat());
    let lines = log_lines(&out.stderr);
    assert!(lines.iter().all(|l| l.prio == 'I'), "INFO lines");
    // Without the signal option the signal is not even handled by the library.
    let (_, out) = run("log_allocator_stats_on_exit", &[]);
    assert_eq!(malloc_debug_messages(&out), once);
}

#[test]
fn a_fork_child_reads_its_own_page_table() {
    let (file, options) = recording_on_exit("record-fork");
    let (_, out) = run(&options, &["fork"]);
    let child: u32 = stderr_line(&out, "child ")
        .trim()
        .parse()
        .expect("child pid");
    let text = exit_records(&file, child);
    let lines: Vec<&str> = text.lines().collect();
    // The child's malloc of 1 MiB, then its free with every byte present (the block was written
    // whole); the parent's page table has no such mapping and would give 0.
    let at = lines
        .iter()
        .position(|l| l.contains(" malloc ") && l.contains(" 1048576 "))
        .unwrap_or_else(|| panic!("the child's malloc in:\n{text}"));
    let pointer = lines[at].split(' ').nth(2).unwrap();
    let free = lines[at + 1..]
        .iter()
        .find(|l| l.contains(" free ") && l.split(' ').nth(2) == Some(pointer))
        .unwrap_or_else(|| panic!("the child's free in:\n{text}"));
    let present: u64 = free.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(present >= 1 << 20, "{free}");
}

#[test]
fn calls_made_during_a_signal_write_wait_and_are_recorded() {
    let (file, pid, _, on_signal) = run_with_signal_write("record-threads", "threads");
    let at_exit = exit_records(&file, pid);
    // Per worker thread: every one of its 40,000 calls, in one file or the other, then its
    // thread_done; nothing lost while the signal's write was going on.
    let mut per_thread: std::collections::BTreeMap<&str, (usize, usize)> = Default::default();
    for line in on_signal.lines().chain(at_exit.lines()) {
        let (tid, rest) = line.split_once(": ").expect("tid");
        if tid == pid.to_string() {
            continue;
        }
        let e = per_thread.entry(tid).or_default();
        if rest.starts_with("thread_done") {
            e.1 += 1;
        } else {
            e.0 += 1;
        }
    }
    let mut counts: Vec<(usize, usize)> = per_thread.values().copied().collect();
    counts.sort();
    // (The program's first thread, before the four: 3 mallocs and 3 frees.)
    assert_eq!(
        counts,
        [(6, 1), (40_000, 1), (40_000, 1), (40_000, 1), (40_000, 1)],
        "{per_thread:?}"
    );
    // The write happened while the workers were allocating: both files hold some of their calls.
    let workers_in = |text: &str| {
        text.lines()
            .filter(|l| !l.starts_with(&format!("{pid}:")))
            .count()
    };
    assert!(workers_in(&on_signal) > 0 && workers_in(&at_exit) > 0);
}
