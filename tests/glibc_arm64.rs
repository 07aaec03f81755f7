//! The library and the glibc front built for arm64 Linux (aarch64-unknown-linux-gnu), where GNU
//! ld links (x86_64's rustc links with lld): the build must link, and the README's demo must
//! report its overflow and its leak, with the program's frames, when run under qemu against
//! Debian's arm64 glibc (`/usr/aarch64-linux-gnu`).
//!
//! Needs the rustup target `aarch64-unknown-linux-gnu` and `aarch64-linux-gnu-gcc` (Debian's
//! gcc-aarch64-linux-gnu), for the run also `qemu-aarch64-static` (qemu-user-static); .ci/run
//! installs them. Without them the checks are skipped loudly.

mod common;
#[path = "common/skip_log.rs"]
mod skip_log;

use common::{
    frames_of, include_dir, lib_dir as host_lib_dir, malloc_debug_messages, manifest_dir,
    programs_dir,
};
use skip_log::note_skip;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

const TARGET: &str = "aarch64-unknown-linux-gnu";
const CC: &str = "aarch64-linux-gnu-gcc";
const SYSROOT: &str = "/usr/aarch64-linux-gnu";
const QEMU: &str = "qemu-aarch64-static";

fn skip(why: &str) {
    eprintln!("########################################################################");
    eprintln!("WARNING: arm64 glibc checks SKIPPED: {why}");
    eprintln!("########################################################################");
    note_skip(&format!("tests/glibc_arm64.rs: {why}"));
}

fn runs(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The library and the front for arm64 glibc, built once per test binary; their directory, or
/// None (skipped).
fn built() -> Option<&'static Path> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(build).as_deref()
}

fn build() -> Option<PathBuf> {
    let installed = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .any(|l| l == TARGET)
        })
        .unwrap_or(false);
    if !installed {
        skip(&format!("the rustup target {TARGET} is not installed"));
        return None;
    }
    if !runs(CC, &["--version"]) {
        skip(&format!("{CC} is not installed (gcc-aarch64-linux-gnu)"));
        return None;
    }
    let out = Command::new(env!("CARGO"))
        .args(["build", "--release", "--lib", "-p", "c_malloc_debug"])
        .args(["--target", TARGET])
        .env("CC_aarch64_unknown_linux_gnu", CC)
        .env("CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER", CC)
        .current_dir(manifest_dir())
        .output()
        .expect("run cargo");
    assert!(
        out.status.success(),
        "cargo build --target {TARGET} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Beside the host's <target>/release, where the host build is.
    let target_dir = host_lib_dir()
        .parent()
        .expect("target directory")
        .to_path_buf();
    Some(target_dir.join(TARGET).join("release"))
}

/// Cross-compiles a C program (examples/ or tests/programs/) into `dir`.
fn cross_compile(source: &Path, dir: &Path, name: &str) -> PathBuf {
    let program = dir.join(name);
    let status = Command::new(CC)
        .args(["-O1", "-g", "-pthread", "-I"])
        .arg(include_dir())
        .arg("-o")
        .arg(&program)
        .arg(source)
        .arg("-ldl")
        .status()
        .expect("run the cross compiler");
    assert!(status.success(), "{CC} {} failed", source.display());
    program
}

/// Runs `program args` under qemu with the front preloaded and `options`; None when qemu or the
/// arm64 glibc is missing (skipped).
fn run_under_front(lib_dir: &Path, program: &Path, args: &[&str], options: &str) -> Option<Output> {
    if !runs(QEMU, &["--version"]) || !Path::new(SYSROOT).join("lib").is_dir() {
        skip(&format!(
            "{QEMU} or {SYSROOT} is missing (qemu-user-static, gcc-aarch64-linux-gnu): built, not run"
        ));
        return None;
    }
    let front = lib_dir.join("libmalloc_debug_front.so");
    Some(
        Command::new(QEMU)
            .args(["-L", SYSROOT])
            .arg("-E")
            .arg(format!("LD_PRELOAD={}", front.display()))
            .arg("-E")
            .arg(format!("LIBC_DEBUG_MALLOC_OPTIONS={options}"))
            .arg(program)
            .args(args)
            .output()
            .expect("run qemu"),
    )
}

#[test]
fn the_demo_reports_its_bugs_on_arm64_glibc() {
    let Some(lib_dir) = built() else { return };
    assert!(lib_dir.join("libc_malloc_debug.so").is_file());
    let demo = cross_compile(
        &manifest_dir().join("examples").join("demo.c"),
        lib_dir,
        "demo-arm64",
    );
    let Some(out) = run_under_front(lib_dir, &demo, &[], "guard backtrace leak_track") else {
        return;
    };
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "hello, malloc debug\n"
    );
    let messages = malloc_debug_messages(&out);
    let overflow = messages
        .iter()
        .position(|m| m.ends_with(" SIZE 12 HAS A CORRUPTED REAR GUARD"))
        .unwrap_or_else(|| panic!("no overflow report:\n{stderr}"));
    assert_eq!(
        messages[overflow + 1],
        "  allocation[12] = 0x00 (expected 0xbb)"
    );
    let frames = frames_of(&messages[overflow..]);
    assert_eq!(
        frames[..2],
        ["libmalloc_debug_front.so (free)", "demo-arm64 (main)"],
        "{stderr}"
    );
    let leak = messages
        .iter()
        .position(|m| m.starts_with("+++ demo-arm64 leaked block of size 64 at 0x"))
        .unwrap_or_else(|| panic!("no leak report:\n{stderr}"));
    let frames = frames_of(&messages[leak..]);
    assert_eq!(
        frames[..3],
        [
            "libmalloc_debug_front.so (malloc)",
            "demo-arm64 (make_greeting)",
            "demo-arm64 (main)"
        ],
        "{stderr}"
    );
}

/// The malloc family's semantics through the front (tests/programs/probe.c's `api`, as
/// tests/front.rs runs it on x86_64), with the library's header layout and without.
#[test]
fn the_malloc_family_behaves_on_arm64_glibc() {
    let Some(lib_dir) = built() else { return };
    let probe = cross_compile(&programs_dir().join("probe.c"), lib_dir, "probe-arm64");
    for options in ["verbose", "guard", "leak_track"] {
        let Some(out) = run_under_front(lib_dir, &probe, &["api"], options) else {
            return;
        };
        assert_eq!(
            (
                out.status.code(),
                String::from_utf8_lossy(&out.stdout).into_owned()
            ),
            (Some(0), "api ok\n".to_string()),
            "{options}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
