//! `malloc-debug dump PID`: the host twin of `device dump`. The backtrace dump signal
//! (SIGRTMAX-17, 47) has a handler only in a process whose malloc debug collects backtraces;
//! anywhere else its default action kills the process. So the CLI first checks, from /proc, that
//! the process has libc_malloc_debug.so loaded and that its options (from its environment,
//! checked by that very library) include a backtrace option; then it sends the signal, waits for
//! `PREFIX.PID.txt` to be (re)written — the library writes it whole, at the process's next
//! allocation call — and prints its path.

use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use crate::args::{Flag, Spec, number, string};
use crate::options::{self, Checked};
use crate::{Result, err};

/// SIGRTMAX-17 on Linux (SIGRTMAX is 64), the library's `backtrace_dump_signal`.
const DUMP_SIGNAL: i32 = 47;

#[derive(Default)]
pub struct Args {
    pid: Option<i32>,
    wait: Option<u64>,
}

pub const SPEC: Spec<Args> = Spec {
    command: "dump",
    operands: "PID",
    about: "Makes process PID (started with `malloc-debug run` and a backtrace option) write its\n\
            heap dump, waits for the file and prints its path. The process must allocate or\n\
            free after the signal for the dump to be written.",
    flags: &[Flag {
        name: "wait",
        short: None,
        value: Some("SECONDS"),
        help: "how long to wait for the dump (default 30)",
        set: |a, v| {
            a.wait = Some(number(v, "--wait")? as u64);
            Ok(())
        },
    }],
    operand: |a: &mut Args, v: OsString, _| {
        let s = string(v)?;
        if a.pid.is_some() {
            return Err(err!("dump: unexpected argument {s:?}"));
        }
        a.pid = Some(
            s.parse()
                .ok()
                .filter(|&p: &i32| p > 0)
                .ok_or_else(|| err!("dump: expected a PID, got {s:?}"))?,
        );
        Ok(())
    },
};

/// The value of `name` in a NUL-separated environment block.
fn env_var<'a>(environ: &'a [u8], name: &str) -> Option<&'a [u8]> {
    environ.split(|&b| b == 0).find_map(|kv| {
        kv.strip_prefix(name.as_bytes())
            .and_then(|rest| rest.strip_prefix(b"="))
    })
}

/// Whether `pid` still runs (a zombie does not).
fn running(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        // `pid (comm) S ...`: the state follows the last ')'.
        stat.rsplit_once(')')
            .is_some_and(|(_, rest)| !matches!(rest.trim_start().chars().next(), Some('Z' | 'X')))
    })
}

/// The dump file's identity, to tell a new dump from an earlier one.
fn identity(path: &Path) -> Option<(u64, i64, i64)> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.ino(), m.mtime(), m.mtime_nsec()))
}

pub fn main(args: Vec<OsString>) -> Result<ExitCode> {
    let Some(args) = SPEC.parse(args)? else {
        return Ok(ExitCode::SUCCESS);
    };
    let pid = args.pid.ok_or_else(|| err!("dump: no PID given"))?;
    let proc = PathBuf::from(format!("/proc/{pid}"));
    let maps = std::fs::read_to_string(proc.join("maps"))
        .map_err(|e| err!("dump: cannot read /proc/{pid}/maps: {e} (no such process?)"))?;
    let Some(lib) = maps
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| p.ends_with("/libc_malloc_debug.so"))
    else {
        return Err(err!(
            "dump: process {pid} does not run under malloc debug (no libc_malloc_debug.so in \
             its maps): start it with `malloc-debug run`"
        ));
    };
    let environ = std::fs::read(proc.join("environ"))
        .map_err(|e| err!("dump: cannot read /proc/{pid}/environ: {e}"))?;
    let opts = env_var(&environ, "LIBC_DEBUG_MALLOC_OPTIONS")
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .unwrap_or_default();
    let comm = std::fs::read_to_string(proc.join("comm")).unwrap_or_default();
    let prefix = match options::check(Path::new(lib), &opts, comm.trim_end())? {
        Checked::Valid { bits, dump_prefix } if bits & options::BACKTRACE != 0 => dump_prefix,
        _ => {
            return Err(err!(
                "dump: process {pid} runs malloc debug without a backtrace option (options \
                 \"{opts}\"): the dump signal would kill it; run it with --options \"backtrace \
                 ...\""
            ));
        }
    };
    let path = PathBuf::from(format!("{prefix}.{pid}.txt"));
    let before = identity(&path);
    // SAFETY: plain kill(2).
    if unsafe { libc::kill(pid, DUMP_SIGNAL) } != 0 {
        return Err(err!(
            "dump: cannot signal process {pid}: {}",
            std::io::Error::last_os_error()
        ));
    }
    let wait = Duration::from_secs(args.wait.unwrap_or(30));
    let start = Instant::now();
    loop {
        let now = identity(&path);
        if now.is_some() && now != before {
            println!("{}", path.display());
            return Ok(ExitCode::SUCCESS);
        }
        if !running(pid) {
            return Err(err!(
                "dump: process {pid} ended before writing {}",
                path.display()
            ));
        }
        if start.elapsed() >= wait {
            return Err(err!(
                "dump: {} was not written within {}s: has process {pid} allocated or freed \
                 since the signal?",
                path.display(),
                wait.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
