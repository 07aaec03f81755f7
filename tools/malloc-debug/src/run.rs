//! `malloc-debug run`: the command-line twin of scripts/run. Sets up the glibc front the way
//! ffi/front/front.c reads it (LD_PRELOAD, LIBC_DEBUG_MALLOC_OPTIONS, LIBC_DEBUG_MALLOC_PROGRAM,
//! LIBC_DEBUG_MALLOC_LIB) and runs the command; its exit status and signals pass through.
//!
//! Before anything runs, the option string goes through the library's own parser (`options`);
//! without `--options`, [`DEFAULT_OPTIONS`] is used and the first line on stderr says so.
//! When the options collect backtraces, the log's frame lines get `FUNCTION at FILE:LINE`
//! (`logsym`): the library asks the CLI's annotation server (`annotate`) as it renders each
//! distinct frame, and the command keeps its own stderr (piped through the CLI instead only if
//! the server cannot be started). Without backtraces (or with `--no-symbolize`) the command is
//! exec'd.

use std::ffi::OsString;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};

use crate::args::{Flag, Spec, string};
use crate::logsym::{self, LogSymbolizer};
use crate::options::{self, Checked};
use crate::{Result, err};

/// Catches the common heap bugs: overflow and underflow (guard), use after free and double free
/// (free_track), and leaks, each with the backtrace of the allocation (and of the free); the
/// `error_backtraces` extension adds the allocation's to every error report. Leaks
/// as valgrind and LeakSanitizer count them: `leak_unreachable` (an extension, README
/// "Extensions") prints only the blocks nothing reachable points to at exit, then a summary
/// line; the reference's `leak_track` alone lists every live block (`--options` with
/// `leak_track` and without `leak_unreachable` gets that).
pub const DEFAULT_OPTIONS: &str =
    "backtrace guard free_track leak_track leak_unreachable error_backtraces";

#[derive(Default)]
pub struct Args {
    options: Option<String>,
    program: Option<String>,
    lib: Option<PathBuf>,
    front: Option<PathBuf>,
    symbols: Option<PathBuf>,
    no_symbolize: bool,
    command: Vec<OsString>,
    /// Leak checking (run_gate.rs).
    suppressions: Option<PathBuf>,
    log_file: Option<PathBuf>,
    error_exitcode: Option<u8>,
}

/// The flags of `run`: a new flag is one row here (and its field in [`Args`]).
const FLAGS: &[Flag<Args>] = &[
    Flag {
        name: "options",
        short: None,
        value: Some("OPTS"),
        help: "malloc debug options, checked by the library before CMD starts\n\
               (default: \"backtrace guard free_track leak_track leak_unreachable error_backtraces\")",
        set: |a, v| {
            a.options = Some(string(v)?);
            Ok(())
        },
    },
    Flag {
        name: "program",
        short: None,
        value: Some("NAME"),
        help: "enable malloc debug only in processes whose name contains NAME\n\
               (libc.debug.malloc.program)",
        set: |a, v| {
            a.program = Some(string(v)?);
            Ok(())
        },
    },
    Flag {
        name: "lib",
        short: None,
        value: Some("LIB.so"),
        help: "the libc_malloc_debug.so to use",
        set: |a, v| {
            a.lib = Some(v.into());
            Ok(())
        },
    },
    Flag {
        name: "front",
        short: None,
        value: Some("FRONT.so"),
        help: "the libmalloc_debug_front.so to preload",
        set: |a, v| {
            a.front = Some(v.into());
            Ok(())
        },
    },
    crate::report::symbols_flag(|a: &mut Args, v| {
        a.symbols = Some(v.into());
        Ok(())
    }),
    Flag {
        name: "no-symbolize",
        short: None,
        value: None,
        help: "leave the log's frame lines as the library writes them\n\
               (CMD is then exec'd: no annotation server, no pipe)",
        set: |a, _| {
            a.no_symbolize = true;
            Ok(())
        },
    },
    Flag {
        name: "suppressions",
        short: None,
        value: Some("FILE"),
        help: "leak checking: leaks matching FILE's leak:PATTERN rules are counted, not printed\n\
               (docs/tools.md, \"Leak checking on Linux\")",
        set: |a, v| {
            a.suppressions = Some(v.into());
            Ok(())
        },
    },
    Flag {
        name: "log-file",
        short: None,
        value: Some("FILE"),
        help: "send malloc debug's log to FILE (CMD's stdout and stderr stay its own)",
        set: |a, v| {
            a.log_file = Some(v.into());
            Ok(())
        },
    },
    Flag {
        name: "error-exitcode",
        short: None,
        value: Some("N"),
        help: "exit with N when an error or a leak was reported (a CI gate)",
        set: |a, v| {
            let s = string(v)?;
            let n: usize = s
                .parse()
                .map_err(|_| err!("--error-exitcode: expected a number, got {s:?}"))?;
            a.error_exitcode = Some(
                u8::try_from(n)
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or_else(|| err!("--error-exitcode: expected 1 to 255, got {n}"))?,
            );
            Ok(())
        },
    },
];

pub const SPEC: Spec<Args> = Spec {
    command: "run",
    operands: "[--] CMD ARGS...",
    about: "Runs CMD under malloc debug with the glibc front (LD_PRELOAD); CMD's exit status\n\
            and signals pass through. libc_malloc_debug.so and libmalloc_debug_front.so are\n\
            looked for in $MALLOC_DEBUG_LIB_DIR, next to this program, then in its ../lib.\n\
            Backtrace frames in the log get `FUNCTION at FILE:LINE` when the module has debug\n\
            info (in the module, or separate: /usr/lib/debug/.build-id, .gnu_debuglink).",
    flags: FLAGS,
    operand: |a: &mut Args, v: OsString, p: &mut lexopt::Parser| {
        // `run CMD` without `--` is accepted too; everything from CMD on is CMD's.
        a.command.push(v);
        a.command.extend(p.raw_args()?);
        Ok(())
    },
};

const FRONT: &str = "libmalloc_debug_front.so";
const LIB: &str = "libc_malloc_debug.so";

/// Names a directory holding both shared objects; searched first.
pub const LIB_DIR_ENV: &str = "MALLOC_DEBUG_LIB_DIR";

/// Directories searched for the front and the library: `$MALLOC_DEBUG_LIB_DIR`, next to this
/// executable (cargo puts all three in target/release), then its `../lib`.
fn default_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os(LIB_DIR_ENV)
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .into_iter()
        .collect();
    let Ok(exe) = std::env::current_exe() else {
        return dirs;
    };
    let Some(dir) = exe.parent() else {
        return dirs;
    };
    dirs.push(dir.to_path_buf());
    // Test binaries live in target/release/deps.
    if dir.ends_with("deps") {
        dirs.extend(dir.parent().map(Path::to_path_buf));
    }
    dirs.push(dir.join("../lib"));
    dirs
}

fn find(explicit: Option<PathBuf>, name: &str, also: Option<&Path>) -> Result<PathBuf> {
    let candidates: Vec<PathBuf> = match explicit {
        Some(p) => vec![p],
        None => also
            .map(Path::to_path_buf)
            .into_iter()
            .chain(default_dirs())
            .map(|d| d.join(name))
            .collect(),
    };
    for c in &candidates {
        if c.is_file() {
            return std::path::absolute(c).map_err(|e| err!("{}: {e}", c.display()));
        }
    }
    Err(err!(
        "{name} not found (looked at {}): build it with `cargo build --release`, or pass \
         --lib/--front, or set {LIB_DIR_ENV}",
        candidates
            .iter()
            .map(|c| c.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

pub fn main(args: Vec<OsString>) -> Result<ExitCode> {
    let Some(args) = SPEC.parse(args)? else {
        return Ok(ExitCode::SUCCESS);
    };
    if args.command.is_empty() {
        return Err(err!(
            "run: no command given (usage: malloc-debug run [FLAGS] -- CMD ARGS...)"
        ));
    }
    let lib = find(args.lib.clone(), LIB, None)?;
    // The front defaults to the library's directory, then to the usual places.
    let front = find(args.front.clone(), FRONT, lib.parent())?;
    // The flags' own errors first, before anything is said or started.
    let extras = crate::run_gate::extras(
        args.suppressions.as_deref(),
        args.log_file.as_deref(),
        args.error_exitcode,
    )?;
    let options = match &args.options {
        Some(o) => o.clone(),
        None => {
            eprintln!(
                "malloc-debug: using --options \"{DEFAULT_OPTIONS}\" (the default: overflow, \
                 use after free, double free, lost blocks at exit, with backtraces)"
            );
            DEFAULT_OPTIONS.to_string()
        }
    };
    let progname = Path::new(&args.command[0])
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let bits = match options::check(&lib, &options, &progname) {
        Ok(Checked::Valid { bits, .. }) => Some(bits),
        Ok(Checked::Invalid(lines)) => {
            eprint!(
                "malloc-debug: the library refuses --options \"{options}\":\n{lines}\
                 (see malloc-debug run --help)\n"
            );
            if let Some(marker) = &extras.marker {
                let _ = std::fs::remove_file(marker);
            }
            return Ok(ExitCode::from(2));
        }
        Err(e) => {
            // A library this process cannot load (another architecture) can still be right
            // for CMD: run it, unchecked.
            eprintln!("malloc-debug: warning: {e}");
            None
        }
    };
    for warning in crate::run_preflight::warnings(&args.command[0]) {
        eprintln!("malloc-debug: warning: {warning}");
    }
    let mut command = Command::new(&args.command[0]);
    command.args(&args.command[1..]);
    let all_options = crate::run_gate::merge(Some(&options), &extras).unwrap_or(options);
    command.env("LIBC_DEBUG_MALLOC_OPTIONS", &all_options);
    if let Some(program) = &args.program {
        command.env("LIBC_DEBUG_MALLOC_PROGRAM", program);
    }
    command.env("LIBC_DEBUG_MALLOC_LIB", &lib);
    let mut preload = front.into_os_string();
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
        preload.push(":");
        preload.push(old);
    }
    command.env("LD_PRELOAD", preload);
    let gate = args.error_exitcode.zip(extras.marker.clone());
    let backtraces = bits.is_some_and(|b| b & options::BACKTRACE != 0);
    if backtraces && !args.no_symbolize {
        // Piped through the CLI only if the server cannot be started.
        let server = crate::annotate::Server::start(args.symbols.clone()).ok();
        if let Some(server) = &server {
            command.env(crate::annotate::SOCKET_ENV, server.socket());
        }
        let ended = supervise(command, &args, server.is_none())?;
        // The socket's directory and the marker go before the CLI ends, whichever way it ends.
        drop(server);
        let marked = gate
            .as_ref()
            .is_some_and(|(_, marker)| crate::run_gate::marked(marker));
        return Ok(match (ended, gate) {
            (Ended::Killed(sig), _) => crate::run_gate::die_of(sig),
            (Ended::Exited(_), Some((n, _))) if marked => ExitCode::from(n),
            (Ended::Exited(code), _) => code,
        });
    }
    if let Some((code, marker)) = gate {
        return Ok(crate::run_gate::run_and_gate(
            command,
            &args.command[0],
            code,
            &marker,
        ));
    }
    let e = command.exec();
    eprintln!("malloc-debug: {}", cannot_run(&args, e));
    Ok(ExitCode::from(127))
}

fn cannot_run(args: &Args, e: std::io::Error) -> crate::Error {
    err!("cannot run {}: {e}", args.command[0].to_string_lossy())
}

/// The child, for the forwarding signal handler (0 before it exists).
static CHILD: AtomicI32 = AtomicI32::new(0);

extern "C" fn forward(sig: libc::c_int) {
    let pid = CHILD.load(Ordering::Relaxed);
    if pid > 0 {
        // SAFETY: kill is async-signal-safe.
        unsafe { libc::kill(pid, sig) };
    }
}

/// How the command ended.
enum Ended {
    Exited(ExitCode),
    Killed(libc::c_int),
}

/// Runs the command, with its stderr piped through the log symbolizer when `pipe`, and says how
/// it ended; the caller cleans up, then ends the same way. The CLI outlives the command so that no log line is lost and the
/// annotation server answers to the end: it ignores the terminal's SIGINT/SIGQUIT (the command
/// gets them too) and forwards SIGTERM/SIGHUP.
fn supervise(mut command: Command, args: &Args, pipe: bool) -> Result<Ended> {
    if pipe {
        command.stderr(Stdio::piped());
    }
    let mut child = match command.spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("malloc-debug: {}", cannot_run(args, e));
            return Ok(Ended::Exited(ExitCode::from(127)));
        }
    };
    CHILD.store(child.id() as i32, Ordering::Relaxed);
    // SAFETY: installing SIG_IGN or an async-signal-safe handler.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGQUIT, libc::SIG_IGN);
        libc::signal(libc::SIGTERM, forward as *const () as libc::sighandler_t);
        libc::signal(libc::SIGHUP, forward as *const () as libc::sighandler_t);
    }
    if let Some(mut pipe) = child.stderr.take() {
        let mut sym = LogSymbolizer::new(args.symbols.clone());
        logsym::filter(&mut pipe, &mut std::io::stderr().lock(), &mut sym);
    }
    let status = child
        .wait()
        .map_err(|e| err!("waiting for {}: {e}", args.command[0].to_string_lossy()))?;
    Ok(match status.signal() {
        Some(sig) => Ended::Killed(sig),
        None => Ended::Exited(ExitCode::from(status.code().unwrap_or(1) as u8)),
    })
}
