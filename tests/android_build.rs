//! The Android builds (scripts/build-android: rust-lld against generated stub libraries, no NDK)
//! and the Soong module (Android.bp) kept in step with Cargo.toml.
//!
//! For each Android target the built `libc_malloc_debug.so` must: need exactly bionic's
//! `libc.so` and `libdl.so` (not liblog: the log sink writes logd's socket itself; nothing from glibc, no `GLIBC_*` versions), be named
//! `libc_malloc_debug.so`, export exactly the `debug_*` ABI (docs/spec/abi.md#exports, 64-bit, plus
//! Android 9's `debug_iterate` and Android 17's `debug_reallocarray`), import only what the stub
//! lists declare (bionic's names), and have every LOAD segment aligned for 16 KiB pages.
//!
//! When the Android rustup targets cannot be installed, scripts/build-android exits with 3 and
//! these checks are skipped with a loud warning (the Soong checks still run).

#[path = "common/skip_log.rs"]
mod skip_log;
use skip_log::note_skip;

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

const TARGETS: &[&str] = &[
    "x86_64-linux-android",
    "aarch64-linux-android",
    "i686-linux-android",
    "armv7-linux-androideabi",
];
const SKIPPED_STATUS: i32 = 3;

/// docs/spec/abi.md#exports, 64-bit version script, plus the Android 9 name and Android 17's
/// `debug_reallocarray` (docs/spec/android-versions.md#android-17-reallocarray: without it that
/// libc runs without malloc debug).
const EXPORTS_64: &[&str] = &[
    "debug_aligned_alloc",
    "debug_calloc",
    "debug_dump_heap",
    "debug_finalize",
    "debug_free",
    "debug_free_malloc_leak_info",
    "debug_get_malloc_leak_info",
    "debug_initialize",
    "debug_mallinfo",
    "debug_malloc",
    "debug_malloc_backtrace",
    "debug_malloc_disable",
    "debug_malloc_enable",
    "debug_malloc_info",
    "debug_malloc_iterate",
    "debug_malloc_usable_size",
    "debug_mallopt",
    "debug_memalign",
    "debug_posix_memalign",
    "debug_realloc",
    "debug_reallocarray",
    "debug_write_malloc_leak_info",
    "debug_iterate",
];
/// The 32-bit script adds the two ILP32-only entry points.
const EXPORTS_32_EXTRA: &[&str] = &["debug_pvalloc", "debug_valloc"];

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest_dir().join("target"))
}

/// Runs scripts/build-android once per test binary. `None`: the targets are unavailable.
fn android_libs() -> Option<&'static [(String, PathBuf)]> {
    static LIBS: OnceLock<Option<Vec<(String, PathBuf)>>> = OnceLock::new();
    LIBS.get_or_init(|| {
        let script = manifest_dir().join("scripts").join("build-android");
        let out = Command::new("bash")
            .arg(&script)
            .args(TARGETS)
            .current_dir(manifest_dir())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        if out.status.code() == Some(SKIPPED_STATUS) {
            eprintln!("{stderr}");
            eprintln!("########################################################################");
            eprintln!("WARNING: Android targets unavailable; Android checks SKIPPED");
            note_skip("tests/android_build.rs: Android rustup targets unavailable (scripts/build-android)");
            eprintln!("########################################################################");
            return None;
        }
        assert!(
            out.status.success(),
            "scripts/build-android failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
            out.status
        );
        Some(
            TARGETS
                .iter()
                .map(|t| {
                    let so = target_dir()
                        .join(t)
                        .join("release")
                        .join("libc_malloc_debug.so");
                    assert!(
                        so.is_file(),
                        "{} missing after scripts/build-android",
                        so.display()
                    );
                    (t.to_string(), so)
                })
                .collect(),
        )
    })
    .as_deref()
}

fn tool(program: &str, args: &[&str], file: &Path) -> String {
    let out = Command::new(program)
        .args(args)
        .arg(file)
        .env("LC_ALL", "C")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program} (binutils installed?): {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?} {} failed: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Values of `readelf -d` entries of one kind, e.g. "NEEDED" → the library names.
fn dynamic_entries(so: &Path, kind: &str) -> Vec<String> {
    let tag = format!("({kind})");
    tool("readelf", &["-dW"], so)
        .lines()
        .filter(|l| l.split_whitespace().nth(1) == Some(tag.as_str()))
        .filter_map(|l| {
            let start = l.find('[')?;
            let end = l.rfind(']')?;
            Some(l[start + 1..end].to_string())
        })
        .collect()
}

/// (symbol type letter, name) of `nm -D` lines with the given extra flag.
fn dynamic_symbols(so: &Path, flag: &str) -> Vec<(String, String)> {
    tool("nm", &["-D", flag], so)
        .lines()
        .filter_map(|l| {
            let fields: Vec<&str> = l.split_whitespace().collect();
            match fields.as_slice() {
                [kind, name] => Some((kind.to_string(), name.to_string())),
                [_, kind, name] => Some((kind.to_string(), name.to_string())),
                _ => None,
            }
        })
        // nm appends "@VERSION" / "@@VERSION" to versioned names.
        .map(|(k, n)| (k, n.split('@').next().unwrap_or_default().to_string()))
        .collect()
}

/// Every name in android/stubs/lib{c,dl,log}.txt.
fn stub_symbols() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for lib in ["libc", "libdl", "liblog"] {
        let path = manifest_dir()
            .join("android")
            .join("stubs")
            .join(format!("{lib}.txt"));
        let text = fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        for line in text.lines() {
            let line = line.split('#').next().unwrap_or_default().trim();
            match line.split_whitespace().next() {
                None | Some("[functions]") | Some("[data]") => {}
                Some(name) => {
                    names.insert(name.to_string());
                }
            }
        }
    }
    names
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

#[test]
fn needs_exactly_bionic_libraries() {
    let Some(libs) = android_libs() else { return };
    for (target, so) in libs {
        let needed: BTreeSet<String> = dynamic_entries(so, "NEEDED").into_iter().collect();
        assert_eq!(
            needed,
            set(&["libc.so", "libdl.so"]),
            "{target}: NEEDED of {}",
            so.display()
        );
        assert_eq!(
            dynamic_entries(so, "SONAME"),
            vec!["libc_malloc_debug.so".to_string()],
            "{target}: SONAME"
        );
        let versions = tool("readelf", &["-VW"], so);
        assert!(
            !versions.contains("GLIBC_") && !versions.contains("libc.so.6"),
            "{target}: glibc version references:\n{versions}"
        );
        let dynamic = tool("readelf", &["-dW"], so);
        assert!(
            !dynamic.contains("libc.so.6") && !dynamic.contains("ld-linux"),
            "{target}: glibc in the dynamic section:\n{dynamic}"
        );
    }
}

#[test]
fn exports_exactly_the_debug_abi() {
    let Some(libs) = android_libs() else { return };
    for (target, so) in libs {
        let exported: BTreeSet<String> = dynamic_symbols(so, "--defined-only")
            .into_iter()
            .map(|(_, name)| name)
            .collect();
        let mut expected = set(EXPORTS_64);
        if target.starts_with("i686") || target.starts_with("armv7") {
            expected.extend(set(EXPORTS_32_EXTRA));
        }
        let extra: Vec<_> = exported.difference(&expected).collect();
        let missing: Vec<_> = expected.difference(&exported).collect();
        assert!(
            extra.is_empty() && missing.is_empty(),
            "{target}: exports differ from docs/spec/abi.md#exports + debug_iterate + debug_reallocarray\n  unexpected: {extra:?}\n  \
             missing: {missing:?}"
        );
    }
}

#[test]
fn imports_only_what_the_stub_lists_declare() {
    let Some(libs) = android_libs() else { return };
    let declared = stub_symbols();
    for (target, so) in libs {
        // Weak references ('w', 'v') may stay unresolved; strong ones must exist in bionic.
        let undeclared: Vec<String> = dynamic_symbols(so, "--undefined-only")
            .into_iter()
            .filter(|(kind, _)| kind == "U")
            .map(|(_, name)| name)
            .filter(|name| !declared.contains(name))
            .collect();
        assert!(
            undeclared.is_empty(),
            "{target}: undefined symbols missing from android/stubs/*.txt (add them there, \
             after checking that bionic's libc/libdl/liblog export them): {undeclared:?}"
        );
    }
}

#[test]
fn load_segments_are_aligned_for_16k_pages() {
    let Some(libs) = android_libs() else { return };
    for (target, so) in libs {
        let headers = tool("readelf", &["-lW"], so);
        let loads: Vec<&str> = headers
            .lines()
            .filter(|l| l.trim_start().starts_with("LOAD"))
            .collect();
        assert!(!loads.is_empty(), "{target}: no LOAD segments?\n{headers}");
        for line in loads {
            let align = line.split_whitespace().last().unwrap_or_default();
            let value = u64::from_str_radix(align.trim_start_matches("0x"), 16)
                .unwrap_or_else(|_| panic!("{target}: cannot parse alignment in {line:?}"));
            assert!(
                value >= 0x4000,
                "{target}: LOAD aligned to {align} (< 0x4000): {line}"
            );
        }
    }
}

/// A bionic-built library must not depend on the host's dynamic loader either.
#[test]
fn has_no_interpreter_and_right_machine() {
    let Some(libs) = android_libs() else { return };
    for (target, so) in libs {
        let header = tool("readelf", &["-hW"], so);
        let want = if target.starts_with("x86_64") {
            "X86-64"
        } else if target.starts_with("i686") {
            "Intel 80386"
        } else if target.starts_with("armv7") {
            "Machine:                           ARM"
        } else {
            "AArch64"
        };
        assert!(header.contains(want), "{target}: wrong machine:\n{header}");
        assert!(
            header.contains("DYN"),
            "{target}: not a shared object:\n{header}"
        );
        let segments = tool("readelf", &["-lW"], so);
        assert!(
            !segments.contains("INTERP"),
            "{target}: has a PT_INTERP:\n{segments}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Android.bp ↔ Cargo.toml

/// Strips `//` and `/* */` comments from Blueprint text (strings never contain them here).
fn strip_bp_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix("//") {
            rest = after.find('\n').map_or("", |i| &after[i..]);
        } else if let Some(after) = rest.strip_prefix("/*") {
            rest = after.find("*/").map_or("", |i| &after[i + 2..]);
        } else {
            let c = rest.chars().next().unwrap_or_default();
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

/// The body (between the braces) of the first `module_type { ... }` whose name is `name`.
fn bp_module(text: &str, module_type: &str, name: &str) -> String {
    let mut search = 0;
    while let Some(pos) = text[search..].find(module_type) {
        let start = search + pos;
        let after = &text[start + module_type.len()..];
        let Some(open) = after.find('{') else { break };
        if !after[..open].trim().is_empty() {
            search = start + module_type.len();
            continue;
        }
        let body_start = start + module_type.len() + open + 1;
        let mut depth = 1;
        let mut end = body_start;
        for (i, c) in text[body_start..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = body_start + i;
                        break;
                    }
                }
                _ => {}
            }
        }
        let body = &text[body_start..end];
        if bp_string(body, "name").as_deref() == Some(name) {
            return body.to_string();
        }
        search = end;
    }
    panic!("Android.bp has no {module_type} named {name}");
}

/// `key: "value"` at any depth of `body` (first occurrence).
fn bp_string(body: &str, key: &str) -> Option<String> {
    let pattern = format!("{key}:");
    let mut search = 0;
    while let Some(pos) = body[search..].find(&pattern) {
        let at = search + pos;
        let boundary = at == 0 || !body[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_');
        let value = body[at + pattern.len()..].trim_start();
        if boundary && let Some(v) = value.strip_prefix('"') {
            return v.split('"').next().map(str::to_string);
        }
        search = at + pattern.len();
    }
    None
}

/// `key: ["a", "b"]` → the strings (first top-level occurrence of `key`).
fn bp_list(body: &str, key: &str) -> Option<Vec<String>> {
    let pattern = format!("{key}:");
    let mut search = 0;
    while let Some(pos) = body[search..].find(&pattern) {
        let at = search + pos;
        let boundary = at == 0 || !body[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_');
        let value = body[at + pattern.len()..].trim_start();
        if boundary && let Some(list) = value.strip_prefix('[') {
            let list = &list[..list.find(']')?];
            return Some(
                list.split(',')
                    .map(|s| s.trim().trim_matches('"').to_string())
                    .filter(|s| !s.is_empty())
                    .collect(),
            );
        }
        search = at + pattern.len();
    }
    None
}

/// A minimal reader of Cargo.toml: the keys of `[dependencies]` (including
/// `[dependencies.NAME]` tables) and the `[lib]` table's `name` and `path`.
struct CargoManifest {
    dependencies: BTreeSet<String>,
    /// `[target.'cfg(not(target_arch = "arm"))'.dependencies]`: every architecture but 32-bit
    /// arm.
    not_arm_dependencies: BTreeSet<String>,
    lib_name: Option<String>,
    lib_path: Option<String>,
}

fn read_cargo_toml() -> CargoManifest {
    let text = fs::read_to_string(manifest_dir().join("Cargo.toml")).expect("read Cargo.toml");
    let mut manifest = CargoManifest {
        dependencies: BTreeSet::new(),
        not_arm_dependencies: BTreeSet::new(),
        lib_name: None,
        lib_path: None,
    };
    let mut section = String::new();
    for raw in text.lines() {
        let line = raw.split('#').next().unwrap_or_default().trim();
        if line.is_empty() {
            continue;
        }
        if line.starts_with('[') {
            section = line
                .trim_matches(|c| c == '[' || c == ']')
                .trim()
                .to_string();
            if let Some(dep) = section.strip_prefix("dependencies.") {
                manifest
                    .dependencies
                    .insert(dep.trim_matches('"').to_string());
            }
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let key = key.trim().trim_matches('"');
        let value = value.trim().trim_matches('"').to_string();
        match section.as_str() {
            // `name = "1"`, `name = { ... }`, or dotted `name.workspace = true`.
            "dependencies" => {
                let name = key
                    .split('.')
                    .next()
                    .unwrap_or(key)
                    .trim()
                    .trim_matches('"');
                manifest.dependencies.insert(name.to_string());
            }
            "target.'cfg(not(target_arch = \"arm\"))'.dependencies" => {
                manifest
                    .not_arm_dependencies
                    .insert(key.split('.').next().unwrap_or(key).to_string());
            }
            "lib" if key == "name" => manifest.lib_name = Some(value),
            "lib" if key == "path" => manifest.lib_path = Some(value),
            _ => {}
        }
    }
    manifest
}

fn android_bp() -> String {
    let text = fs::read_to_string(manifest_dir().join("Android.bp")).expect("read Android.bp");
    bp_module(
        &strip_bp_comments(&text),
        "rust_ffi_shared",
        "libc_malloc_debug",
    )
}

#[test]
fn android_bp_matches_cargo_toml() {
    let manifest = read_cargo_toml();
    let module = android_bp();

    let lib_path = manifest
        .lib_path
        .clone()
        .unwrap_or_else(|| "src/lib.rs".to_string());
    assert_eq!(
        bp_list(&module, "srcs"),
        Some(vec![lib_path.clone()]),
        "Android.bp srcs must be the crate root of Cargo.toml ({lib_path})"
    );
    let crate_name = manifest.lib_name.clone().expect("Cargo.toml [lib] name");
    assert_eq!(
        bp_string(&module, "crate_name"),
        Some(crate_name),
        "crate_name"
    );

    // Soong names a crate's library module lib<crate name>, '-' becoming '_'.
    let want: BTreeSet<String> = manifest
        .dependencies
        .iter()
        .map(|d| format!("lib{}", d.replace('-', "_")))
        .collect();
    let have: BTreeSet<String> = bp_list(&module, "rustlibs")
        .unwrap_or_default()
        .into_iter()
        .collect();
    assert_eq!(
        have, want,
        "Android.bp rustlibs must be the Cargo.toml [dependencies] (as lib<name>)"
    );
    assert!(
        !manifest.not_arm_dependencies.is_empty(),
        "Cargo.toml's not-arm dependencies were not found"
    );
    for dep in &manifest.not_arm_dependencies {
        let lib = format!("lib{}", dep.replace('-', "_"));
        for arch in ["arm64", "x86", "x86_64"] {
            let entry = format!("{arch}: {{ rustlibs: [\"{lib}\"] }}");
            assert!(
                module.contains(&entry),
                "Android.bp's arch block lacks `{entry}` (Cargo.toml takes {dep} but on arm)"
            );
        }
        assert!(
            !module.contains(&format!("arm: {{ rustlibs: [\"{lib}\"")),
            "{lib} on arm"
        );
    }

    assert_eq!(
        bp_list(&module, "apex_available"),
        Some(vec!["com.android.runtime".to_string()]),
        "apex_available"
    );
    assert!(
        module.contains("never: true"),
        "sanitize: {{ never: true }} missing"
    );
    assert!(
        module.contains("max-page-size=16384"),
        "16 KiB page alignment flag missing"
    );
}

/// The exported names of a version script (its `global:` list) and the node name.
fn read_version_script(path: &Path) -> (String, BTreeSet<String>) {
    let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let text: String = text
        .lines()
        .map(|l| l.split('#').next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n");
    let open = text.find('{').expect("version node");
    let node = text[..open].trim().to_string();
    let body = &text[open + 1..];
    let global = body.find("global:").expect("global:") + "global:".len();
    let local = body.find("local:").expect("local:");
    let names = body[global..local]
        .split(';')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    assert!(
        body[local..].contains('*'),
        "{}: local: * missing",
        path.display()
    );
    (node, names)
}

#[test]
fn version_scripts_list_exactly_the_abi() {
    let module = android_bp();
    for (bits, extra) in [("64", &[][..]), ("32", EXPORTS_32_EXTRA)] {
        let rel = format!("android/exported{bits}.map");
        assert!(
            module.contains(&format!("\"{rel}\"")),
            "Android.bp does not reference {rel} (multilib.lib{bits}.version_script)"
        );
        let (node, names) = read_version_script(&manifest_dir().join(&rel));
        assert_eq!(node, "LIBC_MALLOC_DEBUG", "{rel}: version node");
        let mut want = set(EXPORTS_64);
        want.extend(set(extra));
        assert_eq!(names, want, "{rel}: exported names");
    }
}
