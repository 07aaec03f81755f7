//! errno through the C ABI (README "Differences from the reference"): an exported call that
//! succeeds leaves errno as it was. tests/abi/errno.c sets errno to a sentinel before every call
//! of every entry point and checks it after, on the first calls and while the tables grow, with
//! the signal-driven work run inside an allocation; here for every option. (On this kernel
//! `prctl(PR_SET_VMA_ANON_NAME)` fails with EINVAL, so every internal mapping is a chance to
//! leak an errno.) The failure cases' errno values are checked by tests/abi.rs.

mod common;

use common::*;

#[test]
fn successful_calls_leave_errno_alone_under_every_option() {
    let driver = compile_c("errno", "tests/abi/errno.c", &[]);
    let dir = scratch_dir("errno");
    let d = dir.display();
    let option_sets = [
        "verbose".to_string(),
        "fill".to_string(),
        "fill_on_alloc=64 fill_on_free=64".to_string(),
        "expand_alloc=24".to_string(),
        "guard".to_string(),
        "front_guard=64".to_string(),
        "rear_guard=48".to_string(),
        "free_track=100".to_string(),
        "free_track=10 free_track_backtrace_num_frames=4".to_string(),
        "verify_pointers".to_string(),
        "leak_track".to_string(),
        "backtrace".to_string(),
        "backtrace=16 backtrace_full".to_string(),
        "backtrace backtrace_min_size=100 backtrace_max_size=400".to_string(),
        "backtrace_enable_on_signal".to_string(),
        format!("backtrace backtrace_dump_on_exit backtrace_dump_prefix={d}/bt"),
        format!("record_allocs record_allocs_file={d}/rec.txt"),
        format!("record_allocs=100 record_allocs_on_exit record_allocs_file={d}/rec2.txt"),
        "log_allocator_stats_on_signal log_allocator_stats_on_exit".to_string(),
        "abort_on_error guard".to_string(),
        "check_unreachable_on_signal leak_track".to_string(),
        format!(
            "backtrace leak_track guard free_track verify_pointers fill expand_alloc=8 \
             record_allocs record_allocs_file={d}/rec3.txt"
        ),
    ];
    let mut failures = Vec::new();
    for options in &option_sets {
        // Signal-driven heap dumps go to the scratch directory too.
        let options = format!("{options} backtrace_dump_prefix={d}/signal");
        let out = clean_command(&driver)
            .arg(lib_path())
            .arg(&options)
            .arg(&dir)
            .output()
            .expect("run errno driver");
        let stdout = stdout_of(&out);
        let last = stdout.lines().last().unwrap_or_default();
        let ok = out.status.success()
            && last.starts_with("errno checks ")
            && last.ends_with(" clobbered 0");
        if !ok {
            failures.push(format!(
                "options {options:?}: status {}\n{stdout}",
                out.status
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
