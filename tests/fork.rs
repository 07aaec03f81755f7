//! Fork children of a process whose other threads use the dynamic loader
//! (tests/programs/fork_dlopen.c): a child forked while another thread held the loader's lock
//! inherits it held, and must still run to its end under malloc debug as it does bare. The
//! unwinder puts the children of multi-threaded parents in quarantine
//! (src/backtrace/quarantine.rs): they never call the loader, and their backtraces go through
//! the code loaded before malloc debug started, ending at the first frame of a later library.
//! Children of single-threaded parents walk everything.

mod common;

use common::*;
use std::path::PathBuf;

fn program() -> PathBuf {
    compile_c("fork_dlopen", programs_dir().join("fork_dlopen.c"), &[])
}

fn library() -> PathBuf {
    compile_c(
        "libfork_dlopen.so",
        programs_dir().join("fork_dlopen_lib.c"),
        &["-shared", "-fPIC"],
    )
}

fn path(p: &std::path::Path) -> &str {
    p.to_str().expect("UTF-8 path")
}

/// Forks enough children that, before the quarantine, dozens to hundreds of them hung in
/// `dl_iterate_phdr` (the count varies from run to run; hardly a run saw none).
const CHILDREN: &str = "3000";

#[test]
fn children_forked_during_dlopen_all_finish() {
    let (program, lib) = (program(), library());
    let args = [path(&lib), CHILDREN];
    // The program itself forks safely: bare children never call the loader.
    let bare = run_plain(&program, &args);
    assert_exit_code(&bare, 0);
    assert_eq!(stdout_of(&bare), "children 3000 hung 0 failed 0\n");
    // Each child walks stacks no walk of the parent cached (backtrace), also with the tracking
    // options that take the library's locks.
    for options in ["backtrace", "backtrace leak_track guard"] {
        let out = run_under_front(&program, &args, Some(options), &[]);
        assert_exit_code(&out, 0);
        assert_eq!(
            stdout_of(&out),
            "children 3000 hung 0 failed 0\n",
            "options {options:?}; stderr:\n{}",
            stderr_of(&out)
        );
    }
}

/// The functions of the frames after #00 (the front's malloc) of the child's leak of `size`.
fn leak_frames(out: &std::process::Output, child: u32, size: usize) -> Vec<String> {
    let lines: Vec<String> = log_lines(&out.stderr)
        .into_iter()
        .filter(|l| l.pid == child && l.tag == "malloc_debug")
        .map(|l| l.msg)
        .collect();
    let head = format!("+++ fork_dlopen leaked block of size {size} at 0x");
    let at = lines
        .iter()
        .position(|m| m.starts_with(&head))
        .unwrap_or_else(|| panic!("no leak of {size} bytes in the child:\n{}", stderr_of(out)));
    assert_eq!(lines[at + 1], "Backtrace at time of allocation:");
    assert!(lines[at + 2].contains(" (malloc+"), "{}", lines[at + 2]);
    lines[at + 3..]
        .iter()
        .take_while(|m| m.starts_with("          #"))
        .map(|m| {
            let function = m.rsplit_once(" (").map_or("", |(_, f)| f);
            function.split('+').next().unwrap_or("").to_string()
        })
        .collect()
}

/// Runs `fork_dlopen LIB 1 MODE` under backtrace and leak_track: the child's pid and the output.
fn one_leaking_child(mode: &str) -> (u32, std::process::Output) {
    let (program, lib) = (program(), library());
    let out = run_under_front(
        &program,
        &[path(&lib), "1", mode],
        Some("backtrace leak_track"),
        &[],
    );
    assert_exit_code(&out, 0);
    let stdout = stdout_of(&out);
    let child: u32 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("child "))
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no child pid in {stdout:?}"));
    assert!(stdout.ends_with("children 1 hung 0 failed 0\n"), "{stdout}");
    (child, out)
}

#[test]
fn a_quarantined_child_backtraces_through_startup_code_only() {
    let (child, out) = one_leaking_child("leak");
    // The program's own functions and libc were loaded before malloc debug started.
    let own = leak_frames(&out, child, 4242);
    assert_eq!(own[..3], ["child_alloc", "child_work", "main"], "{own:?}");
    // The walk ends at the first frame in code loaded later: asking the loader how to step
    // out of it could hang this child.
    assert_eq!(leak_frames(&out, child, 4343), ["fork_dlopen_lib_alloc"]);
}

#[test]
fn the_child_of_a_single_threaded_parent_walks_everything() {
    let (child, out) = one_leaking_child("leak-single");
    let frames = leak_frames(&out, child, 4343);
    assert_eq!(
        frames[..3],
        ["fork_dlopen_lib_alloc", "child_work", "main"],
        "{frames:?}"
    );
}
