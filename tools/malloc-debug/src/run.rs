//! `malloc-debug run`: the command-line twin of scripts/run. Sets up the glibc front the way
//! ffi/front/front.c reads it (LD_PRELOAD, LIBC_DEBUG_MALLOC_OPTIONS, LIBC_DEBUG_MALLOC_PROGRAM,
//! LIBC_DEBUG_MALLOC_LIB) and execs the command, so its exit status and signals pass through.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use crate::cli::RunArgs;
use crate::{Result, err};

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

pub fn main(args: RunArgs) -> Result<ExitCode> {
    let lib = find(args.lib, LIB, None)?;
    // The front defaults to the library's directory, then to the usual places.
    let front = find(args.front, FRONT, lib.parent())?;
    let mut command = Command::new(&args.command[0]);
    command.args(&args.command[1..]);
    let extras = crate::run_gate::extras(
        args.suppressions.as_deref(),
        args.log_file.as_deref(),
        args.error_exitcode,
    )?;
    if let Some(options) = crate::run_gate::merge(args.options.as_deref(), &extras) {
        command.env("LIBC_DEBUG_MALLOC_OPTIONS", options);
    }
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
    if let (Some(code), Some(marker)) = (args.error_exitcode, &extras.marker) {
        return Ok(crate::run_gate::run_and_gate(
            command,
            &args.command[0],
            code,
            marker,
        ));
    }
    let e = command.exec();
    eprintln!(
        "malloc-debug: cannot run {}: {e}",
        args.command[0].to_string_lossy()
    );
    Ok(ExitCode::from(127))
}
