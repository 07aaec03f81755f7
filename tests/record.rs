//! record_allocs through the glibc front on a real threaded program (tests/programs/record.c):
//! one line per call in the spec's format, a thread_done line for the thread that exits, the
//! file written in the SIGRTMAX-18 handler (and emptied), the rest at exit under `.PID`, the
//! entry limit, writes racing each other and the program's threads, refused targets.

mod common;
#[path = "common/record_times.rs"]
mod record_times;

use common::*;
use record_times::assert_times_within_reads;
use std::path::{Path, PathBuf};
use std::process::Output;

fn program() -> PathBuf {
    // -rdynamic: the storm mode's rename/renameat must be the ones the library calls. -z now:
    // no lazy binding inside the library's signal handler (it costs kilobytes of the 16 KiB
    // alternate stack the program gives its main thread; bionic never binds lazily).
    compile_c(
        "record",
        "tests/programs/record.c",
        &["-O0", "-pthread", "-rdynamic", "-Wl,-z,now"],
    )
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
/// (docs/spec/abi.md#writing).
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

/// What the program records before its mode starts, normalised: every call type on the main
/// thread, then a thread's calls and its thread_done. `usable`: the program's "usable" line
/// (memalign's and posix_memalign's usable sizes, as the program saw them).
fn records_before_the_mode(usable: &str) -> Vec<String> {
    let usable: Vec<&str> = usable.split(' ').collect();
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
    .map(String::from)
    .to_vec()
}

#[test]
fn every_call_type_signal_write_and_exit_write() {
    let (file, pid, out, first) = run_with_signal_write("record-all", "signal");
    assert_eq!(
        normalise(&first, pid),
        records_before_the_mode(&stderr_line(&out, "usable "))
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

/// At exit the record file is written before the allocator statistics (and the heap dump) are
/// logged, in the reference's order: the file's error comes first.
#[test]
fn the_exit_record_file_comes_before_the_allocator_statistics() {
    let (_, out) = run(
        "record_allocs record_allocs_file=/nonexistent-md-dir/rec.txt record_allocs_on_exit \
         log_allocator_stats_on_exit",
        &[],
    );
    let messages = malloc_debug_messages(&out);
    let record = messages
        .iter()
        .position(|m| m.starts_with("Cannot create record alloc file"));
    let stats = messages
        .iter()
        .position(|m| m == "Logging allocator stats...");
    assert!(record.is_some() && stats.is_some(), "{messages:?}");
    assert!(record < stats, "{messages:?}");
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
fn calls_made_during_a_signal_write_are_all_recorded() {
    let (file, pid, _, on_signal) = run_with_signal_write("record-threads", "threads");
    let at_exit = exit_records(&file, pid);
    // Per worker thread: every one of its 40,000 calls, in one file or the other, then its
    // thread_done; nothing lost or repeated while the signal's write was going on.
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

/// The handler writes the file itself (docs/spec/abi.md#writing): a program that allocates nothing
/// after the signal — here waiting in sigsuspend() — still gets its file, whole. No
/// /proc/self/pagemap descriptor is held (present bytes come from mincore, as on Android 17).
#[test]
fn the_signal_writes_the_file_while_the_program_waits() {
    use std::io::BufRead;
    let dir = scratch_dir("record-idle");
    let file = dir.join("rec.txt");
    let options = format!("record_allocs record_allocs_file={}", file.display());
    let mut child = front_command(program(), &["idle"], Some(&options), &[])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Should an assertion fail before the signal, the program must not wait for ever.
    struct KillOnPanic(u32);
    impl Drop for KillOnPanic {
        fn drop(&mut self) {
            if std::thread::panicking() {
                let _ = std::process::Command::new("kill")
                    .args(["-9", &self.0.to_string()])
                    .status();
            }
        }
    }
    let _guard = KillOnPanic(child.id());
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let pid: u32 = line.trim().strip_prefix("pid ").unwrap().parse().unwrap();
    line.clear();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");
    let open_files: Vec<PathBuf> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .collect();
    assert!(
        !open_files.iter().any(|f| f.ends_with("pagemap")),
        "{open_files:?}"
    );
    assert!(!file.exists(), "nothing written before the signal");
    let kill = std::process::Command::new("kill")
        .args(["-46", &pid.to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let out = child.wait_with_output().unwrap();
    assert_exit_code(&out, 0);
    assert_eq!(malloc_debug_messages(&out), Vec::<String>::new());
    let text = std::fs::read_to_string(&file).expect("the file written in the handler");
    assert_eq!(
        normalise(&text, pid),
        records_before_the_mode(&stderr_line(&out, "usable "))
    );
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1, "one file");
}

/// Checks that `line` is one whole record line (docs/spec/abi.md#line-format) and returns (tid,
/// kind, size).
fn parse_record(line: &str) -> (u32, String, u64) {
    let f: Vec<&str> = line.split(' ').collect();
    let tid = f[0].strip_suffix(':').and_then(|t| t.parse().ok());
    let hex = |x: &str| {
        x.strip_prefix("0x")
            .is_some_and(|h| u64::from_str_radix(h, 16).is_ok())
    };
    let numbers = |from: usize| f[from..].iter().all(|x| x.parse::<i64>().is_ok());
    let whole = tid.is_some()
        && f.len() >= 3
        && hex(f[2])
        && match f[1] {
            "malloc" => (f.len() == 4 || f.len() == 6) && numbers(3),
            "free" => f.len() == 6 && numbers(3),
            "calloc" | "memalign" => f.len() == 7 && numbers(3),
            "realloc" => (f.len() == 7 || f.len() == 8) && hex(f[3]) && numbers(4),
            "thread_done" => f.len() == 4 && numbers(3),
            _ => false,
        };
    assert!(whole, "torn or malformed record line {line:?}");
    let size = match f[1] {
        "malloc" => f[3].parse().unwrap(),
        _ => 0,
    };
    (tid.unwrap(), f[1].to_string(), size)
}

/// Signals land on every thread, in the middle of calls or not, while four threads make 40,000
/// recorded calls each, and keep coming while the process exits: the handler's writes and the
/// exit-time write run beside each other. The program links every version of a file the library
/// puts in place as `<name>.v<N>`: across all of them, each worker's calls appear exactly once,
/// every line is whole, and no temporary file is left.
#[test]
fn a_signal_storm_and_the_exit_write_lose_and_repeat_nothing() {
    let (file, options) = recording_on_exit("record-storm");
    let (pid, out) = run(&options, &["storm"]);
    let messages = malloc_debug_messages(&out);
    assert!(
        messages.iter().all(|m| m == "No alloc entries to write."),
        "{messages:?}"
    );
    let dir = file.parent().unwrap();
    let name = file.file_name().unwrap().to_str().unwrap().to_string();
    let exit_name = format!("{name}.{pid}");
    let mut versions = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let n = entry.unwrap().file_name().into_string().unwrap();
        let is_version = |base: &str| {
            n.strip_prefix(base)
                .and_then(|r| r.strip_prefix(".v"))
                .is_some_and(|v| v.parse::<u32>().is_ok())
        };
        if is_version(&exit_name) || (is_version(&name) && !n.starts_with(&exit_name)) {
            versions.push(n);
        } else {
            assert!(n == name || n == exit_name, "unexpected file {n}");
        }
    }
    let exit_versions = versions
        .iter()
        .filter(|v| v.starts_with(&exit_name))
        .count();
    // (None when a signal's write took the last entries just before the exit-time write.)
    assert!(exit_versions <= 1, "one exit-time file: {versions:?}");
    assert!(versions.len() >= 3, "writes on signals: {versions:?}");
    // Per worker thread: the malloc sizes seen, frees and thread_done lines.
    let mut workers: std::collections::BTreeMap<u32, (Vec<u64>, usize, usize)> = Default::default();
    for v in &versions {
        let text = std::fs::read_to_string(dir.join(v)).unwrap();
        assert!(text.ends_with('\n'), "{v} ends inside a line");
        for line in text.lines() {
            let (tid, kind, size) = parse_record(line);
            if tid == pid {
                continue;
            }
            let w = workers.entry(tid).or_default();
            match kind.as_str() {
                "malloc" => w.0.push(size),
                "free" => w.1 += 1,
                "thread_done" => w.2 += 1,
                _ => panic!("{line}"),
            }
        }
    }
    // The thread the program starts before its mode (records_before_the_mode), then the four.
    let first = workers
        .iter()
        .find(|(_, w)| w.1 == 3)
        .map(|(tid, _)| *tid)
        .expect("the first thread");
    assert_eq!(workers.remove(&first), Some((vec![10, 11, 12], 3, 1)));
    assert_eq!(workers.len(), 4, "{:?}", workers.keys());
    for (tid, (mut sizes, frees, done)) in workers {
        sizes.sort();
        assert!(
            sizes.iter().copied().eq(1..=20_000),
            "thread {tid}: {} mallocs",
            sizes.len()
        );
        assert_eq!((frees, done), (20_000, 1), "thread {tid}");
    }
}

/// Present bytes come from mincore() (docs/spec/android-versions.md#present-bytes), 2048 pages a
/// call: the values of the pagemap method for resident and untouched pages, and when a call fails
/// (pages of the block unmapped behind the allocator's back) `mincore failed: <strerror>` and the
/// bytes of the calls before it — where the pagemap method said -1.
#[test]
fn present_bytes_come_from_mincore_with_its_partial_count() {
    let (file, options) = recording_on_exit("record-present");
    let (pid, out) = run(&options, &["present"]);
    assert_eq!(
        malloc_debug_messages(&out),
        ["mincore failed: Out of memory"]
    );
    let offset: usize = stderr_line(&out, "offset ").trim().parse().unwrap();
    let mut expected = records_before_the_mode(&stderr_line(&out, "usable "));
    expected.extend([
        "MAIN: malloc P 1048576 S E".to_string(),
        // The first page from the block's start, then two whole pages.
        format!("MAIN: free P S E {}", 3 * 4096 - offset),
        "MAIN: malloc P 12582912 S E".to_string(),
        // The first call's 2048 pages, from the block's start; the second call failed.
        format!("MAIN: free P S E {}", 2048 * 4096 - offset),
        "MAIN: free P S E 4104".to_string(),
    ]);
    assert_eq!(normalise(&exit_records(&file, pid), pid), expected);
}

/// memalign's recorded alignment is the one the allocation used: in header mode (a guard option)
/// rounded up to a power of two and to the minimum alignment, as the reference records it
/// (`memalign(1, n)` under guard records 16); without a header, the caller's value.
#[test]
fn memalign_records_the_alignment_it_used() {
    for (guard, expected) in [("guard ", ["16", "64"]), ("", ["1", "48"])] {
        let (file, options) = recording_on_exit(&format!("record-align-{}", guard.len()));
        let (pid, _) = run(&format!("{guard}{options}"), &["align"]);
        let lines = normalise(&exit_records(&file, pid), pid);
        let memaligns: Vec<&String> = lines
            .iter()
            .filter(|l| l.starts_with("MAIN: memalign P") && l.contains(" 24 S E"))
            .collect();
        assert_eq!(
            memaligns,
            [
                &format!("MAIN: memalign P {} 24 S E", expected[0]),
                &format!("MAIN: memalign P {} 24 S E", expected[1]),
            ],
            "{guard}"
        );
    }
}

/// A target the reference's open(O_NOFOLLOW) refuses — a symlink, a directory — is reported with
/// its message and errno, nothing is written through it, and the entries are kept: the exit-time
/// file has them all.
#[test]
fn a_refused_target_is_reported_and_its_records_kept() {
    for (what, error) in [
        ("symlink", "Too many symbolic links encountered"),
        ("directory", "Is a directory"),
    ] {
        let (file, options) = recording_on_exit(&format!("record-refused-{what}"));
        let elsewhere = file.with_file_name("elsewhere");
        match what {
            "symlink" => std::os::unix::fs::symlink(&elsewhere, &file).unwrap(),
            _ => std::fs::create_dir(&file).unwrap(),
        }
        let (pid, out) = run(&options, &["signal"]);
        assert_eq!(
            malloc_debug_messages(&out),
            [format!(
                "Cannot create record alloc file {}: {error}",
                file.display()
            )],
            "{what}"
        );
        assert!(!elsewhere.exists(), "{what}: nothing written through it");
        let mut expected = records_before_the_mode(&stderr_line(&out, "usable "));
        expected.extend(
            [
                "MAIN: malloc P 1 S E",
                "MAIN: free P S E 24",
                "MAIN: free P S E 4104",
            ]
            .map(String::from),
        );
        assert_eq!(
            normalise(&exit_records(&file, pid), pid),
            expected,
            "{what}"
        );
        let left: Vec<_> = std::fs::read_dir(file.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left.len(), 2, "{what}: no temporary left: {left:?}");
    }
}

/// Timestamps are CLOCK_MONOTONIC (docs/spec/abi.md#what-each-call-records), also where the
/// library reads the CPU's counter instead of the kernel (docs/design.md, "The record_allocs
/// clock"): every malloc's start and end lie between the program's own clock reads around the
/// call, over 4,000 calls in 40 rounds with sleeps between them (so calls are timed before the
/// counter is calibrated, from many anchors, and after gaps past an anchor's reach). The slack
/// is a microsecond; the counter's error is nanoseconds.
#[test]
fn timestamps_lie_between_the_programs_own_clock_reads() {
    let (file, options) = recording_on_exit("record-clock");
    let (pid, out) = run(&options, &["clock"]);
    assert_times_within_reads(&exit_records(&file, pid), &stderr_of(&out), 4000);
}

/// Under an address-space limit far below the default ring's 512 MB (8M entries of 64 bytes),
/// record_allocs starts and records: the ring is mapped a chunk at a time as tickets reach it.
/// It refused to start before ("out of memory for the record_allocs entries").
#[test]
fn an_address_space_limit_leaves_room_to_record() {
    use std::os::unix::process::CommandExt;
    let program = compile_c("many_leaks", "tests/programs/many_leaks.c", &["-O1"]);
    let dir = scratch_dir("record-rlimit-as");
    let file = dir.join("records.txt");
    let options = format!(
        "record_allocs record_allocs_on_exit record_allocs_file={}",
        file.display()
    );
    let mut cmd = front_command(&program, &["100"], Some(&options), &[]);
    // SAFETY: setrlimit is async-signal-safe and touches only the child.
    unsafe {
        cmd.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: 256 << 20,
                rlim_max: 256 << 20,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = cmd.output().expect("run many_leaks");
    assert_exit_code(&out, 0);
    assert!(
        malloc_debug_messages(&out).is_empty(),
        "{}",
        stderr_of(&out)
    );
    let written: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().contains("records.txt"))
        .collect();
    assert_eq!(written.len(), 1, "{written:?}");
    let text = std::fs::read_to_string(&written[0]).unwrap();
    let mallocs = text.lines().filter(|l| l.contains(": malloc ")).count();
    assert!(mallocs >= 100, "{mallocs} malloc entries:\n{text}");
}
