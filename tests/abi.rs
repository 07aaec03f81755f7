//! The library driven the way bionic drives it, without the front: a C driver `dlopen`s
//! libc_malloc_debug.so, resolves every `debug_` name, hands it glibc's allocator as the
//! `MallocDispatch` and runs one scenario per process (tests/abi/driver.c).

mod common;

use common::*;
use std::collections::BTreeMap;
use std::process::Output;

#[path = "../src/dispatch/layout.rs"]
mod layout;

/// The driver is named like the reference's unit tests' fake program name.
fn driver() -> std::path::PathBuf {
    compile_c("malloc_testing", "tests/abi/driver.c", &[])
}

fn run(scenario: &str, options: &str) -> Output {
    run_with_layout(scenario, options, Layout::Classic)
}

/// Which `MallocDispatch` the driver hands to `debug_initialize` (tests/abi/bionic.h).
#[derive(Clone, Copy, Debug)]
enum Layout {
    Classic,
    Android17,
}
const LAYOUTS: [Layout; 2] = [Layout::Classic, Layout::Android17];

fn run_with_layout(scenario: &str, options: &str, layout: Layout) -> Output {
    let lib = lib_path();
    let mut cmd = clean_command(driver());
    cmd.arg(&lib).arg(scenario).arg(options);
    if let Layout::Android17 = layout {
        cmd.env("MALLOC_DEBUG_TEST_LAYOUT", "17");
    }
    cmd.output().expect("run driver")
}

/// (priority, message) of every malloc_debug record.
fn records(output: &Output) -> Vec<(char, String)> {
    log_lines(&output.stderr)
        .into_iter()
        .filter(|l| l.tag == "malloc_debug")
        .map(|l| (l.prio, l.msg))
        .collect()
}

const USAGE_1: &str = "For malloc debug option descriptions go to:";
const USAGE_2: &str =
    "  https://android.googlesource.com/platform/bionic/+/main/libc/malloc_debug/README.md";

#[test]
fn dispatch_layout_matches_the_c_header() {
    let program = compile_c("layout", "tests/abi/layout.c", &[]);
    let out = run_plain(&program, &[]);
    assert_exit_code(&out, 0);
    let c: BTreeMap<String, usize> = stdout_of(&out)
        .lines()
        .map(|l| {
            let (k, v) = l.split_once(' ').unwrap();
            (k.to_string(), v.parse().unwrap())
        })
        .collect();
    // Both tables agree with the library's slot tables (src/dispatch/layout.rs), which a unit
    // test there checks against the spec's offsets for both pointer widths.
    use layout::{Field, TableLayout};
    let p = size_of::<usize>();
    let all = [
        Field::Calloc,
        Field::Free,
        Field::Mallinfo,
        Field::Malloc,
        Field::MallocUsableSize,
        Field::Memalign,
        Field::PosixMemalign,
        Field::Pvalloc,
        Field::Realloc,
        Field::Reallocarray,
        Field::Valloc,
        Field::MallocIterate,
        Field::MallocDisable,
        Field::MallocEnable,
        Field::Mallopt,
        Field::AlignedAlloc,
        Field::MallocInfo,
    ];
    let mut rust = BTreeMap::new();
    for (layout, prefix, suffix) in [
        (TableLayout::Classic, "offset", ""),
        (TableLayout::Android17, "offset17", "17"),
    ] {
        for f in all {
            if let Some(off) = layout::offset(layout, p, f) {
                rust.insert(format!("{prefix}.{}", f.name()), off);
            }
        }
        rust.insert(format!("sizeof{suffix}"), layout::size(layout, p));
        rust.insert(format!("alignof{suffix}"), 32);
    }
    rust.insert(
        "mallinfo.sizeof".to_string(),
        10 * if cfg!(target_os = "android") { p } else { 4 },
    );
    assert_eq!(c, rust);
    if cfg!(target_pointer_width = "64") {
        assert_eq!(rust["offset.malloc_info"], 104);
        assert_eq!(rust["offset17.reallocarray"], 64);
        assert_eq!(rust["offset17.malloc_info"], 112);
        assert_eq!(rust["sizeof"], 128);
        assert_eq!(rust["sizeof17"], 128);
    }
}

/// Android 17's entry point with both tables, in pass-through form and intercepted.
#[test]
fn reallocarray_follows_the_spec_with_both_layouts() {
    for layout in LAYOUTS {
        for options in [
            " ",
            "fill expand_alloc=24",
            "guard",
            "backtrace",
            "free_track=10 verify_pointers",
        ] {
            let out = run_with_layout("reallocarray", options, layout);
            assert_eq!(
                stdout_of(&out),
                "initialize=1\nreallocarray ok\n",
                "{layout:?} {options:?}"
            );
            assert_eq!(records(&out), vec![], "{layout:?} {options:?}");
        }
    }
}

/// The library calls each native entry through the slot it has in the table libc passed: the
/// fields after realloc moved in Android 17's.
#[test]
fn pass_through_calls_use_the_slot_of_the_layout_libc_passed() {
    for layout in LAYOUTS {
        let out = run_with_layout("slots", " ", layout);
        assert_exit_code(&out, 0);
        assert_eq!(
            stdout_of(&out),
            "mallopt -> mallopt\nmallinfo -> mallinfo\nmalloc_info -> malloc_info\n\
             malloc_iterate -> malloc_iterate\nmalloc_disable -> malloc_disable\n\
             malloc_enable -> malloc_enable\n",
            "{layout:?}"
        );
    }
}

/// With debug calls disabled on the thread, reallocarray goes to the native table's own
/// reallocarray (Android 17), or to the native realloc where the table has none.
#[test]
fn reallocarray_while_disabled_goes_to_the_native_table() {
    for (layout, slot) in [
        (Layout::Classic, "realloc"),
        (Layout::Android17, "reallocarray"),
    ] {
        let out = run_with_layout("nested", "backtrace", layout);
        assert_exit_code(&out, 0);
        assert_eq!(
            stdout_of(&out),
            format!("nested reallocarray -> {slot}\n"),
            "{layout:?}"
        );
    }
}

#[test]
fn verbose_logs_exactly_the_enable_line() {
    let out = run("init", "verbose");
    assert_exit_code(&out, 0);
    assert_eq!(stdout_of(&out), "initialize=1\n");
    assert_eq!(
        records(&out),
        vec![('I', "malloc_testing: malloc debug enabled".to_string())]
    );
}

#[test]
fn without_verbose_nothing_is_logged() {
    let out = run("init", "fill expand_alloc");
    assert_eq!(stdout_of(&out), "initialize=1\n");
    assert_eq!(records(&out), vec![]);
}

#[test]
fn bad_option_fails_with_message_and_usage() {
    let out = run("init", "foo");
    assert_exit_code(&out, 0);
    assert_eq!(stdout_of(&out), "initialize=0\n");
    assert_eq!(
        records(&out),
        vec![
            ('E', "malloc_testing: unknown option foo".to_string()),
            ('E', USAGE_1.to_string()),
            ('E', USAGE_2.to_string()),
        ]
    );
}

#[test]
fn bad_value_fails_with_the_first_error_only() {
    let out = run("init", "verbose backtrace=257 guard=0");
    assert_eq!(stdout_of(&out), "initialize=0\n");
    assert_eq!(
        records(&out),
        vec![
            (
                'E',
                "malloc_testing: bad value for option 'backtrace', value must be <= 256: 257"
                    .to_string()
            ),
            ('E', USAGE_1.to_string()),
            ('E', USAGE_2.to_string()),
        ]
    );
}

#[test]
fn null_arguments_fail_silently() {
    let out = run("null-args", "verbose");
    assert_eq!(
        stdout_of(&out),
        "null zygote=0\nnull options=0\ninitialize=1\n"
    );
    assert_eq!(
        records(&out),
        vec![('I', "malloc_testing: malloc debug enabled".to_string())]
    );
}

#[test]
fn android_9_int_zygote_flag_is_accepted() {
    let out = run("int-zygote", "verbose leak_track");
    assert_exit_code(&out, 0);
    assert_eq!(stdout_of(&out), "initialize=1\n");
}

#[test]
fn options_string_is_copied() {
    let out = run("options-copied", "expand_alloc=100");
    assert_exit_code(&out, 0);
    let usable: usize = stdout_of(&out)
        .lines()
        .find_map(|l| l.strip_prefix("usable="))
        .expect("usable line")
        .parse()
        .unwrap();
    assert!(
        usable >= 101,
        "expand_alloc=100 must still apply after the options buffer died: {usable}"
    );
}

#[test]
fn second_initialize_is_refused() {
    let out = run("twice", "");
    assert_eq!(stdout_of(&out), "initialize=1\nsecond=0\n");
}

/// A `debug_initialize` that fails at its last step (the free_track queue cannot be mapped)
/// undoes every step before it — the options' copy, the log file, the suppressions' mapping,
/// the signal handlers, record_allocs' ring — and a second call initialises (src/lifecycle.rs,
/// `Rollback`).
#[test]
fn initialize_failing_late_leaves_nothing_behind_and_can_be_retried() {
    let dir = scratch_dir("late-failure");
    let suppressions = dir.join("suppressions.txt");
    std::fs::write(&suppressions, "leak:nothing\n").unwrap();
    let log = dir.join("log.txt");
    let failing = format!(
        "log_file={} leak_suppressions={} record_allocs=1000 free_track=16384 \
         free_track_backtrace_num_frames=256",
        log.display(),
        suppressions.display()
    );
    let out = clean_command(driver())
        .arg(lib_path())
        .arg("late-failure")
        .arg(&failing)
        .arg("record_allocs=1000 free_track=10")
        .output()
        .expect("run driver");
    assert_exit_code(&out, 0);
    assert_eq!(
        stdout_of(&out),
        "first=0\nnative blocks left=0\ndescriptors left=0\nmappings left=0\n\
         record signal=default\nsecond=1\nrecord signal=installed\n"
    );
}

/// With either table libc may pass (classic or Android 17's).
#[test]
fn every_entry_point_in_pass_through_form() {
    for (layout, options) in LAYOUTS.into_iter().flat_map(|layout| {
        [
            " ",
            "fill expand_alloc=24",
            "verify_pointers",
            "guard",
            "free_track=10 leak_track",
        ]
        .map(|options| (layout, options))
    }) {
        let out = run_with_layout("surface", options, layout);
        assert_exit_code(&out, 0);
        let stdout = stdout_of(&out);
        assert!(
            stdout.contains("surface ok\nleak api ok\n"),
            "{layout:?} options {options:?}:\n{stdout}"
        );
        assert_eq!(
            records(&out),
            vec![
                ('E', "get_malloc_leak_info: At least one invalid parameter.".to_string()),
                (
                    'E',
                    "get_malloc_leak_info: Allocations not being tracked, to enable set the option 'backtrace'."
                        .to_string()
                ),
            ],
            "{layout:?} options {options:?}"
        );
    }
}

#[test]
fn finalize_is_idempotent_while_other_threads_allocate() {
    for options in ["fill", "guard free_track leak_track"] {
        let out = run("finalize-threads", options);
        assert_exit_code(&out, 0);
        assert!(
            stdout_of(&out).ends_with("finalize ok\n"),
            "{options}: {}",
            stdout_of(&out)
        );
    }
}

#[test]
fn verbose_run_lines_in_reference_order() {
    let out = run(
        "init",
        "verbose check_unreachable_on_signal log_allocator_stats_on_signal record_allocs backtrace backtrace_enable_on_signal",
    );
    assert_eq!(stdout_of(&out), "initialize=1\n");
    let lines = log_lines(&out.stderr);
    let pid = lines.first().expect("log lines").pid;
    let expected: Vec<(char, String)> = [
        (45, "enable backtracing"),
        (47, "dump the backtrace"),
        (46, "dump the allocation records"),
        (49, "log allocator stats"),
        (48, "check for unreachable memory"),
    ]
    .iter()
    .map(|(sig, what)| {
        (
            'I',
            format!("malloc_testing: Run: 'kill -{sig} {pid}' to {what}."),
        )
    })
    .chain([('I', "malloc_testing: malloc debug enabled".to_string())])
    .collect();
    assert_eq!(records(&out), expected);
}
