//! `malloc-debug device ...` against a fake `adb` first on PATH that records the exact argv it
//! receives (one line per call, arguments separated by `|`), answers `shell grep -qx END FILE`
//! (is the dump complete?) by the presence of a marker file, and makes `pull` write a file.

mod common;
use common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;

const FAKE_ADB: &str = r#"#!/bin/sh
log="$FAKE_ADB_DIR/argv.log"
line=""
for a in "$@"; do line="$line|$a"; done
printf '%s\n' "${line#|}" >> "$log"
case "$*" in
  "shell test -e /apex/"*) [ -e "$FAKE_ADB_DIR/apex" ] || exit 1 ;;
  "shell grep -qx END "*|"-s "*" shell grep -qx END "*) [ -e "$FAKE_ADB_DIR/dump-ready" ] || exit 1 ;;
esac
if [ "$1" = pull ]; then printf 'pulled %s\n' "$2" > "$3"; fi
if [ "$1" = "-s" ] && [ "$3" = pull ]; then printf 'pulled %s\n' "$4" > "$5"; fi
exit 0
"#;

struct Fake {
    dir: PathBuf,
}

impl Fake {
    fn new(name: &str) -> Fake {
        let dir = tmp_dir(&format!("adb-{name}"));
        let adb = dir.join("adb");
        std::fs::write(&adb, FAKE_ADB).unwrap();
        std::fs::set_permissions(&adb, std::fs::Permissions::from_mode(0o755)).unwrap();
        Fake { dir }
    }

    fn run(&self, args: &[&str]) -> Output {
        let path = format!(
            "{}:{}",
            self.dir.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        cli()
            .arg("device")
            .args(args)
            .env("PATH", path)
            .env_remove("ADB")
            .env("FAKE_ADB_DIR", &self.dir)
            .output()
            .unwrap()
    }

    fn calls(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.join("argv.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

#[test]
fn enable_and_disable_a_native_program() {
    let adb = Fake::new("program");
    ok(adb.run(&[
        "enable-program",
        "surfaceflinger",
        "--options",
        "backtrace leak_track",
    ]));
    assert_eq!(
        adb.calls(),
        [
            "shell|setprop|libc.debug.malloc.program|surfaceflinger",
            "shell|setprop|libc.debug.malloc.options|'backtrace leak_track'",
            "shell|stop",
            "shell|start",
        ]
    );
    let adb = Fake::new("program-off");
    ok(adb.run(&["-s", "emulator-5554", "disable-program", "--no-restart"]));
    assert_eq!(
        adb.calls(),
        [
            "-s|emulator-5554|shell|setprop|libc.debug.malloc.options|''",
            "-s|emulator-5554|shell|setprop|libc.debug.malloc.program|''",
        ]
    );
}

#[test]
fn enable_an_app_through_its_wrap_property_quoted_twice() {
    let adb = Fake::new("app");
    ok(adb.run(&[
        "enable-app",
        "com.example.app",
        "--options",
        "backtrace=8 leak_track",
    ]));
    // The device shell turns the third word back into
    //   LIBC_DEBUG_MALLOC_OPTIONS='backtrace=8 leak_track' logwrapper
    // which the zygote's `sh -c` then splits into the assignment and logwrapper.
    assert_eq!(
        adb.calls(),
        [
            r"shell|setprop|wrap.com.example.app|'LIBC_DEBUG_MALLOC_OPTIONS='\''backtrace=8 leak_track'\'' logwrapper'",
            "shell|am|force-stop|com.example.app",
        ]
    );
    // Check the quoting with a real shell: one round of sh gives the property value, a second
    // gives the environment the app sees.
    let value = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "printf %s {}",
            adb.calls()[0].split('|').nth(3).unwrap()
        ))
        .output()
        .unwrap();
    let value = String::from_utf8(value.stdout).unwrap();
    assert_eq!(
        value,
        "LIBC_DEBUG_MALLOC_OPTIONS='backtrace=8 leak_track' logwrapper"
    );
    let env = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "{} sh -c 'printf %s \"$LIBC_DEBUG_MALLOC_OPTIONS\"'",
            value.replace(" logwrapper", " env")
        ))
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8(env.stdout).unwrap(),
        "backtrace=8 leak_track"
    );

    let adb = Fake::new("app-off");
    ok(adb.run(&["disable-app", "com.example.app"]));
    assert_eq!(
        adb.calls(),
        [
            "shell|setprop|wrap.com.example.app|''",
            "shell|am|force-stop|com.example.app"
        ]
    );
    let adb = Fake::new("app-nolog");
    ok(adb.run(&[
        "enable-app",
        "com.example.app",
        "--options",
        "backtrace",
        "--no-logwrapper",
    ]));
    assert_eq!(
        adb.calls()[0],
        "shell|setprop|wrap.com.example.app|LIBC_DEBUG_MALLOC_OPTIONS=backtrace"
    );
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

#[test]
fn dump_a_native_process_with_signal_47() {
    let adb = Fake::new("dump");
    std::fs::write(adb.path("dump-ready"), "").unwrap();
    let out = adb.path("heap.txt");
    ok(adb.run(&["dump", "1234", "--out", out.to_str().unwrap()]));
    assert_eq!(
        adb.calls(),
        [
            "shell|kill|-47|1234".to_string(),
            "shell|grep|-qx|END|/data/local/tmp/backtrace_heap.1234.txt".to_string(),
            format!(
                "pull|/data/local/tmp/backtrace_heap.1234.txt|{}",
                out.display()
            ),
        ]
    );
    assert_eq!(
        read(&out),
        "pulled /data/local/tmp/backtrace_heap.1234.txt\n"
    );
}

#[test]
fn dump_an_app_with_am_dumpheap() {
    let adb = Fake::new("dump-app");
    std::fs::write(adb.path("dump-ready"), "").unwrap();
    let out = adb.path("app.txt");
    ok(adb.run(&[
        "-s",
        "R58M",
        "dump",
        "4321",
        "--app",
        "--out",
        out.to_str().unwrap(),
    ]));
    assert_eq!(
        adb.calls(),
        [
            "-s|R58M|shell|am|dumpheap|-n|4321|/data/local/tmp/malloc-debug-heap.4321.txt"
                .to_string(),
            "-s|R58M|shell|grep|-qx|END|/data/local/tmp/malloc-debug-heap.4321.txt".to_string(),
            format!(
                "-s|R58M|pull|/data/local/tmp/malloc-debug-heap.4321.txt|{}",
                out.display()
            ),
            "-s|R58M|shell|rm|-f|/data/local/tmp/malloc-debug-heap.4321.txt".to_string(),
        ]
    );
    assert_eq!(
        read(&out),
        "pulled /data/local/tmp/malloc-debug-heap.4321.txt\n"
    );
}

#[test]
fn push_the_library_to_a_userdebug_device() {
    // Android 10+: over the runtime APEX's copy.
    let adb = Fake::new("push");
    std::fs::write(adb.path("apex"), "").unwrap();
    let lib = adb.path("libc_malloc_debug.so");
    std::fs::write(&lib, "ELF").unwrap();
    ok(adb.run(&["push-lib", lib.to_str().unwrap()]));
    let apex = "/apex/com.android.runtime/lib64/bionic/libc_malloc_debug.so";
    let staged = "/data/local/tmp/lib64-libc_malloc_debug.so";
    let expected = |target: &str, staged: &str, probe: &str| {
        vec![
            "root".to_string(),
            "wait-for-device".to_string(),
            format!("shell|test|-e|{probe}"),
            format!("push|{}|{staged}", lib.display()),
            format!("shell|chmod|644|{staged}"),
            format!("shell|chcon|u:object_r:system_lib_file:s0|{staged}"),
            format!("shell|umount|{target}"),
            format!("shell|mount|-o|bind|{staged}|{target}"),
        ]
    };
    assert_eq!(adb.calls(), expected(apex, staged, apex));

    // Android 9 and earlier (no APEX), 32-bit: over /system/lib's copy.
    let adb = Fake::new("push-p");
    ok(adb.run(&["push-lib", "--lib32", lib.to_str().unwrap()]));
    assert_eq!(
        adb.calls(),
        expected(
            "/system/lib/libc_malloc_debug.so",
            "/data/local/tmp/lib-libc_malloc_debug.so",
            "/apex/com.android.runtime/lib/bionic/libc_malloc_debug.so"
        )
    );

    let out = adb.run(&["push-lib", "/nonexistent.so"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        "malloc-debug: /nonexistent.so: no such file\n"
    );
}

#[test]
fn usage_errors() {
    let adb = Fake::new("usage");
    let out = adb.run(&["enable-program", "foo"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        "malloc-debug: device enable-program: --options OPTS is required\n"
    );
    let out = adb.run(&["dump", "abc", "--out", "x"]);
    assert_eq!(
        stderr(&out),
        "malloc-debug: device dump: expected a PID, got \"abc\"\n"
    );
    let out = adb.run(&["frobnicate"]);
    assert!(stderr(&out).starts_with("malloc-debug: device: unknown subcommand \"frobnicate\""));
    assert!(adb.calls().is_empty());
}

/// An `adb` whose "device" is this host: `shell` joins its arguments with spaces and runs the line
/// with sh (exactly what adbd does), `pull` copies. Logs argv like the fake above.
const HOST_ADB: &str = r#"#!/bin/sh
line=""
for a in "$@"; do line="$line|$a"; done
printf '%s\n' "${line#|}" >> "$FAKE_ADB_DIR/argv.log"
case "$1" in
  shell) shift; exec sh -c "$*" ;;
  pull) exec cp "$2" "$3" ;;
esac
exit 1
"#;

/// The whole native-process path on a real process: `device dump` sends signal 47 to a program
/// running under the front, waits for the library to write its dump, pulls it, and the pulled
/// dump reports the program's allocation site.
#[test]
fn dump_a_real_process_through_a_host_backed_adb() {
    use std::io::BufRead;
    let adb = Fake::new("host");
    std::fs::write(adb.path("adb"), HOST_ADB).unwrap();
    let idle = compile("idle");
    // Option values cannot hold spaces, but the device shell must still get `$` and `'` quoted.
    let prefix = adb.path("heap$HOME'x");
    let mut child = cli()
        .arg("run")
        .arg("--options")
        .arg(format!(
            "backtrace backtrace_dump_prefix={}",
            prefix.display()
        ))
        // Exec'd rather than run as a child with its log piped: the pid is the program's.
        .arg("--no-symbolize")
        .arg("--")
        .arg(&idle)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // With --no-symbolize `run` execs the program: the child's pid is the program's.
    let pid = child.id().to_string();
    let mut ready = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut ready)
        .unwrap();
    assert_eq!(ready, "ready\n");

    let out = adb.path("pulled.txt");
    let result = adb.run(&[
        "dump",
        &pid,
        "--out",
        out.to_str().unwrap(),
        "--prefix",
        prefix.to_str().unwrap(),
    ]);
    let _ = child.kill();
    let _ = child.wait();
    ok(result);
    let remote = format!("{}.{pid}.txt", prefix.display());
    let calls = adb.calls();
    assert_eq!(calls[0], format!("shell|kill|-47|{pid}"));
    let quoted = format!("'{}'", remote.replace('\'', r"'\''"));
    assert_eq!(calls[1], format!("shell|grep|-qx|END|{quoted}"));
    assert_eq!(
        calls.last().unwrap(),
        &format!("pull|{remote}|{}", out.display())
    );

    let text = ok(cli().arg("report").arg(&out).output().unwrap());
    let site = text
        .lines()
        .skip_while(|l| !l.contains("SITE"))
        .nth(1)
        .unwrap_or_default();
    assert!(
        site.contains("5000") && site.contains("cache_fill (idle.c:12)"),
        "{text}"
    );
}

/// No complete dump on the device: an error saying what to check, after `--wait` seconds of
/// polling (once a second); for an app the remote file is removed all the same.
#[test]
fn no_dump_appears() {
    let adb = Fake::new("no-dump");
    let out = adb.path("none.txt");
    let o = adb.run(&["dump", "99", "--out", out.to_str().unwrap(), "--wait", "1"]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        stderr(&o),
        "+ adb shell kill -47 99\nmalloc-debug: /data/local/tmp/backtrace_heap.99.txt did not \
         appear on the device: is process 99 running with a backtrace option, and has it \
         allocated since the signal?\n"
    );
    let poll = "shell|grep|-qx|END|/data/local/tmp/backtrace_heap.99.txt";
    assert_eq!(adb.calls(), ["shell|kill|-47|99", poll, poll]);
    assert!(!out.exists());

    let adb = Fake::new("no-dump-app");
    let o = adb.run(&[
        "dump",
        "98",
        "--app",
        "--out",
        out.to_str().unwrap(),
        "--wait",
        "0",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).ends_with(
            "malloc-debug: /data/local/tmp/malloc-debug-heap.98.txt holds no complete heap dump: \
             is app process 98 running with a backtrace option (malloc-debug device enable-app)?\n"
        ),
        "{}",
        stderr(&o)
    );
    let remote = "/data/local/tmp/malloc-debug-heap.98.txt";
    assert_eq!(
        adb.calls(),
        [
            format!("shell|am|dumpheap|-n|98|{remote}"),
            format!("shell|grep|-qx|END|{remote}"),
            format!("shell|rm|-f|{remote}"),
        ]
    );
    let o = adb.run(&["dump", "98", "--out", "x", "--wait", "soon"]);
    assert_eq!(
        stderr(&o),
        "malloc-debug: --wait: expected a number, got \"soon\"\n"
    );
}
