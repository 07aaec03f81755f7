//! Backtraces, leak info and heap dumps on real programs under the glibc front
//! (tests/programs/leaky_threads.c): the exit dump read the way heap-dump viewers read it and
//! symbolized against the program's symbol table, a dump requested by signal from a running
//! multi-threaded program, and 1,000 forks while another thread unwinds.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn program() -> PathBuf {
    // -O0: each leaking loop has one call site, so its blocks share one backtrace.
    compile_c(
        "leaky_threads",
        "tests/programs/leaky_threads.c",
        &["-O0", "-g", "-pthread", "-ldl"],
    )
}

/// A heap dump as native_heapdump_viewer.py and our CLI read it.
struct Dump {
    total_memory: usize,
    declared_records: usize,
    backtrace_size: usize,
    /// (zygote, size, num, frames)
    records: Vec<(bool, usize, usize, Vec<u64>)>,
    /// (start, end, offset, name)
    maps: Vec<(u64, u64, u64, String)>,
}

fn parse_dump(text: &str) -> Dump {
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("Android Native Heap Dump v1.2"));
    assert_eq!(lines.next(), Some(""));
    assert!(lines.next().unwrap().starts_with("Build fingerprint: '"));
    assert_eq!(lines.next(), Some(""));
    let number = |line: Option<&str>, key: &str| -> usize {
        line.and_then(|l| l.strip_prefix(key))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("expected {key:?}"))
    };
    let total_memory = number(lines.next(), "Total memory: ");
    let declared_records = number(lines.next(), "Allocation records: ");
    let backtrace_size = number(lines.next(), "Backtrace size: ");
    assert_eq!(lines.next(), Some(""));
    let mut records = Vec::new();
    for line in lines.by_ref() {
        if line == "MAPS" {
            break;
        }
        let t: Vec<&str> = line.split_whitespace().collect();
        assert!(
            t.len() >= 7 && t[0] == "z" && t[2] == "sz" && t[4] == "num" && t[6] == "bt",
            "record line {line:?}"
        );
        let frames = t[7..]
            .iter()
            .map(|f| u64::from_str_radix(f, 16).unwrap())
            .collect();
        records.push((
            t[1] == "1",
            t[3].parse().unwrap(),
            t[5].parse().unwrap(),
            frames,
        ));
    }
    let mut maps = Vec::new();
    let mut ended = false;
    for line in lines {
        if line == "END" {
            ended = true;
            break;
        }
        let t: Vec<&str> = line.split_whitespace().collect();
        let (s, e) = t[0].split_once('-').unwrap();
        maps.push((
            u64::from_str_radix(s, 16).unwrap(),
            u64::from_str_radix(e, 16).unwrap(),
            u64::from_str_radix(t[2], 16).unwrap(),
            t.get(5).unwrap_or(&"").to_string(),
        ));
    }
    assert!(ended, "END line");
    assert!(text.ends_with("END\n"));
    Dump {
        total_memory,
        declared_records,
        backtrace_size,
        records,
        maps,
    }
}

/// Function symbols of an ELF file (from `nm`): (address, size, name).
fn functions(file: &Path) -> Vec<(u64, u64, String)> {
    let out = Command::new("nm")
        .args(["-S", "--defined-only"])
        .arg(file)
        .output()
        .expect("nm");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let t: Vec<&str> = l.split_whitespace().collect();
            (t.len() == 4 && matches!(t[2], "T" | "t")).then(|| {
                (
                    u64::from_str_radix(t[0], 16).unwrap(),
                    u64::from_str_radix(t[1], 16).unwrap(),
                    t[3].to_string(),
                )
            })
        })
        .collect()
}

/// The program's function containing `pc`, through the dump's maps (the program is a PIE whose
/// segments' file offsets equal their addresses, as GNU ld lays them out).
fn symbolize(dump: &Dump, program: &Path, syms: &[(u64, u64, String)], pc: u64) -> Option<String> {
    let name = program.to_str().unwrap();
    let (start, _, offset, _) = dump
        .maps
        .iter()
        .find(|(s, e, _, n)| *s <= pc && pc < *e && n == name)?;
    let vaddr = pc - start + offset;
    syms.iter()
        .find(|(a, s, _)| *a <= vaddr && vaddr < a + s)
        .map(|(_, _, n)| n.clone())
}

#[test]
fn exit_dump_names_the_leaking_functions_and_agrees_with_leak_info() {
    let dir = scratch_dir("bt-programs-exit");
    let prefix = dir.join("heap");
    let options = format!(
        "backtrace leak_track backtrace_dump_on_exit backtrace_dump_prefix={}",
        prefix.display()
    );
    let program = program();
    let out = run_under_front(&program, &["leak"], Some(&options), &[]);
    assert_exit_code(&out, 0);
    // "info TOTAL ENTRIES INFO_SIZE FRAMES" from the front's get_malloc_leak_info.
    let info: Vec<usize> = stdout_of(&out)
        .strip_prefix("info ")
        .unwrap()
        .split_whitespace()
        .map(|v| v.parse().unwrap())
        .collect();
    assert_eq!(info, [3 * 4096 + 5 * 48, 2, 2 * 8 + 16 * 8, 16]);

    let files: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert_eq!(files.len(), 1, "one dump, no temporary");
    let path = files[0].as_ref().unwrap().path();
    let dump_name = path.file_name().unwrap().to_string_lossy().to_string();
    assert!(dump_name.starts_with("heap.") && dump_name.ends_with(".exit.txt"));
    let dump = parse_dump(&std::fs::read_to_string(&path).unwrap());
    assert_eq!(dump.backtrace_size, 16);
    assert_eq!(dump.declared_records, dump.records.len());
    let sum: usize = dump.records.iter().map(|(_, s, n, _)| s * n).sum();
    assert_eq!(dump.total_memory, sum);
    assert_eq!(dump.total_memory, info[0], "dump and leak info agree");

    let syms = functions(&program);
    let sites: Vec<(usize, usize, Vec<String>)> = dump
        .records
        .iter()
        .map(|(z, size, num, frames)| {
            assert!(!z);
            let names = frames
                .iter()
                .filter_map(|pc| symbolize(&dump, &program, &syms, *pc))
                .collect();
            (*size, *num, names)
        })
        .collect();
    assert_eq!(sites.len(), 2, "{sites:?}");
    assert_eq!((sites[0].0, sites[0].1), (4096, 3));
    assert_eq!(sites[0].2[..2], ["leak_big", "main"], "{sites:?}");
    assert_eq!((sites[1].0, sites[1].1), (48, 5));
    assert_eq!(sites[1].2[..2], ["leak_small", "main"], "{sites:?}");
    // The same frames and sizes in the log's leak reports.
    let leaks: Vec<String> = malloc_debug_messages(&out)
        .into_iter()
        .filter(|m| m.contains(" leaked block of size "))
        .collect();
    assert_eq!(leaks.len(), 8);
    assert!(leaks[0].contains("size 4096") && leaks[7].contains("(leak 8 of 8)"));
}

#[test]
fn dump_requested_by_signal_from_a_running_threaded_program() {
    let dir = scratch_dir("bt-programs-signal");
    let prefix = dir.join("heap");
    let options = format!("backtrace backtrace_dump_prefix={}", prefix.display());
    let prefix_arg = prefix.to_str().unwrap();
    let out = run_under_front(program(), &["signal", prefix_arg], Some(&options), &[]);
    assert_exit_code(&out, 0);
    assert_eq!(stdout_of(&out), "dump found\n");
    let files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let dump = parse_dump(&std::fs::read_to_string(&files[0]).unwrap());
    assert!(
        dump.records
            .iter()
            .any(|(_, size, _, f)| *size == 4096 && !f.is_empty()),
        "the leak_big block is in the dump"
    );
    // (The message's trailing newline, a reference quirk, ends the log line.)
    assert_eq!(
        malloc_debug_messages(&out),
        [format!("Dumping to file: {}", files[0].display())]
    );
}

/// A thousand fork children, each allocating and freeing (a stack walk that misses the rule
/// cache, the live table, free_track's queue) while another thread keeps walking stacks that miss
/// the cache. Every child must finish. A smoke test: removing either our fork-time drain of stack
/// walks or the locking of our tables did not make it hang on glibc 2.36 (nor the drain on
/// Android 11's bionic, tests/android_rootfs.rs): the other thread rarely holds one of our locks
/// at the instant of a fork, and the loader's lock is not left held in the child.
#[test]
fn a_thousand_forks_while_another_thread_unwinds() {
    let mut child = front_command(program(), &["fork"], Some("backtrace free_track"), &[])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("deadlocked: a fork child (or the parent) never finished");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    assert_exit_code(&out, 0);
    assert_eq!(stdout_of(&out), "forks 1000\n");
}
