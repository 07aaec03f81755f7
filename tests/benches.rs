//! The benchmark programs behind `scripts/bench`: the allocation mix computes the same result
//! under every mode of the spec-floor shim (benches/floor.c) as without it, and each mode does
//! the memory work it stands for; the pause benchmark runs bare and under `backtrace` and
//! reports every pair. No timing is checked here.

mod common;

use common::{assert_exit_code, clean_command, compile_c, run_under_front, stdout_of};
use std::path::Path;

fn run(program: &Path, args: &[&str], floor: Option<(&Path, &str)>) -> String {
    let mut cmd = clean_command(program);
    cmd.args(args);
    if let Some((lib, mode)) = floor {
        cmd.env("LD_PRELOAD", lib).env("FLOOR", mode);
    }
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert_exit_code(&out, 0);
    stdout_of(&out)
}

fn floor_lib() -> std::path::PathBuf {
    compile_c(
        "libfloor.so",
        "benches/floor.c",
        &["-O3", "-shared", "-fPIC"],
    )
}

const MODES: [&str; 5] = ["fill", "guard", "guard_fill", "free_track", "record_allocs"];

#[test]
fn the_allocation_mix_computes_the_same_result_under_every_floor() {
    let mix = compile_c("alloc_mix", "benches/alloc_mix.c", &["-O2"]);
    let floor = floor_lib();
    for threads in ["1", "2"] {
        let args = [threads, "100000"];
        let bare = run(&mix, &args, None);
        assert!(bare.starts_with("checksum "), "{bare}");
        for mode in MODES {
            assert_eq!(
                run(&mix, &args, Some((&floor, mode))),
                bare,
                "FLOOR={mode}, {threads} thread(s)"
            );
        }
    }
}

#[test]
fn each_floor_does_the_work_of_its_option() {
    let probe = compile_c("floor_probe", "tests/programs/floor_probe.c", &[]);
    let floor = floor_lib();
    let probe_under = |mode: &str| -> Vec<String> {
        run(&probe, &[], Some((&floor, mode)))
            .lines()
            .map(str::to_string)
            .collect()
    };
    // The fields each mode must set; what the native allocator leaves is not compared.
    let expect = |mode: &str, want: &[&str]| {
        let got = probe_under(mode);
        for line in want {
            assert!(
                got.iter().any(|l| l == line),
                "FLOOR={mode}: no {line:?} in {got:?}"
            );
        }
    };
    expect("fill", &["fresh eb"]);
    expect("guard", &["front aa", "rear bb", "shrunk 11"]);
    expect(
        "guard_fill",
        &["fresh eb", "front aa", "rear bb", "shrunk 11"],
    );
    // free_track fills on free only; record_allocs touches no block; an unknown mode does
    // nothing (the shim is then plain glibc).
    for mode in ["free_track", "record_allocs", "none"] {
        assert!(
            !probe_under(mode).contains(&"fresh eb".to_string()),
            "FLOOR={mode}"
        );
    }
}

#[test]
fn the_pause_benchmark_reports_every_pair_bare_and_under_backtrace() {
    let pauses = compile_c("pauses", "benches/pauses.c", &["-O2"]);
    // Timed by the monotonic clock, then by the thread's CPU clock.
    for args in [
        &["3000", "64", "9000", "20000"][..],
        &["3000", "64", "9000", "20000", "cpu"][..],
    ] {
        pause_report_is_complete(&pauses, args);
    }
    // 4^10 call paths at most, and nothing is run with arguments it cannot honour.
    for args in [
        &["0", "1048576", "1", "1"][..],
        &["0", "1", "1", "1", "gpu"][..],
    ] {
        let out = clean_command(&pauses).args(args).output().unwrap();
        assert_exit_code(&out, 2);
    }
}

fn pause_report_is_complete(pauses: &Path, args: &[&str]) {
    let bare = run(pauses, args, None);
    let traced = run_under_front(pauses, args, Some("backtrace"), &[]);
    assert_exit_code(&traced, 0);
    for out in [bare, stdout_of(&traced)] {
        let words: Vec<&str> = out.split_whitespace().collect();
        let keys: Vec<&str> = words.iter().step_by(2).copied().collect();
        assert_eq!(
            keys,
            [
                "pairs", "total_s", "p50_ns", "p99_ns", "p999_ns", "max_us", "over_1ms"
            ],
            "{out}"
        );
        assert_eq!(words[1], "20000", "{out}");
        let ns: Vec<u64> = [5, 7, 9]
            .iter()
            .map(|&i| words[i].parse().unwrap())
            .collect();
        let longest: f64 = words[11].parse().unwrap();
        assert!(
            ns[0] <= ns[1] && ns[1] <= ns[2] && ns[2] as f64 <= longest * 1000.0 + 500.0,
            "{out}"
        );
    }
}

#[test]
fn the_stack_mix_computes_the_same_result_bare_and_under_backtrace() {
    let mix = compile_c("stack_mix", "benches/stack_mix.c", &["-O2"]);
    for threads in ["1", "2"] {
        let args = [threads, "100000"];
        let bare = run(&mix, &args, None);
        assert!(bare.starts_with("checksum "), "{bare}");
        let traced = run_under_front(&mix, &args, Some("backtrace leak_track guard"), &[]);
        assert_exit_code(&traced, 0);
        assert_eq!(stdout_of(&traced), bare, "{threads} thread(s)");
    }
}
