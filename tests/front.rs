//! Integration tests of the glibc front (`libmalloc_debug_front.so`, ffi/front/): how it decides
//! to load the library, bionic's failure messages, forwarding of bionic's leak API, the bootstrap
//! arena, and real programs running unchanged under malloc debug.

mod common;
#[path = "common/skip_log.rs"]
mod skip_log;

use common::*;
use skip_log::note_skip;
use std::path::PathBuf;
use std::process::{Command, Output};

const USAGE_1: &str = "For malloc debug option descriptions go to:";
const USAGE_2: &str =
    "  https://android.googlesource.com/platform/bionic/+/main/libc/malloc_debug/README.md";
const FALLBACK_DUMP: &str = "Native heap dump not available. To enable, run these commands \
                             (requires root):\n# adb shell stop\n# adb shell setprop \
                             libc.debug.malloc.options backtrace\n# adb shell start\n";

fn probe() -> PathBuf {
    compile_c("probe", programs_dir().join("probe.c"), &[])
}

/// The stand-in library (tests/programs/fake_debug_lib.c), with `defines` to leave symbols out.
fn fake_lib(name: &str, defines: &[&str]) -> PathBuf {
    let mut args = vec!["-shared", "-fPIC", "-fvisibility=hidden"];
    args.extend_from_slice(defines);
    compile_c(name, programs_dir().join("fake_debug_lib.c"), &args)
}

fn with_lib(lib: &std::path::Path) -> String {
    lib.to_str().expect("UTF-8 path").to_string()
}

fn lines(text: &str) -> Vec<&str> {
    text.lines().collect()
}

/// stderr consists of log lines only, and they are exactly `expected` (tag, priority, message).
fn assert_log(output: &Output, expected: &[(&str, char, &str)]) {
    let stderr = stderr_of(output);
    assert!(
        non_log_lines(&output.stderr).is_empty(),
        "stray stderr lines:\n{stderr}"
    );
    let got: Vec<(String, char, String)> = log_lines(&output.stderr)
        .into_iter()
        .map(|l| (l.tag, l.prio, l.msg))
        .collect();
    let want: Vec<(String, char, String)> = expected
        .iter()
        .map(|(t, p, m)| (t.to_string(), *p, m.to_string()))
        .collect();
    assert_eq!(got, want, "stderr:\n{stderr}");
}

/// The run printed `leaked=<pointer><rest>` and the library logged exactly that block as the
/// program's one leak, of `size` bytes.
fn assert_one_leak(out: &Output, program: &str, size: usize, rest: &str) {
    let stdout = stdout_of(out);
    let pointer = stdout
        .strip_prefix("leaked=")
        .and_then(|s| s.strip_suffix(rest))
        .unwrap_or_else(|| panic!("unexpected output: {stdout}"));
    assert_log(
        out,
        &[(
            "malloc_debug",
            'E',
            &format!("+++ {program} leaked block of size {size} at {pointer} (leak 1 of 1)"),
        )],
    );
}

// ---------------------------------------------------------------------------------------------
// Deciding whether to load.

#[test]
fn no_options_loads_nothing() {
    let probe = probe();
    for options in [None, Some("")] {
        let out = run_under_front(&probe, &["maps", LIB_NAME], options, &[]);
        assert_exit_code(&out, 0);
        assert_eq!(
            stdout_of(&out),
            "mapped=no\nalloc ok\n",
            "options {options:?}"
        );
        assert_eq!(stderr_of(&out), "", "options {options:?}");
    }
}

#[test]
fn program_filter_mismatch_loads_nothing() {
    let out = run_under_front(
        probe(),
        &["maps", LIB_NAME],
        Some("verbose"),
        &[("LIBC_DEBUG_MALLOC_PROGRAM", "not_this_program")],
    );
    assert_exit_code(&out, 0);
    assert_eq!(stdout_of(&out), "mapped=no\nalloc ok\n");
    assert_eq!(stderr_of(&out), "");
}

#[test]
fn program_filter_substring_match_loads() {
    let out = run_under_front(
        probe(),
        &["maps", LIB_NAME],
        Some("verbose"),
        &[("LIBC_DEBUG_MALLOC_PROGRAM", "rob")],
    );
    assert_exit_code(&out, 0);
    assert_eq!(stdout_of(&out), "mapped=yes\nalloc ok\n");
    assert_log(
        &out,
        &[("malloc_debug", 'I', "probe: malloc debug enabled")],
    );
}

#[test]
fn default_library_is_next_to_the_front() {
    // No LIBC_DEBUG_MALLOC_LIB: the front finds libc_malloc_debug.so in its own directory.
    let out = run_under_front(
        probe(),
        &["maps", &with_lib(&lib_path())],
        Some("verbose"),
        &[],
    );
    assert_exit_code(&out, 0);
    assert_eq!(stdout_of(&out), "mapped=yes\nalloc ok\n");
}

// ---------------------------------------------------------------------------------------------
// bionic's failure messages; the program always goes on with glibc's allocator.

#[test]
fn missing_library_is_reported_and_program_runs() {
    let missing = "/nonexistent-malloc-debug-dir/libc_malloc_debug.so";
    let out = run_under_front(
        probe(),
        &["maps", "nonexistent-malloc-debug-dir"],
        Some("verbose"),
        &[("LIBC_DEBUG_MALLOC_LIB", missing)],
    );
    assert_exit_code(&out, 0);
    assert_eq!(stdout_of(&out), "mapped=no\nalloc ok\n");
    let msg = format!(
        "probe: Unable to open shared library {missing}: {missing}: cannot open shared object \
         file: No such file or directory"
    );
    assert_log(&out, &[("libc", 'E', &msg)]);
    let line = &log_lines(&out.stderr)[0];
    assert_eq!(line.pid, line.tid, "initialised on the main thread");
}

/// Loads the stand-in library built with `defines` under `options` and checks that libc's side
/// refuses it with exactly `message(library path)`, leaving the program on glibc's allocator
/// (the library unmapped again, and "FAKE: initialize" never printed).
fn assert_fake_library_refused(
    file: &str,
    defines: &[&str],
    options: &str,
    message: &dyn Fn(&std::path::Path) -> String,
) {
    let lib = fake_lib(file, defines);
    let stem = file.trim_end_matches(".so");
    let out = run_under_front(
        probe(),
        &["maps", stem],
        Some(options),
        &[("LIBC_DEBUG_MALLOC_LIB", &with_lib(&lib))],
    );
    assert_exit_code(&out, 0);
    assert_eq!(stdout_of(&out), "mapped=no\nalloc ok\n");
    assert_log(&out, &[("libc", 'E', &message(&lib))]);
}

#[test]
fn library_without_a_dispatch_entry_is_rejected() {
    assert_fake_library_refused(
        "libfake_no_malloc_info.so",
        &["-DOMIT_MALLOC_INFO"],
        "verbose",
        &|_| "probe: dlsym(\"debug_malloc_info\") failed".to_string(),
    );
}

/// Android 17's libc requires debug_reallocarray; without it the library is unloaded and the
/// program runs without malloc debug
/// (docs/spec/android-versions.md#android-17-reallocarray).
#[test]
fn library_without_reallocarray_is_rejected() {
    assert_fake_library_refused(
        "libfake_no_reallocarray.so",
        &["-DOMIT_REALLOCARRAY"],
        "verbose",
        &|_| "probe: dlsym(\"debug_reallocarray\") failed".to_string(),
    );
}

fn reallocarray_leak() -> PathBuf {
    compile_c(
        "reallocarray_leak",
        programs_dir().join("reallocarray_leak.c"),
        &[],
    )
}

/// The front's reallocarray is Android 17's dispatch entry: it calls the library's
/// debug_reallocarray with the caller's arguments, overflowing ones included.
#[test]
fn reallocarray_is_a_dispatch_entry_of_its_own() {
    let lib = fake_lib("libfake_debug.so", &[]);
    let out = run_under_front(
        reallocarray_leak(),
        &[],
        Some("x"),
        &[("LIBC_DEBUG_MALLOC_LIB", &with_lib(&lib))],
    );
    assert_exit_code(&out, 0);
    let stderr = stderr_of(&out);
    let calls: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("FAKE: reallocarray"))
        .collect();
    let huge = usize::MAX / 2;
    assert_eq!(
        calls,
        [
            "FAKE: reallocarray nmemb=8 size=4".to_string(),
            format!("FAKE: reallocarray nmemb={huge} size=3"),
        ],
        "{stderr}"
    );
    assert!(stdout_of(&out).ends_with(" overflow=ENOMEM\n"));
}

/// With the real library: the block reallocarray made is tracked (reported as a leak at exit)
/// and an overflowing product fails with ENOMEM.
#[test]
fn reallocarray_goes_through_the_library() {
    let out = run_under_front(reallocarray_leak(), &[], Some("leak_track"), &[]);
    assert_exit_code(&out, 0);
    assert_one_leak(&out, "reallocarray_leak", 32, " overflow=ENOMEM\n");
}

fn sized_free() -> PathBuf {
    compile_c(
        "sized_free",
        programs_dir().join("sized_free.c"),
        &["-O1", "-g"],
    )
}

/// Runs tests/programs/sized_free.c under the front with glibc 2.43's sized frees behind it
/// (tests/programs/glibc243_frees.c, preloaded after the front): the program binds to the
/// front's names when it defines them, and to glibc's otherwise, as on a glibc 2.43 system.
fn run_sized_free(mode: &str, options: &str) -> Output {
    let glibc_frees = compile_c(
        "libglibc243_frees.so",
        programs_dir().join("glibc243_frees.c"),
        &["-shared", "-fPIC"],
    );
    let preload = format!("{}:{}", front_path().display(), glibc_frees.display());
    run_under_front(
        sized_free(),
        &[mode],
        Some(options),
        &[("LD_PRELOAD", &preload)],
    )
}

/// C23's `free_sized` and `free_aligned_sized` (glibc 2.43) and glibc's old `cfree` are the
/// library's free: under `guard` a block with a header freed by glibc would abort ("free():
/// invalid pointer"), and under `leak_track` the blocks would be reported as leaks. Only the
/// block the program keeps is.
#[test]
fn sized_frees_and_cfree_go_through_the_library() {
    let out = run_sized_free("clean", "guard leak_track");
    assert_exit_code(&out, 0);
    assert_one_leak(&out, "sized_free", 40, "\ndone\n");
}

/// A damaged block freed with `free_sized` is reported as at free, from the front's
/// `free_sized` and the program's function.
#[test]
fn free_sized_checks_the_guards() {
    let out = run_sized_free("overflow", "guard");
    assert_exit_code(&out, 0);
    assert_eq!(stdout_of(&out), "done\n");
    let messages = malloc_debug_messages(&out);
    let report = messages
        .iter()
        .find(|m| m.contains("HAS A CORRUPTED REAR GUARD"))
        .unwrap_or_else(|| panic!("no report: {messages:#?}"));
    assert!(
        report.starts_with("+++ ALLOCATION 0x")
            && report.ends_with(" SIZE 12 HAS A CORRUPTED REAR GUARD"),
        "{report}"
    );
    assert!(messages.contains(&"  allocation[12] = 0x01 (expected 0xbb)".to_string()));
    let frames = frames_of(&messages);
    assert_eq!(
        frames[..2],
        [
            "libmalloc_debug_front.so (free_sized)",
            "sized_free (overflow)"
        ],
        "{messages:#?}"
    );
}

/// A second `free_aligned_sized` of a block free_track holds is reported with the backtrace of
/// the first (without a header, the reference's `UNKNOWN POINTER`, docs/spec/errors.md): both
/// frees reached the library.
#[test]
fn free_aligned_sized_twice_is_a_double_free() {
    let out = run_sized_free("double", "free_track");
    assert_exit_code(&out, 0);
    let messages = malloc_debug_messages(&out);
    assert!(
        messages[1].starts_with("+++ ALLOCATION 0x")
            && messages[1].ends_with(" UNKNOWN POINTER (free)"),
        "{messages:#?}"
    );
    assert_eq!(messages[2], "Backtrace of original free:", "{messages:#?}");
    let frames = frames_of(&messages);
    let both = [
        "libmalloc_debug_front.so (free_aligned_sized)",
        "sized_free (double_free)",
        "sized_free (main)",
    ];
    assert_eq!(frames[..3], both, "{messages:#?}");
    let failure = messages
        .iter()
        .position(|m| m == "Backtrace at time of failure:")
        .expect("failure backtrace");
    assert_eq!(frames_of(&messages[failure..])[..3], both, "{messages:#?}");
}

/// A program whose executable defines malloc binds to its own allocator before the front; the
/// front then hands the names the program leaves out (reallocarray, free_sized) to that
/// allocator, does not load malloc debug, and says why when options ask for it. The program
/// runs as it does alone: its allocator aborts on a block that is not its own.
#[test]
fn a_program_with_its_own_allocator_runs_unchanged() {
    let program = compile_c(
        "own_allocator",
        programs_dir().join("own_allocator.c"),
        &["-O1"],
    );
    let alone = run_plain(&program, &[]);
    assert_exit_code(&alone, 0);
    for options in [None, Some("guard leak_track backtrace")] {
        let out = run_under_front(&program, &[], options, &[]);
        assert_exit_code(&out, 0);
        assert_eq!(stdout_of(&out), stdout_of(&alone), "options {options:?}");
        let expected: Vec<String> = match options {
            None => vec![],
            Some(_) => vec![format!(
                "own_allocator: malloc debug not enabled: {} defines malloc, so the process's \
                 allocations never reach malloc debug",
                program.display()
            )],
        };
        assert_eq!(libc_messages(&out), expected, "{}", stderr_of(&out));
        assert!(
            malloc_debug_messages(&out).is_empty(),
            "{}",
            stderr_of(&out)
        );
    }
}

/// An allocator in the executable that calls "the next malloc" reaches the front's malloc, which
/// then acts as glibc's (were it the process's, each call would recurse until the stack runs
/// out); the names it leaves out go back through it.
#[test]
fn an_allocator_that_wraps_the_next_malloc_runs_unchanged() {
    let program = compile_c(
        "next_malloc",
        programs_dir().join("next_malloc.c"),
        &["-O1", "-ldl"],
    );
    for options in [None, Some("guard leak_track")] {
        let out = run_under_front(&program, &[], options, &[]);
        assert_exit_code(&out, 0);
        assert_eq!(stdout_of(&out), "ok\n", "{}", stderr_of(&out));
        assert_eq!(
            libc_messages(&out).len(),
            usize::from(options.is_some()),
            "{}",
            stderr_of(&out)
        );
    }
}

/// A non-PIE executable that takes malloc's address has an undefined malloc whose value is its
/// PLT entry, and dlsym returns that entry; the process's malloc is still the front's, so malloc
/// debug runs (node is such a program: it crashed when the entry was taken for an allocator).
#[test]
fn a_non_pie_program_that_takes_malloc_address_is_checked() {
    let program = compile_c(
        "malloc_address",
        programs_dir().join("malloc_address.c"),
        &["-O1", "-no-pie", "-fno-pie"],
    );
    let out = run_under_front(&program, &[], Some("leak_track"), &[]);
    assert_exit_code(&out, 0);
    assert_one_leak(&out, "malloc_address", 48, "\n");
}

fn stderr_reuse() -> PathBuf {
    compile_c(
        "stderr_reuse",
        programs_dir().join("stderr_reuse.c"),
        &["-O1"],
    )
}

/// Runs stderr_reuse under leak_track with its standard error in a file; returns the run and
/// what that file holds.
fn run_stderr_reuse(args: &[&str], name: &str) -> (Output, String) {
    let dir = scratch_dir(&format!("stderr-{name}"));
    let stderr_file = dir.join("stderr.txt");
    let mut cmd = front_command(stderr_reuse(), args, Some("leak_track"), &[]);
    cmd.stderr(std::fs::File::create(&stderr_file).unwrap());
    let out = cmd.output().expect("run stderr_reuse");
    let log = std::fs::read_to_string(&stderr_file).unwrap();
    (out, log)
}

/// A program that closes descriptor 2 and opens a file of its own, which gets number 2: the
/// exit leak report goes to the standard error the process started with, never into that file
/// (it used to be appended to the program's data).
#[test]
fn the_log_never_goes_into_a_file_that_took_descriptor_2() {
    let dir = scratch_dir("stderr-data");
    let data = dir.join("data.txt");
    let (out, log) = run_stderr_reuse(&["reuse", data.to_str().unwrap()], "reuse");
    assert_exit_code(&out, 0);
    assert_eq!(
        std::fs::read_to_string(&data).unwrap(),
        "the program's own data\n"
    );
    let messages: Vec<String> = log_lines(log.as_bytes())
        .into_iter()
        .map(|l| l.msg)
        .collect();
    assert_eq!(messages.len(), 1, "{log}");
    assert!(
        messages[0].starts_with("+++ stderr_reuse leaked block of size 100 at 0x")
            && messages[0].ends_with(" (leak 1 of 1)"),
        "{log}"
    );
}

/// A program that closes stderr in an exit handler of its own (coreutils do) still gets its
/// exit report, through its standard error's path opened again.
#[test]
fn the_exit_report_reaches_a_stderr_the_program_closed() {
    let (out, log) = run_stderr_reuse(&["atexit"], "atexit");
    assert_exit_code(&out, 0);
    let messages: Vec<String> = log_lines(log.as_bytes())
        .into_iter()
        .map(|l| l.msg)
        .collect();
    assert_eq!(messages.len(), 1, "{log}");
    assert!(
        messages[0].starts_with("+++ stderr_reuse leaked block of size 200 at 0x"),
        "{log}"
    );
}

/// A program whose standard error was a FIFO closes it in an exit handler, and nobody reads the
/// FIFO any more: opening it again for the exit report would wait for a reader for ever, so the
/// report is dropped and the program exits (it hung).
#[test]
fn a_fifo_without_reader_does_not_hold_up_the_exit_report() {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = scratch_dir("fifo");
    let fifo = dir.join("stderr.fifo");
    let _ = std::fs::remove_file(&fifo);
    let status = Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("run mkfifo");
    assert!(status.success());
    // Read and write at once (Linux opens a FIFO so without waiting): the child's descriptor 2
    // is then the FIFO's only reader, gone once it closes stderr.
    let end = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&fifo)
        .unwrap();
    let mut child = front_command(stderr_reuse(), &["atexit"], Some("leak_track"), &[])
        .stderr(end)
        .spawn()
        .expect("start stderr_reuse");
    assert!(
        wait_or_kill(&mut child, std::time::Duration::from_secs(30)),
        "the exit report waited for a reader of the FIFO"
    );
    assert_eq!(child.wait().unwrap().code(), Some(0));
}

/// The exit report of a program whose stderr reader has gone (`prog 2>&1 | head -1`) must not
/// kill it with SIGPIPE: the program exits as it would bare, with 0 (it exited 141).
#[test]
fn a_closed_stderr_pipe_does_not_kill_the_program() {
    use std::io::Read;
    let program = compile_c("many_leaks", programs_dir().join("many_leaks.c"), &["-O1"]);
    let mut child = front_command(&program, &["3000"], Some("leak_track"), &[])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start many_leaks");
    // Read the first record, then go away as head does.
    let mut stderr = child.stderr.take().unwrap();
    let mut first = [0u8; 64];
    stderr.read_exact(&mut first).unwrap();
    drop(stderr);
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{status:?}");
}

/// The files the library writes never take descriptors 0-2, where a program that closed its
/// standard streams would write too: with 0 and 1 closed at exit, the exit heap dump is written
/// through a descriptor above 2 (seen with strace; its first write would otherwise be to 0).
#[test]
fn files_the_library_writes_stay_above_the_standard_descriptors() {
    if !Command::new("strace")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        eprintln!("WARNING: strace is not installed: check SKIPPED");
        note_skip("tests/front.rs: strace is not installed (the descriptors of written files)");
        return;
    }
    let dir = scratch_dir("stdio");
    let trace = dir.join("trace.txt");
    let options = format!(
        "LIBC_DEBUG_MALLOC_OPTIONS=backtrace leak_track backtrace_dump_on_exit \
         backtrace_dump_prefix={}",
        dir.join("heap").display()
    );
    let out = Command::new("strace")
        .args(["-f", "-qq", "-e", "trace=write", "-s", "24", "-o"])
        .arg(&trace)
        .arg("-E")
        .arg(format!("LD_PRELOAD={}", front_path().display()))
        .arg("-E")
        .arg(&options)
        .arg(stderr_reuse())
        .arg("closed-stdio")
        .output()
        .expect("run strace");
    assert_exit_code(&out, 0);
    let trace = std::fs::read_to_string(&trace).unwrap();
    let dump_writes: Vec<&str> = trace
        .lines()
        .filter(|l| l.contains("\"Android Native Heap Dump"))
        .collect();
    assert_eq!(dump_writes.len(), 1, "{trace}");
    let fd: i32 = dump_writes[0]
        .split_once("write(")
        .and_then(|(_, rest)| rest.split_once(','))
        .and_then(|(fd, _)| fd.parse().ok())
        .unwrap_or_else(|| panic!("{}", dump_writes[0]));
    assert!(fd > 2, "the dump went through descriptor {fd}:\n{trace}");
}

#[test]
fn library_without_a_control_function_is_rejected() {
    assert_fake_library_refused(
        "libfake_no_finalize.so",
        &["-DOMIT_FINALIZE"],
        "verbose",
        &|lib| {
            format!(
                "probe: debug_finalize routine not found in {}",
                lib.display()
            )
        },
    );
}

#[test]
fn failed_initialize_is_reported_and_library_unloaded() {
    assert_fake_library_refused("libfake_debug.so", &[], "fail", &|_| {
        "probe: failed to enable malloc debug".to_string()
    });
}

#[test]
fn bad_option_messages_use_the_program_name() {
    let out = run_under_front(probe(), &["maps", LIB_NAME], Some("foo"), &[]);
    assert_exit_code(&out, 0);
    assert!(
        stdout_of(&out).ends_with("alloc ok\n"),
        "{}",
        stdout_of(&out)
    );
    assert_log(
        &out,
        &[
            ("malloc_debug", 'E', "probe: unknown option foo"),
            ("malloc_debug", 'E', USAGE_1),
            ("malloc_debug", 'E', USAGE_2),
            ("libc", 'E', "probe: failed to enable malloc debug"),
        ],
    );
}

// ---------------------------------------------------------------------------------------------
// The contract with a loaded library, checked with the stand-in library.

#[test]
fn fake_library_sees_glibc_dispatch_and_is_finalized_at_exit() {
    let lib = fake_lib("libfake_debug.so", &[]);
    let out = run_under_front(
        probe(),
        &["maps", "libfake_debug"],
        Some("opt1  early"),
        &[("LIBC_DEBUG_MALLOC_LIB", &with_lib(&lib))],
    );
    assert_exit_code(&out, 0);
    assert_eq!(stdout_of(&out), "mapped=yes\nalloc ok\n");
    assert_eq!(
        lines(&stderr_of(&out)),
        [
            "FAKE: initialize options=opt1  early zygote=0",
            // The fake's constructor allocated from the bootstrap arena (malloc, calloc, free).
            "FAKE: early usable=100 ok=1",
            "FAKE: native ok=1 iterate=-1 errno_enotsup=1",
            "FAKE: finalize",
        ]
    );
}

#[test]
fn arena_blocks_survive_bootstrap() {
    // After initialisation, blocks the library got from the arena can be realloc'ed (copied
    // out) and freed (ignored).
    let lib = fake_lib("libfake_debug.so", &[]);
    let lib_str = with_lib(&lib);
    let out = run_under_front(
        probe(),
        &["early", &lib_str],
        Some("x"),
        &[("LIBC_DEBUG_MALLOC_LIB", &lib_str)],
    );
    assert_exit_code(&out, 0);
    assert_eq!(stdout_of(&out), "early check=0\n");
}

#[test]
fn other_threads_allocate_during_bootstrap() {
    // Threads started by the library's constructor allocate while the front is still
    // bootstrapping: they use the arena, wait for the table once it is exhausted, and their
    // blocks stay valid (realloc/usable_size/free) afterwards.
    let lib = fake_lib("libfake_debug.so", &[]);
    let lib_str = with_lib(&lib);
    let out = run_under_front(
        probe(),
        &["threads", &lib_str],
        Some("x"),
        &[
            ("LIBC_DEBUG_MALLOC_LIB", &lib_str),
            ("FAKE_BOOTSTRAP_THREADS", "1"),
        ],
    );
    assert_exit_code(&out, 0);
    assert_eq!(stdout_of(&out), "bootstrap threads errors=0\n");
}

/// The exit handler closes the standard streams without ever freeing descriptors 0-2: another
/// thread that opens files meanwhile is never given one, and keeps what it was given. (It used
/// to close each descriptor and dup2 it back, and the thread lost a descriptor to the dup2 in
/// about half of the runs; the record file's writer on a signal was one such thread.)
#[test]
fn the_exit_handler_never_frees_a_standard_descriptor() {
    let program = compile_c("exit_fds", programs_dir().join("exit_fds.c"), &["-pthread"]);
    for _ in 0..20 {
        let out = run_under_front(&program, &[], Some("leak_track"), &[]);
        assert_exit_code(&out, 0);
        assert_eq!(stdout_of(&out), "exit_fds\n");
        let stderr = stderr_of(&out);
        assert!(
            !stderr.contains("given standard descriptor") && !stderr.contains("replaced"),
            "{stderr}"
        );
    }
}

#[test]
fn leak_api_is_forwarded_to_the_library() {
    let lib = fake_lib("libfake_debug.so", &[]);
    let out = run_under_front(
        probe(),
        &["leak"],
        Some("x"),
        &[("LIBC_DEBUG_MALLOC_LIB", &with_lib(&lib))],
    );
    assert_exit_code(&out, 0);
    assert_eq!(
        stdout_of(&out),
        "null-arg untouched=1\n\
         leak info=set overall=40 info_size=40 total=2468 backtrace_size=3\n\
         record size=1234 num=2 frames=0x1000,0x2000,0x3000\n\
         malloc_backtrace=2 first=0xabc0\n\
         FAKE HEAP DUMP\n\
         write_malloc_leak_info=1 enotsup=0\n\
         android_mallopt get=1 errno_enotsup=0 overall=40\n\
         android_mallopt free=1\n\
         android_mallopt bad size=0 einval=1\n\
         FAKE HEAP DUMP\n\
         android_mallopt write=1 enotsup=0\n"
    );
    let stderr = stderr_of(&out);
    assert_eq!(
        stderr.matches("FAKE: free_malloc_leak_info buffer").count(),
        2,
        "{stderr}"
    );
}

#[test]
fn zygote_flag_reaches_the_library() {
    let lib = fake_lib("libfake_debug.so", &[]);
    let out = run_under_front(
        probe(),
        &["zygote"],
        Some("x"),
        &[("LIBC_DEBUG_MALLOC_LIB", &with_lib(&lib))],
    );
    assert_exit_code(&out, 0);
    assert_eq!(
        stdout_of(&out),
        "set zygote with arg=0 einval=1\nset zygote=1\nzygote bit=1\n"
    );
}

#[test]
fn leak_api_without_malloc_debug() {
    let out = run_under_front(probe(), &["leak"], None, &[]);
    assert_exit_code(&out, 0);
    assert_eq!(
        stdout_of(&out),
        format!(
            "null-arg untouched=1\n\
             leak info=null overall=0 info_size=0 total=0 backtrace_size=0\n\
             malloc_backtrace=0 first=0\n\
             {FALLBACK_DUMP}\
             write_malloc_leak_info=0 enotsup=1\n\
             android_mallopt get=0 errno_enotsup=1 overall=0\n\
             android_mallopt bad size=0 einval=1\n\
             {FALLBACK_DUMP}\
             android_mallopt write=0 enotsup=1\n"
        )
    );
    assert_eq!(stderr_of(&out), "");
}

// ---------------------------------------------------------------------------------------------
// The real library.

#[test]
fn verbose_logs_exactly_one_line() {
    let out = run_under_front(probe(), &["maps", LIB_NAME], Some("verbose"), &[]);
    assert_exit_code(&out, 0);
    assert_eq!(stdout_of(&out), "mapped=yes\nalloc ok\n");
    assert_log(
        &out,
        &[("malloc_debug", 'I', "probe: malloc debug enabled")],
    );
    let line = &log_lines(&out.stderr)[0];
    assert_eq!(line.pid, line.tid, "initialised on the main thread");
}

#[test]
fn leak_api_with_library_but_no_backtrace_option() {
    let out = run_under_front(probe(), &["leak"], Some("verbose"), &[]);
    assert_exit_code(&out, 0);
    assert_eq!(
        stdout_of(&out),
        format!(
            "null-arg untouched=1\n\
             leak info=null overall=0 info_size=0 total=0 backtrace_size=0\n\
             malloc_backtrace=0 first=0\n\
             {FALLBACK_DUMP}\
             write_malloc_leak_info=0 enotsup=1\n\
             android_mallopt get=1 errno_enotsup=0 overall=0\n\
             android_mallopt free=1\n\
             android_mallopt bad size=0 einval=1\n\
             {FALLBACK_DUMP}\
             android_mallopt write=0 enotsup=1\n"
        )
    );
    let not_tracked = "get_malloc_leak_info: Allocations not being tracked, to enable set the \
                       option 'backtrace'.";
    assert_log(
        &out,
        &[
            ("malloc_debug", 'I', "probe: malloc debug enabled"),
            ("malloc_debug", 'E', not_tracked),
            ("malloc_debug", 'E', not_tracked),
        ],
    );
}

#[test]
fn malloc_family_semantics_through_the_front() {
    for options in [None, Some("verbose"), Some("guard")] {
        let out = run_under_front(probe(), &["api"], options, &[]);
        assert_exit_code(&out, 0);
        assert_eq!(stdout_of(&out), "api ok\n", "options {options:?}");
    }
}

#[test]
fn scripts_run_passes_options_and_exit_status() {
    let script = manifest_dir().join("scripts").join("run");
    let probe = probe();
    let probe_str = probe.to_str().expect("UTF-8 path");
    let mut cmd = clean_command(&script);
    cmd.args(["--options", "verbose", "--", probe_str, "maps", LIB_NAME]);
    let out = cmd.output().expect("run scripts/run");
    assert_exit_code(&out, 0);
    assert_eq!(stdout_of(&out), "mapped=yes\nalloc ok\n");
    assert_log(
        &out,
        &[("malloc_debug", 'I', "probe: malloc debug enabled")],
    );

    let mut cmd = clean_command(&script);
    cmd.args(["--", probe_str, "no-such-scenario"]);
    let out = cmd.output().expect("run scripts/run");
    assert_exit_code(&out, 2);
}

// ---------------------------------------------------------------------------------------------
// Real programs under `verbose`: same stdout and exit code as without the front, and nothing on
// stderr but the one `malloc debug enabled` line.

fn assert_runs_unchanged(program: &std::path::Path, args: &[&str], attempts: usize) {
    let name = progname(program);
    let mut last = None;
    for _ in 0..attempts {
        let plain = run_plain(program, args);
        let debug = run_under_front(program, args, Some("verbose"), &[]);
        assert_eq!(
            debug.status.code(),
            plain.status.code(),
            "{name}: exit status differs\nstderr under the front:\n{}",
            stderr_of(&debug)
        );
        assert_log(
            &debug,
            &[(
                "malloc_debug",
                'I',
                &format!("{name}: malloc debug enabled"),
            )],
        );
        if debug.stdout == plain.stdout {
            return;
        }
        last = Some((plain, debug));
    }
    let (plain, debug) = last.expect("at least one attempt");
    assert_eq!(
        stdout_of(&debug),
        stdout_of(&plain),
        "{name}: stdout differs"
    );
}

#[test]
fn real_program_ls() {
    // `ls -la /` shows directory times that other processes may change (e.g. /tmp) between the
    // two runs: allow a few attempts.
    let ls = which("ls");
    assert_runs_unchanged(&ls, &["-la", "/"], 5);
}

#[test]
fn real_program_python_threads() {
    let python = python_executable();
    let script = r#"
import threading, zlib
results = [None] * 8
def work(i):
    d = {}
    for j in range(20000):
        d["k%d_%d" % (i, j)] = ("v" * (j % 50)) + str(j) * (i + 1)
    keys = sorted(d)
    s = "".join(keys[:200]) + "".join(d[k] for k in keys[-200:])
    results[i] = (len(d), sum(len(v) for v in d.values()), zlib.crc32(s.encode()))
threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
for t in threads: t.start()
for t in threads: t.join()
for r in results: print(r)
print("python ok")
"#;
    assert_runs_unchanged(&python, &["-c", script], 1);
}

#[test]
fn real_program_cxx_exceptions() {
    let exe = compile_c(
        "exceptions",
        programs_dir().join("exceptions.cpp"),
        &["-O2"],
    );
    assert_runs_unchanged(&exe, &[], 1);
    let out = run_plain(&exe, &[]);
    assert!(
        stdout_of(&out).ends_with("total 22933\n"),
        "{}",
        stdout_of(&out)
    );
}

#[test]
fn real_program_threaded_stress() {
    let exe = compile_c("stress", programs_dir().join("stress.c"), &["-O2"]);
    assert_runs_unchanged(&exe, &[], 1);
    let out = run_plain(&exe, &[]);
    assert!(
        stdout_of(&out).ends_with("stress ok\n"),
        "{}",
        stdout_of(&out)
    );
}

fn which(program: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{program} not found in PATH"))
}

/// The real interpreter (not a pyenv-style wrapper script, which would run other programs).
fn python_executable() -> PathBuf {
    let out = clean_command("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .expect("python3 is needed for this test (apt-get install python3)");
    assert!(out.status.success(), "python3 failed: {}", stderr_of(&out));
    PathBuf::from(stdout_of(&out).trim())
}
