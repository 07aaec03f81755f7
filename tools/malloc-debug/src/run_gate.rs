//! The leak-checking flags of `malloc-debug run` (README "Extensions", docs/tools.md "Leak
//! checking on Linux"): `--suppressions FILE`, `--log-file FILE` and `--error-exitcode N` become
//! the library's extension options `leak_suppressions=`, `log_file=` and `error_marker_file=`.
//!
//! With `--error-exitcode N` the program is not exec'd in place but run as a child: the library
//! appends a line to a fresh marker file whenever a process of the run reports an error or
//! prints leaks at exit, and once the program has exited this process exits with N if the
//! marker file is not empty, else with the program's own status (a program killed by a signal
//! is passed through as that signal). The program's exit status, output and exit handlers are
//! never touched.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use crate::{Result, err};

/// The extension options for the flags given (appended to `--options`).
pub struct Extras {
    pub options: Vec<String>,
    pub marker: Option<PathBuf>,
}

/// The options the flags add, and the marker file (created empty) for `--error-exitcode`.
pub fn extras(
    suppressions: Option<&Path>,
    log_file: Option<&Path>,
    error_exitcode: Option<u8>,
) -> Result<Extras> {
    let mut options = Vec::new();
    if let Some(file) = suppressions {
        if !file.is_file() {
            return Err(err!("--suppressions {}: no such file", file.display()));
        }
        options.push(format!("leak_suppressions={}", option_path(file)?));
    }
    if let Some(file) = log_file {
        options.push(format!("log_file={}", option_path(file)?));
    }
    let mut marker = None;
    if error_exitcode.is_some() {
        let path = unique_temp_path("malloc-debug-errors.");
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| err!("{}: {e}", path.display()))?;
        options.push(format!("error_marker_file={}", option_path(&path)?));
        marker = Some(path);
    }
    Ok(Extras { options, marker })
}

/// `options` with the extras appended; `None` when there is nothing at all.
pub fn merge(options: Option<&str>, extras: &Extras) -> Option<String> {
    let mut all: Vec<&str> = options.into_iter().collect();
    all.extend(extras.options.iter().map(String::as_str));
    (!all.is_empty()).then(|| all.join(" "))
}

/// An absolute path as an option value: the option string is split at white space, and the
/// program may change directory before the library reads the file.
fn option_path(file: &Path) -> Result<String> {
    let abs = std::path::absolute(file).map_err(|e| err!("{}: {e}", file.display()))?;
    let s = abs
        .to_str()
        .ok_or_else(|| err!("{}: the path is not UTF-8", abs.display()))?;
    if s.chars().any(char::is_whitespace) {
        return Err(err!(
            "{s}: paths with white space cannot be passed in the option string"
        ));
    }
    Ok(s.to_string())
}

/// Whether a process of the run reported an error or leaks (the marker file is not empty); the
/// file is removed.
pub fn marked(marker: &Path) -> bool {
    let marked = std::fs::metadata(marker).is_ok_and(|m| m.len() > 0);
    let _ = std::fs::remove_file(marker);
    marked
}

/// Runs `command` as a child and exits as the module docs say.
pub fn run_and_gate(mut command: Command, program: &OsString, code: u8, marker: &Path) -> ExitCode {
    let child = command.spawn();
    let status = child.and_then(|mut c| {
        // Like system(3): a terminal's ^C or ^\ goes to the program; this process waits for
        // its verdict. Set only after the spawn, so the program does not inherit it.
        // SAFETY: installs the "ignore" disposition; no handler code runs.
        unsafe {
            libc::signal(libc::SIGINT, libc::SIG_IGN);
            libc::signal(libc::SIGQUIT, libc::SIG_IGN);
        }
        c.wait()
    });
    let marked = marked(marker);
    let status = match status {
        Ok(s) => s,
        Err(e) => {
            eprintln!(
                "malloc-debug: cannot run {}: {e}",
                program.to_string_lossy()
            );
            return ExitCode::from(127);
        }
    };
    use std::os::unix::process::ExitStatusExt;
    if let Some(sig) = status.signal() {
        return die_of(sig);
    }
    if marked {
        return ExitCode::from(code);
    }
    ExitCode::from(status.code().unwrap_or(1) as u8)
}

/// Dies of `sig`, the signal that killed the program, so that the caller sees the same
/// termination; returns the shell's code for it only if the signal does not kill.
pub fn die_of(sig: i32) -> ExitCode {
    // SAFETY: restores the default action, unblocks the signal (the CLI may have inherited it
    // blocked) and raises it on this thread.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::raise(sig);
    }
    ExitCode::from(128u8.wrapping_add(sig as u8))
}

/// A path in the temporary directory no other run uses: `stem`, this process's id, the time
/// in nanoseconds.
pub fn unique_temp_path(stem: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!(
        "{stem}{}.{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    ))
}
