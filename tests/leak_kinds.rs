//! The exit leak report's extensions through the glibc front (README "Extensions"), on
//! tests/programs/leak_kinds.c, whose heap at exit is known block by block: `leak_unreachable`
//! (classification: definitely lost, indirectly lost, still reachable), `leak_suppressions`,
//! `log_file`, and the reference's report left exactly as it was without them.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Output;

fn program() -> PathBuf {
    compile_c("leak_kinds", "tests/programs/leak_kinds.c", &[])
}

fn run(options: &str, args: &[&str]) -> Output {
    let out = run_under_front(program(), args, Some(options), &[]);
    assert_exit_code(&out, 0);
    out
}

/// `(size, kind)` of each leak line (`None` for a line without a kind), and the other messages.
fn leaks(messages: &[String]) -> (Vec<(usize, Option<String>)>, Vec<String>) {
    let mut leaks = Vec::new();
    let mut rest = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        let Some(tail) = m.strip_prefix("+++ leak_kinds leaked block of size ") else {
            rest.push(m.clone());
            continue;
        };
        let (size, tail) = tail.split_once(" at 0x").unwrap();
        let (_, tail) = tail.split_once(" (leak ").unwrap();
        let inner = tail.strip_suffix(')').unwrap();
        let (counter, kind) = match inner.split_once(", ") {
            Some((c, k)) => (c, Some(k.to_string())),
            None => (inner, None),
        };
        assert_eq!(
            counter.split_once(" of ").unwrap().0,
            (leaks.len() + 1).to_string(),
            "{m} at {i}"
        );
        leaks.push((size.parse().unwrap(), kind));
    }
    (leaks, rest)
}

fn kind(k: &str) -> Option<String> {
    Some(k.to_string())
}

const SIMPLE_SUMMARY: &str = "leak summary: definitely lost: 600 bytes in 3 blocks, indirectly \
                              lost: 0 bytes in 0 blocks, still reachable: 40 bytes in 2 blocks, \
                              suppressed: 0 bytes in 0 blocks";

#[test]
fn three_unreachable_and_two_reachable_report_exactly_three() {
    // Several runs: addresses differ (ASLR), the verdict must not.
    for _ in 0..3 {
        let out = run("leak_unreachable", &["simple"]);
        let (leaks, rest) = leaks(&malloc_debug_messages(&out));
        let lost = kind("definitely lost");
        assert_eq!(
            leaks,
            [(300, lost.clone()), (200, lost.clone()), (100, lost)]
        );
        assert_eq!(rest, [SIMPLE_SUMMARY]);
    }
}

#[test]
fn a_program_that_reaps_every_child_does_not_stop_the_scan() {
    for _ in 0..3 {
        let out = run("leak_unreachable", &["reaper"]);
        let (leaks, rest) = leaks(&malloc_debug_messages(&out));
        assert_eq!(leaks.len(), 3, "{rest:?}");
        // The thread's own block (glibc's thread control block, 272 bytes) is reachable too.
        assert_eq!(
            rest,
            [
                "leak summary: definitely lost: 600 bytes in 3 blocks, indirectly lost: 0 bytes in \
              0 blocks, still reachable: 312 bytes in 3 blocks, suppressed: 0 bytes in 0 blocks"
            ]
        );
    }
}

#[test]
fn without_the_extension_the_report_is_the_reference_one() {
    let out = run("leak_track", &["simple"]);
    let messages = malloc_debug_messages(&out);
    let (leaks, rest) = leaks(&messages);
    let sizes: Vec<(usize, Option<String>)> =
        [300, 200, 100, 24, 16].iter().map(|&s| (s, None)).collect();
    assert_eq!(leaks, sizes);
    assert!(rest.is_empty(), "{rest:?}");
    assert!(messages[0].ends_with(" (leak 1 of 5)"), "{messages:?}");
}

#[test]
fn heap_graph_with_cycles_and_interior_pointers() {
    for options in ["leak_unreachable", "leak_track leak_unreachable"] {
        let out = run(options, &["graph"]);
        let (leaks, rest) = leaks(&malloc_debug_messages(&out));
        let (d, i) = (kind("definitely lost"), kind("indirectly lost"));
        // The F <-> G cycle's entry point is its lower-addressed block.
        let f = leaks.iter().find(|l| l.0 == 88).unwrap().1.clone();
        let g = if f == d { i.clone() } else { d.clone() };
        assert_eq!(
            leaks,
            [
                (112, i.clone()),
                (104, d.clone()),
                (96, g),
                (88, f),
                (80, i.clone()),
                (72, i),
                (64, d)
            ],
            "{options}"
        );
        assert_eq!(
            rest,
            [
                "leak summary: definitely lost: 256 bytes in 3 blocks, indirectly lost: 360 bytes in \
              4 blocks, still reachable: 104 bytes in 2 blocks, suppressed: 0 bytes in 0 blocks"
            ]
        );
    }
}

fn rules(dir: &Path, text: &str) -> PathBuf {
    let file = dir.join("rules.supp");
    std::fs::write(&file, text).unwrap();
    file
}

#[test]
fn suppressions_by_function_and_by_module() {
    let dir = scratch_dir("leak_kinds_supp");
    // All three lost blocks come from drop(); main's own frame is in the same module.
    let by_function = rules(&dir, "# the test's rules\n\nleak:^drop$\n");
    let out = run(
        &format!(
            "backtrace leak_unreachable leak_suppressions={}",
            by_function.display()
        ),
        &["simple"],
    );
    assert_eq!(
        malloc_debug_messages(&out),
        [
            "leak summary: definitely lost: 0 bytes in 0 blocks, indirectly lost: 0 bytes in 0 \
          blocks, still reachable: 40 bytes in 2 blocks, suppressed: 600 bytes in 3 blocks"
        ]
    );
    // Only the chain's and the cycle's allocations are in graph(); `^drop$` matches nothing.
    let out = run(
        &format!(
            "backtrace leak_unreachable leak_suppressions={}",
            by_function.display()
        ),
        &["graph"],
    );
    assert_eq!(leaks(&malloc_debug_messages(&out)).0.len(), 7);
    let by_module = rules(&dir, "leak:/leak_kinds$\n");
    let out = run(
        &format!(
            "backtrace leak_track leak_suppressions={}",
            by_module.display()
        ),
        &["graph"],
    );
    assert_eq!(
        malloc_debug_messages(&out),
        [
            "leak summary: definitely lost: 0 bytes in 0 blocks, indirectly lost: 0 bytes in 0 \
          blocks, still reachable: 0 bytes in 0 blocks, suppressed: 720 bytes in 9 blocks"
        ]
    );
    // A pattern matching only part of a name, with a star.
    let partial = rules(&dir, "leak:gr*h\n");
    let out = run(
        &format!(
            "backtrace leak_unreachable leak_suppressions={}",
            partial.display()
        ),
        &["graph"],
    );
    assert_eq!(
        malloc_debug_messages(&out),
        [
            "leak summary: definitely lost: 0 bytes in 0 blocks, indirectly lost: 0 bytes in 0 \
          blocks, still reachable: 104 bytes in 2 blocks, suppressed: 616 bytes in 7 blocks"
        ]
    );
}

/// Rules match the source files of the allocation backtrace too (LeakSanitizer's rules do),
/// read from the module's own DWARF line table, DWARF 5 and 4 alike. The module path ends in
/// `/leak_kinds` and no function name has a `.c`, so only a source file can match these.
#[test]
fn suppressions_by_source_file() {
    let dir = scratch_dir("leak_kinds_supp_file");
    let source = manifest_dir().join("tests/programs/leak_kinds.c");
    let all_lost = "leak summary: definitely lost: 0 bytes in 0 blocks, indirectly lost: 0 bytes \
                    in 0 blocks, still reachable: 40 bytes in 2 blocks, suppressed: 600 bytes in 3 \
                    blocks";
    let dwarf4 = compile_c(
        "leak_kinds_dwarf4",
        "tests/programs/leak_kinds.c",
        &["-gdwarf-4"],
    );
    let stripped = dir.join("leak_kinds");
    std::fs::copy(program(), &stripped).unwrap();
    let strip = std::process::Command::new("strip")
        .arg("--strip-debug")
        .arg(&stripped)
        .status()
        .unwrap();
    assert!(strip.success());
    let cases = [
        ("leak:tests/programs/leak_kinds.c$", all_lost),
        (&*format!("leak:^{}$", source.display()), all_lost),
        ("leak:/programs/*_kinds.c", all_lost),
        // Anchored at the start: the file's path is absolute.
        ("leak:^tests/programs/leak_kinds.c", SIMPLE_SUMMARY),
        ("leak:leak_kinds.h", SIMPLE_SUMMARY),
    ];
    for (rule, summary) in cases {
        let file = rules(&dir, &format!("{rule}\n"));
        let options = format!(
            "backtrace leak_unreachable leak_suppressions={}",
            file.display()
        );
        for prog in [program(), dwarf4.clone()] {
            let out = run_under_front(&prog, &["simple"], Some(&options), &[]);
            assert_exit_code(&out, 0);
            let messages = malloc_debug_messages(&out);
            assert_eq!(
                messages.last().unwrap(),
                summary,
                "{rule} {}",
                prog.display()
            );
            let printed = if summary == all_lost { 0 } else { 3 };
            let leak_lines = messages
                .iter()
                .filter(|m| m.contains(" leaked block of size "));
            assert_eq!(leak_lines.count(), printed, "{rule}: {messages:?}");
        }
        // Without DWARF (debug info stripped) no file is known: function and module rules only.
        let out = run_under_front(&stripped, &["simple"], Some(&options), &[]);
        assert_exit_code(&out, 0);
        assert_eq!(
            malloc_debug_messages(&out).last().unwrap(),
            SIMPLE_SUMMARY,
            "{rule} stripped"
        );
    }
}

#[test]
fn bad_suppression_files_are_reported_and_the_good_rules_kept() {
    let dir = scratch_dir("leak_kinds_bad_supp");
    let file = rules(&dir, "leak:^drop$\nrace:foo\n");
    let out = run(
        &format!(
            "backtrace leak_unreachable leak_suppressions={}",
            file.display()
        ),
        &["simple"],
    );
    let messages = malloc_debug_messages(&out);
    assert_eq!(
        messages[0],
        format!(
            "leak_suppressions: {}:2: not a rule (expected leak:PATTERN): race:foo",
            file.display()
        )
    );
    assert!(
        messages[1].ends_with("suppressed: 600 bytes in 3 blocks"),
        "{messages:?}"
    );
    let missing = dir.join("missing.supp");
    let out = run(
        &format!("leak_unreachable leak_suppressions={}", missing.display()),
        &["simple"],
    );
    let messages = malloc_debug_messages(&out);
    assert_eq!(
        messages[0],
        format!(
            "leak_suppressions: cannot read {}: No such file or directory",
            missing.display()
        )
    );
    assert_eq!(messages.last().unwrap(), SIMPLE_SUMMARY);
}

#[test]
fn log_file_leaves_stdout_and_stderr_as_in_a_bare_run() {
    let dir = scratch_dir("leak_kinds_log_file");
    let log = dir.join("log.txt");
    let theirs = dir.join("theirs.txt");
    let bare = run_plain(program(), &["io", theirs.to_str().unwrap()]);
    let out = run(
        &format!("backtrace leak_unreachable log_file={}", log.display()),
        &["io", theirs.to_str().unwrap()],
    );
    assert_eq!(out.stdout, bare.stdout);
    assert_eq!(out.stderr, bare.stderr);
    assert_eq!(out.stderr, b"to stderr\n");
    // The program closed every descriptor above 2 and opened its own file: it got the lowest
    // number, the one the log had; the log was opened again and the program's file is its own.
    assert_eq!(std::fs::read_to_string(&theirs).unwrap(), "mine\n");
    let logged = std::fs::read(&log).unwrap();
    let (leaks, rest) = leaks(&malloc_debug_messages(&Output {
        stderr: logged.clone(),
        ..out.clone()
    }));
    assert_eq!(leaks.len(), 3);
    assert_eq!(rest.last().unwrap(), SIMPLE_SUMMARY);
    assert!(rest.iter().any(|m| m.starts_with("          #00  pc ")));
    // Appended, not truncated: a second run adds its records.
    run(
        &format!("leak_unreachable log_file={}", log.display()),
        &["io", theirs.to_str().unwrap()],
    );
    let twice = std::fs::read(&log).unwrap();
    assert!(twice.starts_with(&logged) && twice.len() > logged.len());
}

#[test]
fn on_signal_the_summary_follows_the_checks_own_lines() {
    let program = compile_c(
        "unreachable",
        "tests/programs/unreachable.c",
        &["-O1", "-pthread"],
    );
    let out = run_under_front(
        program,
        &[],
        Some("check_unreachable_on_signal leak_unreachable"),
        &[],
    );
    assert_exit_code(&out, 0);
    let messages = malloc_debug_messages(&out);
    let at_exit = messages.iter().position(|m| m.starts_with("+++ ")).unwrap();
    let (check, exit) = messages.split_at(at_exit);
    // The reference's lines (tests/unreachable.rs checks them), then the extension's one.
    assert_eq!(check[0], "Starting to check for unreachable memory.");
    assert_eq!(
        check[1],
        "140 bytes in 2 allocations unreachable out of 620 bytes in 8 allocations"
    );
    assert!(check[2].starts_with("  40 bytes unreachable at "));
    assert_eq!(
        check.last().unwrap(),
        "leak summary: definitely lost: 40 bytes in 1 blocks, indirectly lost: 100 bytes in 1 \
         blocks, still reachable: 480 bytes in 6 blocks, suppressed: 0 bytes in 0 blocks"
    );
    // At exit the thread's 48-byte block has been freed.
    assert_eq!(exit.len(), 3, "{exit:#?}");
    assert!(exit[0].starts_with("+++ unreachable leaked block of size 100 at 0x"));
    assert!(exit[0].ends_with(" (leak 1 of 2, indirectly lost)"));
    assert!(exit[1].ends_with(" (leak 2 of 2, definitely lost)"));
    assert_eq!(
        exit[2],
        "leak summary: definitely lost: 40 bytes in 1 blocks, indirectly lost: 100 bytes in 1 \
         blocks, still reachable: 432 bytes in 5 blocks, suppressed: 0 bytes in 0 blocks"
    );
}

/// valgrind memcheck's definitely and indirectly lost block counts of one run (every process).
fn valgrind_lost(cmd: &[&str], cwd: &Path) -> Option<(usize, usize)> {
    let out = std::process::Command::new("valgrind")
        .args(["--leak-check=full", "--trace-children=yes"])
        .args(cmd)
        .current_dir(cwd)
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stderr);
    let count = |what: &str| -> usize {
        text.lines()
            .filter_map(|l| l.split_once(&format!("{what} lost: ")))
            .map(|(_, r)| {
                let blocks = r.split(" bytes in ").nth(1).unwrap();
                blocks
                    .split(' ')
                    .next()
                    .unwrap()
                    .replace(',', "")
                    .parse::<usize>()
                    .unwrap()
            })
            .sum()
    };
    Some((count("definitely"), count("indirectly")))
}

/// Our definitely and indirectly lost block counts of one run (every process's summary).
fn our_lost(cmd: &[&str], cwd: &Path, options: &str) -> (usize, usize) {
    let out = front_command(cmd[0], &cmd[1..], Some(options), &[])
        .current_dir(cwd)
        .output()
        .unwrap();
    let mut lost = (0, 0);
    for m in malloc_debug_messages(&out) {
        if let Some(rest) = m.strip_prefix("leak summary: definitely lost: ") {
            let n: Vec<usize> = rest
                .split(" bytes in ")
                .skip(1)
                .map(|s| s.split(' ').next().unwrap().parse().unwrap())
                .collect();
            lost.0 += n[0];
            lost.1 += n[1];
        }
    }
    lost
}

#[test]
fn agrees_with_valgrind_on_small_programs() {
    if std::process::Command::new("valgrind")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("SKIPPED: valgrind is not installed (apt-get install valgrind)");
        return;
    }
    let dir = scratch_dir("leak_kinds_valgrind");
    let program = program();
    let program = program.to_str().unwrap();
    // `as` (binutils, installed with gcc) assembling a hello world and this test's program: a
    // real program with lost chains (valgrind: 9 definitely and 6 indirectly lost blocks on
    // the first, 46 and 88 on the second).
    let hello = dir.join("hello.c");
    std::fs::write(
        &hello,
        "#include <stdio.h>\nint main(void) { puts(\"hi\"); }\n",
    )
    .unwrap();
    let mut asm = Vec::new();
    for (source, name) in [
        (hello, "hello.s"),
        (
            manifest_dir().join("tests/programs/leak_kinds.c"),
            "leak_kinds.s",
        ),
    ] {
        let out = dir.join(name);
        let status = std::process::Command::new("cc")
            .args(["-S", "-O1", "-o"])
            .arg(&out)
            .arg(source)
            .status()
            .unwrap();
        assert!(status.success());
        asm.push(out.to_str().unwrap().to_string());
    }
    for cmd in [
        &[program, "simple"][..],
        &[program, "graph"][..],
        &["as", "--64", "-o", "x.o", &asm[0]][..],
        &["as", "--64", "-o", "x.o", &asm[1]][..],
    ] {
        let theirs = valgrind_lost(cmd, &dir).unwrap();
        // With backtraces the library keeps words read from stacks (heap addresses among
        // them) in its own static data, which the scan must not take for references.
        for options in ["leak_unreachable", "backtrace leak_unreachable"] {
            let ours = our_lost(cmd, &dir, options);
            if cmd[0] == program {
                assert_eq!(ours, theirs, "{cmd:?} {options}");
            } else {
                // The bar for real programs: within 20% or 3 blocks.
                let (a, b) = (ours.0 + ours.1, theirs.0 + theirs.1);
                assert!(
                    a.abs_diff(b) <= 3.max(b / 5),
                    "{cmd:?} {options}: ours {ours:?}, valgrind {theirs:?}"
                );
            }
        }
    }
}
