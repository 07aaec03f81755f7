//! The benchmark programs behind `scripts/bench`: the allocation mix computes the same result
//! under every mode of the spec-floor shim (benches/floor.c) as without it, and each mode does
//! the memory work it stands for. No timing is checked here.

mod common;

use common::{assert_exit_code, clean_command, compile_c, stdout_of};
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
