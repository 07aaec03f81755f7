//! Queries and pass-through calls through the C ABI, driven as bionic drives the library
//! (tests/abi/queries.c): `malloc_info`'s exact XML, and the `mallopt(M_DECAY_TIME, 1)` libc
//! makes right after installing malloc debug when `MALLOC_USE_APP_DEFAULTS` is set.

mod common;

use common::*;
use std::process::Output;

fn run(scenario: &str, options: &str) -> Output {
    let driver = compile_c("malloc_testing", "tests/abi/queries.c", &[]);
    let mut cmd = clean_command(driver);
    cmd.arg(lib_path()).arg(scenario).arg(options);
    let out = cmd.output().expect("run the queries driver");
    assert_exit_code(&out, 0);
    out
}

/// The driver's blocks, sorted as the reference sorts them: non-zygote 100 ×3, 50 ×2, 7, then
/// zygote 7 ×2, 3. Runs of one size are counted, not summed; the non-zygote 7 and the zygote
/// 7s are side by side in the list and make one run of 3, as in the reference
/// (`debug_malloc_info` compares sizes only).
const MALLOC_INFO: &str = "<malloc version=\"debug-malloc-1\">\
<allocation nr=\"0\"><size>100</size><total>3</total></allocation>\
<allocation nr=\"1\"><size>50</size><total>2</total></allocation>\
<allocation nr=\"2\"><size>7</size><total>3</total></allocation>\
<allocation nr=\"3\"><size>3</size><total>1</total></allocation>\
</malloc>";

#[test]
fn malloc_info_counts_each_run_of_equal_sizes() {
    for options in [
        "leak_track",
        "backtrace",
        "guard leak_track",
        "backtrace=4 free_track",
        "verify_pointers",
        "free_track",
        "guard",
        "rear_guard verify_pointers free_track",
    ] {
        let out = run("malloc-info", options);
        assert_eq!(
            stdout_of(&out),
            format!("initialize=1\n{MALLOC_INFO}\nerrno=1234\n"),
            "options {options:?}"
        );
    }
}

/// A zygote child's block sorts after every other: with sizes 7 and 3 allocated before and a 7
/// in the child, the list is 7, 3, 7(zygote), three runs. Whatever tracks the blocks (the live
/// table, or the presence map with headers: docs/design.md, "Presence map") must keep the flag.
#[test]
fn malloc_info_keeps_zygote_blocks_apart() {
    const SPLIT: &str = "<malloc version=\"debug-malloc-1\">\
<allocation nr=\"0\"><size>7</size><total>1</total></allocation>\
<allocation nr=\"1\"><size>3</size><total>1</total></allocation>\
<allocation nr=\"2\"><size>7</size><total>1</total></allocation>\
</malloc>";
    for options in ["leak_track", "verify_pointers", "guard", "guard free_track"] {
        let out = run("malloc-info-zygote", options);
        assert_eq!(
            stdout_of(&out),
            format!("initialize=1\n{SPLIT}\nerrno=1234\n"),
            "options {options:?}"
        );
    }
}

/// Sizes the size map's 16-bit lanes hold (up to 65534) and larger ones, which go to the live
/// table (docs/design.md, "Presence map"): each listed with its own size. A request for 0 bytes
/// is a 1-byte block, as in the reference.
#[test]
fn malloc_info_lists_sizes_beyond_the_size_maps_lanes() {
    let mut expected = String::from("<malloc version=\"debug-malloc-1\">");
    for (nr, size) in [1 << 20, 65536, 65535, 65534, 1].iter().enumerate() {
        expected +=
            &format!("<allocation nr=\"{nr}\"><size>{size}</size><total>1</total></allocation>");
    }
    expected += "</malloc>";
    for options in [
        "leak_track",
        "verify_pointers",
        "free_track",
        "guard leak_track",
    ] {
        let out = run("malloc-info-sizes", options);
        assert_eq!(
            stdout_of(&out),
            format!("initialize=1\n{expected}\nerrno=1234\n"),
            "options {options:?}"
        );
    }
}

#[test]
fn malloc_info_without_tracking_is_the_native_one() {
    let out = run("malloc-info", "fill");
    let stdout = stdout_of(&out);
    assert!(
        stdout.starts_with("initialize=1\n<malloc version=\"")
            && !stdout.contains("debug-malloc-1"),
        "{stdout}"
    );
}

#[test]
fn mallopt_right_after_initialize_passes_through() {
    for options in [
        "verbose",
        "guard",
        "backtrace",
        "leak_track free_track",
        "record_allocs",
        "check_unreachable_on_signal",
    ] {
        let out = run("app-defaults", options);
        assert_eq!(
            stdout_of(&out),
            "initialize=1\nmallopt=1 errno=1234 native saw 1 call(s): (-100, 1)\n",
            "options {options:?}"
        );
    }
}
