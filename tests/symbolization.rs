//! Symbolization through the glibc front, on programs built for it: a failed `dlopen` before a
//! report (issue 20.1), blocks allocated from a module unloaded before the exit report and heap
//! dump (issue 20.2), demangled C++ and Rust v0 names (issue 23.4), and real programs whose
//! exit reports used to crash (`gcc -o x x.o`) or take minutes (issue 21.1: the speed itself is
//! measured by `scripts/bench --workloads leaks`, never asserted here).

mod common;

use common::*;
use std::path::PathBuf;
use std::process::Command;

fn frames_after(messages: &[String], heading: &str) -> Vec<String> {
    let at = messages
        .iter()
        .position(|m| m == heading)
        .unwrap_or_else(|| panic!("no {heading:?} in {messages:#?}"));
    messages[at + 1..]
        .iter()
        .take_while(|m| m.starts_with("          #"))
        .cloned()
        .collect()
}

/// The allocation frames of the first leak whose report line contains `leak` (e.g. `size 1234 `).
fn leak_frames(messages: &[String], leak: &str) -> Vec<String> {
    let at = messages
        .iter()
        .position(|m| m.contains(&format!("leaked block of {leak}")))
        .unwrap_or_else(|| panic!("{messages:#?}"));
    frames_after(&messages[at..], "Backtrace at time of allocation:")
}

fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
}

/// Issue 20.1: glibc frees the error string of a failed `dlopen` (allocated through malloc
/// debug) at the next loader error. Symbolization used to cause one with `dlsym` while the
/// thread was marked inside the library: the string went to the native allocator and the
/// string glibc made then came back through the library as an UNKNOWN POINTER.
#[test]
fn failed_dlopen_before_a_report_leaves_one_report() {
    let program = compile_c("failed_dlopen", "tests/programs/failed_dlopen.c", &["-O0"]);
    for options in ["free_track", "backtrace free_track"] {
        let out = run_under_front(&program, &[], Some(options), &[]);
        assert_exit_code(&out, 0);
        assert_eq!(stdout_of(&out), "first: failed\nsecond: failed\n");
        let messages = malloc_debug_messages(&out);
        let reports: Vec<&String> = messages.iter().filter(|m| m.starts_with("+++ ")).collect();
        assert_eq!(reports.len(), 1, "{options}: {messages:#?}");
        assert!(reports[0].ends_with(" (free)"), "{}", reports[0]);
        let frames = frames_after(&messages, "Backtrace at time of failure:");
        assert!(
            frames.iter().any(|f| f.contains("failed_dlopen (main+")),
            "{frames:#?}"
        );
    }
}

/// The same with a real program: bash's `enable -f` of a missing file, then the exit report.
#[test]
fn bash_enable_of_a_missing_builtin_then_exit_report() {
    let Some(bash) = which("bash") else {
        eprintln!("skipped: no bash");
        return;
    };
    let out = run_under_front(
        &bash,
        &[
            "-c",
            "enable -f /nonexistent x; enable -f /nonexistent y; echo done",
        ],
        Some("backtrace leak_track free_track"),
        &[],
    );
    assert_eq!(stdout_of(&out), "done\n");
    assert_exit_code(&out, 0);
    let messages = malloc_debug_messages(&out);
    assert!(
        messages
            .iter()
            .any(|m| m.contains(" leaked block of size "))
    );
    for m in &messages {
        assert!(
            !m.contains("UNKNOWN POINTER") && !m.contains("HAS INVALID TAG"),
            "{m}"
        );
    }
}

fn unload_programs() -> (PathBuf, PathBuf) {
    let module = compile_c(
        "libunload_module.so",
        "tests/programs/unload_module.c",
        &["-O0", "-shared", "-fPIC"],
    );
    let program = compile_c("unload", "tests/programs/unload.c", &["-O0"]);
    (program, module)
}

fn module_alloc_address(out: &std::process::Output) -> u64 {
    let text = stdout_of(out);
    let hex = text
        .strip_prefix("module_alloc ")
        .and_then(|t| t.lines().next())
        .unwrap_or_else(|| panic!("stdout {text:?}"));
    u64::from_str_radix(hex, 16).unwrap()
}

/// Frame #1 of both leaks is in the unloaded module: the fast format prints the reference's
/// value for a pc in no map (dladdr finds nothing: 0) and `<unknown>`.
#[test]
fn leak_report_after_dlclose_fast_format() {
    let (program, module) = unload_programs();
    let out = run_under_front(
        &program,
        &[module.to_str().unwrap()],
        Some("backtrace leak_track"),
        &[],
    );
    assert_exit_code(&out, 0);
    let messages = malloc_debug_messages(&out);
    let leaks: Vec<usize> = (0..messages.len())
        .filter(|&i| messages[i].contains("leaked block of size 4321"))
        .collect();
    assert_eq!(leaks.len(), 2, "{messages:#?}");
    let frames = frames_after(&messages[leaks[0]..], "Backtrace at time of allocation:");
    assert_eq!(frames[1], "          #01  pc 0000000000000000  <unknown>");
    assert!(frames[2].contains("/unload (main+"), "{frames:#?}");
}

/// The same under `backtrace_full`, plus the exit heap dump (which crashed reading the ELF
/// header of a mapping gone since the maps were read): frames of the unloaded module print the
/// absolute pc and `<unknown>`, as libunwindstack prints a frame without a map, and `bt_info`
/// gives them no map name and the absolute pc. The dump is whole and no temporary file stays.
#[test]
fn exit_dump_and_full_leak_report_after_dlclose() {
    let (program, module) = unload_programs();
    let dir = scratch_dir("unload-dump");
    let prefix = dir.join("dump");
    let options = format!(
        "backtrace backtrace_full leak_track backtrace_dump_on_exit backtrace_dump_prefix={}",
        prefix.display()
    );
    let out = run_under_front(&program, &[module.to_str().unwrap()], Some(&options), &[]);
    assert_exit_code(&out, 0);
    let alloc = module_alloc_address(&out);
    let in_module = |pc: u64| (alloc..alloc + 64).contains(&pc);
    let messages = malloc_debug_messages(&out);
    let frames = leak_frames(&messages, "size 4321");
    let pc = frames[1]
        .strip_prefix("          #1  pc ")
        .and_then(|t| t.strip_suffix("  <unknown>"))
        .unwrap_or_else(|| panic!("{frames:#?}"));
    assert!(
        in_module(u64::from_str_radix(pc, 16).unwrap()),
        "{pc} vs {alloc:x}"
    );

    let files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let dump = std::fs::read_to_string(&files[0]).unwrap();
    assert!(dump.ends_with("END\n"));
    let record = dump
        .lines()
        .position(|l| l.starts_with("z 0  sz     4321  num    1  bt "))
        .unwrap_or_else(|| panic!("{dump}"));
    let bt_info = dump.lines().nth(record + 1).unwrap();
    let second = bt_info
        .split(" {")
        .nth(2)
        .unwrap_or_else(|| panic!("{bt_info}"));
    let fields: Vec<&str> = second.trim_end_matches('}').split(' ').collect();
    assert_eq!(fields[0], "\"\"", "{bt_info}");
    assert!(
        in_module(u64::from_str_radix(fields[1], 16).unwrap()),
        "{bt_info}"
    );
    assert_eq!(&fields[2..], ["\"\"", "0"], "{bt_info}");
}

/// `gcc -o x x.o` under an exit heap dump: ld unloads its LTO plugin, and the dump used to
/// crash ld (issue 20.2).
#[test]
fn gcc_link_with_exit_dump() {
    let Some(gcc) = which("gcc") else {
        eprintln!("skipped: no gcc");
        return;
    };
    let dir = scratch_dir("gcc-link-dump");
    std::fs::write(dir.join("x.c"), "int main(void) { return 0; }\n").unwrap();
    let plain = clean_command(&gcc)
        .current_dir(&dir)
        .args(["-c", "x.c", "-o", "x.o"])
        .output()
        .unwrap();
    assert!(plain.status.success());
    let prefix = dir.join("dump");
    let options = format!(
        "backtrace backtrace_full backtrace_dump_on_exit backtrace_dump_prefix={}",
        prefix.display()
    );
    let out = front_command(&gcc, &["-o", "x", "x.o"], Some(&options), &[])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert_exit_code(&out, 0);
    let mut dumps = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let name = e.unwrap().file_name().into_string().unwrap();
        if name.starts_with("dump.") {
            assert!(name.ends_with(".exit.txt"), "left behind: {name}");
            let text = std::fs::read_to_string(dir.join(&name)).unwrap();
            assert!(text.ends_with("END\n"), "{name}");
            dumps += 1;
        }
    }
    assert!(dumps >= 2, "gcc, collect2 and ld each dump");
}

/// Issue 23.4: `_Z` names are demangled with the C++ runtime's `__cxa_demangle` (found in its
/// dynamic symbol table, without `dlsym`).
#[test]
fn cxx_names_are_demangled() {
    let program = compile_c("demangle_cxx", "tests/programs/demangle.cpp", &["-O0"]);
    for (options, heading) in [
        ("backtrace leak_track", "#01"),
        ("backtrace backtrace_full leak_track", "#1"),
    ] {
        let out = run_under_front(&program, &[], Some(options), &[]);
        assert_exit_code(&out, 0);
        let messages = malloc_debug_messages(&out);
        let frames = leak_frames(&messages, "size 1234 ");
        let f = &frames[1];
        assert!(f.starts_with(&format!("          {heading}  pc ")), "{f}");
        assert!(
            f.contains("/demangle_cxx (outer::Leaker::make(int)+"),
            "{options}: {f}"
        );
    }
}

fn compile_rust(name: &str, source: &str, args: &[&str]) -> Option<PathBuf> {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_string());
    let dir = lib_dir().join("test-programs").join("rust");
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join(name);
    let tmp = dir.join(format!(".{name}.{}", std::process::id()));
    let status = Command::new(rustc)
        .args(["--edition", "2021", "-C", "opt-level=0", "-o"])
        .arg(&tmp)
        .args(args)
        .arg(manifest_dir().join(source))
        .status()
        .ok()?;
    if !status.success() {
        return None;
    }
    std::fs::rename(&tmp, &out).unwrap();
    Some(out)
}

/// Issue 23.4: `_R` (Rust v0) names are demangled as Rust, without crate hashes (as
/// rustc-demangle's C API prints them for libunwindstack).
#[test]
fn rust_v0_names_are_demangled_as_rust() {
    let Some(program) = compile_rust(
        "demangle_v0",
        "tests/programs/demangle_v0.rs",
        &["-C", "symbol-mangling-version=v0"],
    ) else {
        eprintln!("skipped: rustc cannot build the v0 test program");
        return;
    };
    let out = run_under_front(&program, &[], Some("backtrace leak_track"), &[]);
    assert_exit_code(&out, 0);
    assert_eq!(stdout_of(&out), "1234\n");
    let messages = malloc_debug_messages(&out);
    let frames = leak_frames(&messages, "size 1234 ");
    assert!(
        frames
            .iter()
            .any(|f| f.contains("/demangle_v0 (demangle_v0::leak_it+")),
        "{frames:#?}"
    );
    for f in &frames {
        assert!(!f.contains(" (_R"), "{f}");
    }
}
