//! `malloc-debug device ...`: adb helpers. `adb shell` joins its arguments with spaces and hands
//! the line to the device's shell, so every argument that reaches the device shell is quoted
//! here; the app wrapper property is quoted twice (once for the shell that runs the wrapper,
//! once for `adb shell`). `$ADB` names the adb program (default `adb` on PATH).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use crate::args::{Flag, Spec, number, string};
use crate::{Error, Result, err};

enum DeviceCommand {
    EnableProgram {
        name: String,
        options: String,
        restart: bool,
    },
    DisableProgram {
        restart: bool,
    },
    EnableApp {
        package: String,
        options: String,
        logwrapper: bool,
    },
    DisableApp {
        package: String,
    },
    Dump {
        pid: u32,
        out: PathBuf,
        app: bool,
        prefix: String,
        /// Seconds to wait for the dump to be complete on the device.
        wait: u32,
    },
    PushLib {
        lib: PathBuf,
        lib32: bool,
    },
}

/// Every flag of every device subcommand; [`command`] checks which ones the subcommand needs.
#[derive(Default)]
pub struct Args {
    serial: Option<String>,
    operands: Vec<String>,
    options: Option<String>,
    no_restart: bool,
    no_logwrapper: bool,
    out: Option<PathBuf>,
    app: bool,
    prefix: Option<String>,
    lib32: bool,
    wait: Option<u32>,
}

pub const SPEC: Spec<Args> = Spec {
    command: "device",
    operands: "SUBCOMMAND ...",
    about: "adb helpers ($ADB overrides the adb program). Subcommands:\n\
            \x20 enable-program NAME --options OPTS [--no-restart]\n\
            \x20 disable-program [--no-restart]\n\
            \x20 enable-app PKG --options OPTS [--no-logwrapper]\n\
            \x20 disable-app PKG\n\
            \x20 dump PID --out FILE [--app] [--prefix DEVICE_PREFIX] [--wait SECONDS]\n\
            \x20 push-lib LIB.so [--lib32]",
    flags: &[
        Flag {
            name: "serial",
            short: Some('s'),
            value: Some("SERIAL"),
            help: "the device to use (adb -s)",
            set: |a, v| {
                a.serial = Some(string(v)?);
                Ok(())
            },
        },
        Flag {
            name: "options",
            short: None,
            value: Some("OPTS"),
            help: "enable-*: the malloc debug options",
            set: |a, v| {
                a.options = Some(string(v)?);
                Ok(())
            },
        },
        Flag {
            name: "no-restart",
            short: None,
            value: None,
            help: "*-program: do not restart the Android framework (stop; start)",
            set: |a, _| {
                a.no_restart = true;
                Ok(())
            },
        },
        Flag {
            name: "no-logwrapper",
            short: None,
            value: None,
            help: "enable-app: do not send the app's stdout/stderr to logcat",
            set: |a, _| {
                a.no_logwrapper = true;
                Ok(())
            },
        },
        Flag {
            name: "out",
            short: None,
            value: Some("FILE"),
            help: "dump: where to put the pulled heap dump",
            set: |a, v| {
                a.out = Some(v.into());
                Ok(())
            },
        },
        Flag {
            name: "app",
            short: None,
            value: None,
            help: "dump: PID is an app (am dumpheap -n) rather than a native process (kill -47)",
            set: |a, _| {
                a.app = true;
                Ok(())
            },
        },
        Flag {
            name: "prefix",
            short: None,
            value: Some("DEVICE_PREFIX"),
            help: "dump: the process's backtrace_dump_prefix\n\
                   (default /data/local/tmp/backtrace_heap)",
            set: |a, v| {
                a.prefix = Some(string(v)?);
                Ok(())
            },
        },
        Flag {
            name: "wait",
            short: None,
            value: Some("SECONDS"),
            help: "dump: how long to wait for the dump to be complete (default 30)",
            set: |a, v| {
                let n = number(v, "--wait")?;
                a.wait = Some(u32::try_from(n).map_err(|_| err!("--wait: too many seconds"))?);
                Ok(())
            },
        },
        Flag {
            name: "lib32",
            short: None,
            value: None,
            help: "push-lib: LIB.so is the 32-bit library",
            set: |a, _| {
                a.lib32 = true;
                Ok(())
            },
        },
    ],
    operand: |a: &mut Args, v: OsString, _| {
        a.operands.push(string(v)?);
        Ok(())
    },
};

/// The subcommand the operands name, with the flags it needs.
fn command(args: Args) -> Result<DeviceCommand> {
    let mut positional = args.operands.into_iter();
    let sub = positional
        .next()
        .ok_or_else(|| err!("device: no subcommand given (see malloc-debug device --help)"))?;
    let mut operand = |what: &str| {
        positional
            .next()
            .ok_or_else(|| err!("device {sub}: missing {what}"))
    };
    let need_options = |options: Option<String>| {
        options.ok_or_else(|| err!("device {sub}: --options OPTS is required"))
    };
    let command = match sub.as_str() {
        "enable-program" => DeviceCommand::EnableProgram {
            name: operand("program NAME")?,
            options: need_options(args.options)?,
            restart: !args.no_restart,
        },
        "disable-program" => DeviceCommand::DisableProgram {
            restart: !args.no_restart,
        },
        "enable-app" => DeviceCommand::EnableApp {
            package: operand("package name")?,
            options: need_options(args.options)?,
            logwrapper: !args.no_logwrapper,
        },
        "disable-app" => DeviceCommand::DisableApp {
            package: operand("package name")?,
        },
        "dump" => {
            let pid = operand("PID")?;
            DeviceCommand::Dump {
                pid: pid
                    .parse()
                    .map_err(|_| err!("device dump: expected a PID, got {pid:?}"))?,
                out: args
                    .out
                    .ok_or_else(|| err!("device dump: --out FILE is required"))?,
                app: args.app,
                prefix: args
                    .prefix
                    .unwrap_or_else(|| "/data/local/tmp/backtrace_heap".to_string()),
                wait: args.wait.unwrap_or(30),
            }
        }
        "push-lib" => DeviceCommand::PushLib {
            lib: PathBuf::from(operand("LIB.so")?),
            lib32: args.lib32,
        },
        other => {
            return Err(err!(
                "device: unknown subcommand {other:?} (see malloc-debug device --help)"
            ));
        }
    };
    if let Some(extra) = positional.next() {
        return Err(err!("device {sub}: unexpected argument {extra:?}"));
    }
    Ok(command)
}

/// Quotes a word for a POSIX shell (the device's mksh/toybox sh): bare when it is safe,
/// otherwise in single quotes with embedded single quotes as `'\''`.
pub fn sh_quote(s: &str) -> String {
    let safe = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "@%+=:,./_-".contains(c));
    if safe {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

struct Adb {
    program: String,
    serial: Option<String>,
}

impl Adb {
    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.program);
        if let Some(s) = &self.serial {
            c.args(["-s", s]);
        }
        c.args(args);
        c
    }

    fn describe(&self, args: &[&str]) -> String {
        let mut words = vec![self.program.clone()];
        if let Some(s) = &self.serial {
            words.extend(["-s".to_string(), s.clone()]);
        }
        words.extend(args.iter().map(|a| sh_quote(a)));
        words.join(" ")
    }

    /// Runs adb with these arguments, echoing the command line; fails on a non-zero status.
    fn run(&self, args: &[&str]) -> Result<()> {
        eprintln!("+ {}", self.describe(args));
        let status = self
            .command(args)
            .status()
            .map_err(|e| err!("cannot run {}: {e}", self.program))?;
        if status.success() {
            Ok(())
        } else {
            Err(err!("`{}` failed ({status})", self.describe(args)))
        }
    }

    /// `adb shell` with each word quoted for the device shell.
    fn shell(&self, words: &[&str]) -> Result<()> {
        let quoted: Vec<String> = words.iter().map(|w| sh_quote(w)).collect();
        let mut args = vec!["shell"];
        args.extend(quoted.iter().map(String::as_str));
        self.run(&args)
    }

    /// Like `shell`, but only reports whether the command succeeded (output discarded).
    fn shell_ok(&self, words: &[&str]) -> bool {
        let quoted: Vec<String> = words.iter().map(|w| sh_quote(w)).collect();
        let mut args = vec!["shell"];
        args.extend(quoted.iter().map(String::as_str));
        self.command(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }
}

/// bionic's PROP_VALUE_MAX is 92 bytes with the NUL; older releases refuse longer values.
const PROP_VALUE_MAX: usize = 92;

/// The value of `wrap.<package>`: the zygote runs `/system/bin/sh -c "<value> <app_process...>"`,
/// so the options are one shell word inside it.
pub fn wrap_value(options: &str, logwrapper: bool) -> String {
    let mut v = format!("LIBC_DEBUG_MALLOC_OPTIONS={}", sh_quote(options));
    if logwrapper {
        v.push_str(" logwrapper");
    }
    v
}

pub fn main(args: Vec<OsString>) -> Result<ExitCode> {
    let Some(mut args) = SPEC.parse(args)? else {
        return Ok(ExitCode::SUCCESS);
    };
    let adb = Adb {
        program: std::env::var("ADB").unwrap_or_else(|_| "adb".to_string()),
        serial: args.serial.take(),
    };
    run(&adb, command(args)?)?;
    Ok(ExitCode::SUCCESS)
}

fn run(adb: &Adb, command: DeviceCommand) -> Result<()> {
    match command {
        DeviceCommand::EnableProgram {
            name,
            options,
            restart,
        } => {
            adb.shell(&["setprop", "libc.debug.malloc.program", &name])?;
            adb.shell(&["setprop", "libc.debug.malloc.options", &options])?;
            if restart {
                adb.shell(&["stop"])?;
                adb.shell(&["start"])?;
            }
            Ok(())
        }
        DeviceCommand::DisableProgram { restart } => {
            adb.shell(&["setprop", "libc.debug.malloc.options", ""])?;
            adb.shell(&["setprop", "libc.debug.malloc.program", ""])?;
            if restart {
                adb.shell(&["stop"])?;
                adb.shell(&["start"])?;
            }
            Ok(())
        }
        DeviceCommand::EnableApp {
            package,
            options,
            logwrapper,
        } => {
            let value = wrap_value(&options, logwrapper);
            if value.len() >= PROP_VALUE_MAX {
                eprintln!(
                    "malloc-debug: warning: wrap.{package} value is {} bytes; Android releases \
                     before 8 refuse values over {} bytes",
                    value.len(),
                    PROP_VALUE_MAX - 1
                );
            }
            adb.shell(&["setprop", &format!("wrap.{package}"), &value])?;
            adb.shell(&["am", "force-stop", &package])?;
            eprintln!("malloc-debug: restart {package} to run it under malloc debug");
            Ok(())
        }
        DeviceCommand::DisableApp { package } => {
            adb.shell(&["setprop", &format!("wrap.{package}"), ""])?;
            adb.shell(&["am", "force-stop", &package])
        }
        DeviceCommand::Dump {
            pid,
            out,
            app,
            prefix,
            wait,
        } => dump(adb, pid, &out, app, &prefix, wait),
        DeviceCommand::PushLib { lib, lib32 } => push_lib(adb, &lib, lib32),
    }
}

/// Waits until `remote` holds a whole dump (its `END` line: bionic writes the file in place, so
/// a non-empty file may still be growing), then pulls it.
/// Polls once a second, `wait` + 1 times.
fn wait_and_pull(adb: &Adb, remote: &str, out: &str, wait: u32) -> Result<bool> {
    for i in 0..=wait {
        if adb.shell_ok(&["grep", "-qx", "END", remote]) {
            adb.run(&["pull", remote, out])?;
            return Ok(true);
        }
        if i < wait {
            std::thread::sleep(std::time::Duration::from_secs(1));
        }
    }
    Ok(false)
}

fn dump(adb: &Adb, pid: u32, out: &Path, app: bool, prefix: &str, wait: u32) -> Result<()> {
    let pid = pid.to_string();
    let out_str = out.to_string_lossy();
    if app {
        // ActivityThread writes it through debug_write_malloc_leak_info
        // (docs/spec/abi.md#how-libc-loads-the-library); older
        // releases return from `am dumpheap` before the app has finished writing.
        let remote = format!("/data/local/tmp/malloc-debug-heap.{pid}.txt");
        adb.shell(&["am", "dumpheap", "-n", &pid, &remote])?;
        let pulled = wait_and_pull(adb, &remote, &out_str, wait)?;
        adb.shell(&["rm", "-f", &remote])?;
        if !pulled {
            return Err(err!(
                "{remote} holds no complete heap dump: is app process {pid} running with a \
                 backtrace option (malloc-debug device enable-app)?"
            ));
        }
        eprintln!("malloc-debug: heap dump of {pid} written to {out_str}");
        return Ok(());
    }
    // Native processes: SIGRTMAX-17 sets a flag; the dump is written at the next malloc/free.
    let remote = format!("{prefix}.{pid}.txt");
    adb.shell(&["kill", "-47", &pid])?;
    if wait_and_pull(adb, &remote, &out_str, wait)? {
        eprintln!("malloc-debug: heap dump of {pid} written to {out_str}");
        return Ok(());
    }
    Err(Error(format!(
        "{remote} did not appear on the device: is process {pid} running with a backtrace \
         option, and has it allocated since the signal?"
    )))
}

/// For testing on a userdebug device: bind-mounts the library over the system's copy (the
/// runtime APEX's, or /system's before Android 10) until reboot; no remount of /system needed.
fn push_lib(adb: &Adb, lib: &Path, lib32: bool) -> Result<()> {
    if !lib.is_file() {
        return Err(err!("{}: no such file", lib.display()));
    }
    let dir = if lib32 { "lib" } else { "lib64" };
    let staged = format!("/data/local/tmp/{dir}-libc_malloc_debug.so");
    adb.run(&["root"])?;
    adb.run(&["wait-for-device"])?;
    // Android 10 and later load it from the runtime APEX, earlier releases from /system.
    let apex = format!("/apex/com.android.runtime/{dir}/bionic/libc_malloc_debug.so");
    let target = if adb.shell_ok(&["test", "-e", &apex]) {
        apex
    } else {
        format!("/system/{dir}/libc_malloc_debug.so")
    };
    adb.run(&["push", &lib.to_string_lossy(), &staged])?;
    adb.shell(&["chmod", "644", &staged])?;
    adb.shell(&["chcon", "u:object_r:system_lib_file:s0", &staged])?;
    // A second push replaces an earlier bind mount rather than stacking on it.
    let _ = adb.shell_ok(&["umount", &target]);
    adb.shell(&["mount", "-o", "bind", &staged, &target])?;
    eprintln!(
        "malloc-debug: {target} now is {} (until reboot); restart the processes to test",
        lib.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(sh_quote("backtrace"), "backtrace");
        assert_eq!(sh_quote("backtrace leak_track"), "'backtrace leak_track'");
        assert_eq!(sh_quote(""), "''");
        assert_eq!(sh_quote("it's"), r"'it'\''s'");
        assert_eq!(
            wrap_value("backtrace leak_track", true),
            "LIBC_DEBUG_MALLOC_OPTIONS='backtrace leak_track' logwrapper"
        );
    }
}
