//! Builds the glibc front (`ffi/front/*.c`) into `libmalloc_debug_front.so`, next to the cdylib
//! (`target/<profile>/` or `target/<triple>/<profile>/`). Included by the crate's build.rs; runs
//! only for `*-linux-gnu*` targets (Android has bionic's own loader).

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

const FRONT_NAME: &str = "libmalloc_debug_front.so";

pub fn build() {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let ffi_dir = manifest_dir.join("ffi");
    println!("cargo:rerun-if-changed={}", ffi_dir.display());

    let target = env::var("TARGET").unwrap_or_default();
    if !target.contains("-linux-gnu") {
        return;
    }

    let out_dir = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR"));
    // OUT_DIR is <target-dir>/[<triple>/]<profile>/build/<package>-<hash>/out.
    let dest_dir = out_dir
        .ancestors()
        .nth(3)
        .expect("OUT_DIR has the layout <profile>/build/<package>-<hash>/out")
        .to_path_buf();

    let front_dir = ffi_dir.join("front");
    let mut sources: Vec<PathBuf> = fs::read_dir(&front_dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", front_dir.display()))
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|ext| ext == "c"))
        .collect();
    sources.sort();

    let built = out_dir.join(FRONT_NAME);
    let compiler = cc::Build::new().cargo_metadata(false).get_compiler();
    let mut cmd = compiler.to_command();
    cmd.args([
        "-shared",
        "-fPIC",
        "-O2",
        "-g",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-fvisibility=hidden",
        // The front defines the malloc family itself: never let the compiler turn code into
        // calls to them (e.g. malloc+memset into calloc).
        "-fno-builtin-malloc",
        "-fno-builtin-calloc",
        "-fno-builtin-realloc",
        "-fno-builtin-free",
        // Keep the front's malloc/free/... frame on the stack, as bionic's libc wrapper frame is
        // (the innermost frame of a captured backtrace), and make it walkable.
        "-fno-optimize-sibling-calls",
        "-fno-omit-frame-pointer",
        "-fasynchronous-unwind-tables",
        "-Wl,-soname,libmalloc_debug_front.so",
        "-Wl,-z,now",
        "-Wl,-z,noexecstack",
    ]);
    cmd.arg("-I").arg(ffi_dir.join("include"));
    cmd.arg("-I").arg(&front_dir);
    cmd.arg("-o").arg(&built);
    cmd.args(&sources);
    cmd.arg("-ldl");
    run(&mut cmd);

    install(&built, &dest_dir.join(FRONT_NAME));
}

fn run(cmd: &mut Command) {
    let output = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run the C compiler ({cmd:?}): {e}"));
    if !output.status.success() {
        panic!(
            "building the glibc front failed ({cmd:?}):\n{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

/// Copies to a temporary name and renames, so that a process loading the front never maps a
/// half-written file.
fn install(from: &Path, to: &Path) {
    let tmp = to.with_extension(format!("so.tmp{}", std::process::id()));
    fs::copy(from, &tmp)
        .unwrap_or_else(|e| panic!("cannot copy {} to {}: {e}", from.display(), tmp.display()));
    fs::rename(&tmp, to)
        .unwrap_or_else(|e| panic!("cannot rename {} to {}: {e}", tmp.display(), to.display()));
}
