//! Link settings of `libc_malloc_debug.so`, and the glibc front (ffi/).

#[path = "ffi/build_front.rs"]
mod build_front;

use std::env;

/// What the `unwinding` crate defines with `#[no_mangle]` under the features we enable.
const UNWINDER_EXPORTS: &[&str] = &[
    "_Unwind_Backtrace",
    "_Unwind_DeleteException",
    "_Unwind_FindEnclosingFunction",
    "_Unwind_ForcedUnwind",
    "_Unwind_GetCFA",
    "_Unwind_GetDataRelBase",
    "_Unwind_GetGR",
    "_Unwind_GetIP",
    "_Unwind_GetIPInfo",
    "_Unwind_GetLanguageSpecificData",
    "_Unwind_GetRegionStart",
    "_Unwind_GetTextRelBase",
    "_Unwind_RaiseException",
    "_Unwind_Resume",
    "_Unwind_Resume_or_Rethrow",
    "_Unwind_SetGR",
    "_Unwind_SetIP",
];

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=CARGO_ENCODED_RUSTFLAGS");
    let target_os = env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();

    // Linked directly by lld (the Android build without an NDK) or through a C compiler driver.
    let flags = env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    let raw_lld = flags
        .split('\x1f')
        .any(|f| f.contains("linker-flavor=ld.lld"));
    let link_args: &[&str] = &[
        "-soname=libc_malloc_debug.so",
        // Static archives (the unwinder, compiler-builtins) must not leak their symbols: the
        // only exports are the debug_* entry points.
        "--exclude-libs=ALL",
        // 16 KiB pages (Android 15+ devices) need LOAD segments aligned to 16 KiB.
        "-zmax-page-size=16384",
        "-znow",
        "-znoexecstack",
    ];
    // rustc's own version script marks every `#[no_mangle]` item of the dependency graph global,
    // including the unwinder's `_Unwind_*` (LTO merges it into one object, so --exclude-libs
    // cannot see it). On Android, where lld links, a second script naming them `local` exactly
    // outranks that list (a wildcard would not), so the library exports its ABI and nothing
    // else. GNU ld, which links glibc targets other than x86_64's, refuses a second anonymous
    // script ("anonymous version tag cannot be combined with other version tags"). There the
    // library is only ever opened RTLD_LOCAL by the glibc front, so exported unwinder names
    // interpose nothing, and -Bsymbolic-functions binds the library's own calls to its own
    // unwinder rather than to a libgcc_s the process has loaded.
    let target = env::var("TARGET").unwrap_or_default();
    let glibc = target.contains("-linux-gnu");
    // 32-bit arm links no DWARF unwinder (it reads EHABI tables, src/backtrace/exidx.rs):
    // nothing to hide, and lld refuses a script naming symbols that are not defined.
    let no_unwinder = env::var("CARGO_CFG_TARGET_ARCH").is_ok_and(|a| a == "arm");
    let own_unwinder = if glibc {
        "-Bsymbolic-functions".to_string()
    } else if no_unwinder {
        String::new()
    } else {
        let out_dir = std::path::PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR"));
        let map = out_dir.join("hide-unwinder.map");
        let mut script = String::from("{\n  local:\n");
        for name in UNWINDER_EXPORTS {
            script.push_str(&format!("    {name};\n"));
        }
        script.push_str("};\n");
        std::fs::write(&map, script).expect("write hide-unwinder.map");
        format!("--version-script={}", map.display())
    };
    let link_args: Vec<&str> = link_args
        .iter()
        .copied()
        .chain(
            [own_unwinder.as_str()]
                .into_iter()
                .filter(|a| !a.is_empty()),
        )
        .collect();
    for arg in &link_args {
        if raw_lld {
            println!("cargo:rustc-cdylib-link-arg={arg}");
        } else {
            println!(
                "cargo:rustc-cdylib-link-arg=-Wl,{}",
                arg.replacen("-z", "-z,", 1)
            );
        }
    }
    // docs/spec/abi.md#linking: the libc crate may not emit -lc (its std feature), and Android 9
    // keeps dl_iterate_phdr/dlsym in libdl.so.
    println!("cargo:rustc-link-lib=dylib=c");
    println!("cargo:rustc-link-lib=dylib=dl");
    if target_os == "android" {
        println!("cargo:rustc-link-lib=dylib=log");
    }

    build_front::build();
}
