//! android/wrap.sh run by a host shell with stand-ins for the device's `logwrapper` (runs its
//! arguments) and `getprop` (prints $FAKE_PROP): the app command gets the options in its
//! environment and its arguments unchanged, and the property overrides the default options.

mod common;
use common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

fn tool(dir: &Path, name: &str, body: &str) {
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Runs wrap.sh as the zygote would (`wrap.sh CMD ARGS...`) with CMD printing what it got.
fn wrap(prop: &str) -> String {
    let dir = tmp_dir("wrap-sh");
    tool(&dir, "logwrapper", r#"printf 'logwrapper ' ; exec "$@""#);
    tool(
        &dir,
        "getprop",
        r#"[ "$1" = debug.malloc_debug.options ] && printf '%s\n' "$FAKE_PROP""#,
    );
    let script = workspace_root().join("android/wrap.sh");
    let out = std::process::Command::new("sh")
        .arg(&script)
        .args([
            "sh",
            "-c",
            r#"printf '[%s]' "$LIBC_DEBUG_MALLOC_OPTIONS" "$@""#,
            "app_process",
        ])
        .args(["/system/bin", "--application", "a b"])
        .env("PATH", format!("{}:/usr/bin:/bin", dir.display()))
        .env("FAKE_PROP", prop)
        .env_remove("LIBC_DEBUG_MALLOC_OPTIONS")
        .output()
        .unwrap();
    ok(out)
}

#[test]
fn wrap_sh_sets_the_options_and_passes_the_command_through() {
    assert_eq!(
        wrap(""),
        "logwrapper [backtrace leak_track][/system/bin][--application][a b]"
    );
    assert_eq!(
        wrap("backtrace=32 guard"),
        "logwrapper [backtrace=32 guard][/system/bin][--application][a b]"
    );
}
