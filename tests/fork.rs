//! Fork children of a process whose other threads use the dynamic loader
//! (tests/programs/fork_dlopen.c): a child forked while another thread held the loader's lock
//! inherits it held, and must still run to its end under malloc debug as it does bare. The
//! unwinder puts such children in quarantine (src/backtrace/quarantine.rs): they never call the
//! loader, and their backtraces still name the program's functions.

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

#[test]
fn a_quarantined_child_reports_its_leak_with_a_backtrace() {
    let (program, lib) = (program(), library());
    let out = run_under_front(
        &program,
        &[path(&lib), "1", "leak"],
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
    // The child's records: the leak of 4242 bytes (allocated in child_alloc) and its frames.
    let lines: Vec<String> = log_lines(&out.stderr)
        .into_iter()
        .filter(|l| l.pid == child && l.tag == "malloc_debug")
        .map(|l| l.msg)
        .collect();
    let at = lines
        .iter()
        .position(|m| {
            m.starts_with("+++ fork_dlopen leaked block of size 4242 at 0x")
                && m.contains(" (leak 1 of ")
        })
        .unwrap_or_else(|| panic!("no leak record of the child:\n{}", stderr_of(&out)));
    assert_eq!(lines[at + 1], "Backtrace at time of allocation:");
    // Frame #00 is the front's malloc; then the program's own functions, in order.
    let functions: Vec<&str> = lines[at + 3..at + 6]
        .iter()
        .map(|m| {
            let name = m
                .rsplit_once(" (")
                .map(|(_, f)| f.split('+').next().unwrap_or(""))
                .unwrap_or("");
            assert!(m.contains(&format!(" {} (", program.display())), "{m}");
            name
        })
        .collect();
    assert_eq!(functions, ["child_alloc", "child_work", "main"]);
}
