//! `malloc-debug dump PID` on the host: checks that the process can take the dump signal
//! (SIGRTMAX-17 kills a process without a backtrace option), sends it, waits for the file.

mod common;
use common::*;
use std::io::BufRead;
use std::process::{Child, Stdio};

/// tests/programs/idle.c under `run --no-symbolize` (exec'd: the child's pid is the program's),
/// once it has said "ready".
fn start(options: Option<&str>) -> Child {
    // Built once: the tests run in parallel and compile() recreates its directory.
    static IDLE: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    let idle = IDLE.get_or_init(|| compile("idle"));
    let mut cmd = cli();
    cmd.arg("run").arg("--no-symbolize");
    if let Some(o) = options {
        cmd.args(["--options", o]);
    }
    let mut child = cmd
        .arg("--")
        .arg(idle)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut ready = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut ready)
        .unwrap();
    assert_eq!(ready, "ready\n");
    child
}

fn alive(child: &mut Child) -> bool {
    std::thread::sleep(std::time::Duration::from_millis(200));
    child.try_wait().unwrap().is_none()
}

#[test]
fn dumps_a_process_running_with_backtraces() {
    let dir = tmp_dir("host-dump");
    let prefix = dir.join("heap");
    let mut child = start(Some(&format!(
        "backtrace backtrace_dump_prefix={}",
        prefix.display()
    )));
    let pid = child.id().to_string();
    let out = cli().args(["dump", &pid]).output().unwrap();
    let path = format!("{}.{pid}.txt", prefix.display());
    assert_eq!(ok(out), format!("{path}\n"));
    let dump = std::fs::read_to_string(&path).unwrap();
    assert!(
        dump.starts_with("Android Native Heap Dump v1.2\n"),
        "{dump}"
    );
    // A second dump replaces the first: the CLI waits for the new file, not the old one.
    let out = cli().args(["dump", &pid]).output().unwrap();
    assert_eq!(ok(out), format!("{path}\n"));
    // And the process lives on; its dump reports the cache's allocation site.
    assert!(alive(&mut child));
    let report = ok(cli().args(["report", &path]).output().unwrap());
    assert!(report.contains("cache_fill (idle.c:12)"), "{report}");
    child.kill().unwrap();
    child.wait().unwrap();
}

/// Without a backtrace option signal 47 would kill the process: `dump` refuses to send it.
#[test]
fn refuses_a_process_the_signal_would_kill() {
    let mut child = start(Some("guard"));
    let pid = child.id().to_string();
    let out = cli().args(["dump", &pid]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        format!(
            "malloc-debug: dump: process {pid} runs malloc debug without a backtrace option \
             (options \"guard\"): the dump signal would kill it; run it with --options \
             \"backtrace ...\"\n"
        )
    );
    assert!(alive(&mut child), "the process was signalled");
    child.kill().unwrap();
    child.wait().unwrap();

    // Not under malloc debug at all.
    let mut sleeper = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let pid = sleeper.id().to_string();
    let out = cli().args(["dump", &pid]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        format!(
            "malloc-debug: dump: process {pid} does not run under malloc debug (no \
             libc_malloc_debug.so in its maps): start it with `malloc-debug run`\n"
        )
    );
    assert!(alive(&mut sleeper));
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();

    // No such process; not a PID.
    let out = cli().args(["dump", "999999999"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        "malloc-debug: dump: cannot read /proc/999999999/maps: No such file or directory (os \
         error 2) (no such process?)\n"
    );
    let out = cli().args(["dump", "abc"]).output().unwrap();
    assert_eq!(
        stderr(&out),
        "malloc-debug: dump: expected a PID, got \"abc\"\n"
    );
}

/// A process that stops allocating never writes the dump: `dump` gives up after --wait.
#[test]
fn gives_up_after_wait() {
    let dir = tmp_dir("host-dump-stopped");
    let prefix = dir.join("heap");
    let mut child = start(Some(&format!(
        "backtrace backtrace_dump_prefix={}",
        prefix.display()
    )));
    let pid = child.id().to_string();
    // Stopped, it cannot reach its next malloc.
    // SAFETY: plain kill(2) on our own child.
    unsafe { libc_kill(child.id() as i32, 19) };
    let out = cli().args(["dump", &pid, "--wait", "1"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        format!(
            "malloc-debug: dump: {}.{pid}.txt was not written within 1s: has process {pid} \
             allocated or freed since the signal?\n",
            prefix.display()
        )
    );
    child.kill().unwrap();
    child.wait().unwrap();
}

unsafe extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}
