//! Argument parsing and dispatch of the subcommands.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use lexopt::prelude::*;

use crate::{Result, device, diff, err, records, report, run};

pub const USAGE: &str = "\
usage: malloc-debug COMMAND ...

  run [--options OPTS] [--program NAME] [--lib LIB.so] [--front FRONT.so] -- CMD ARGS...
        run CMD under the glibc front (LD_PRELOAD); CMD's exit status is passed through.
        libc_malloc_debug.so and libmalloc_debug_front.so are looked for in
        $MALLOC_DEBUG_LIB_DIR, next to this program, then in its ../lib
      [--suppressions FILE] [--log-file FILE] [--error-exitcode N]
        leak checking (docs/tools.md): suppress leaks matching FILE's leak:PATTERN rules; send
        malloc debug's log to FILE (CMD's stdout and stderr stay its own); exit with N when an
        error or a leak was reported
  report DUMP [--symbols DIR] [--top N] [--html OUT.html] [--flamegraph OUT.svg]
              [--pprof OUT.pb.gz]
        symbolized report of a heap dump (v1.0, v1.1, v1.2)
  diff OLD NEW [--symbols DIR] [--top N]
        what grew between two heap dumps, by allocation site
  records FILE [--top N]
        summary of a record_allocs file
  device [-s SERIAL] SUBCOMMAND ...      (adb helpers; $ADB overrides the adb program)
        enable-program NAME --options OPTS [--no-restart]
        disable-program [--no-restart]
        enable-app PKG --options OPTS [--no-logwrapper]
        disable-app PKG
        dump PID --out FILE [--app] [--prefix DEVICE_PREFIX] [--wait SECONDS]
        push-lib LIB.so [--lib32]
";

pub fn main(args: Vec<OsString>) -> Result<ExitCode> {
    let mut args = args.into_iter();
    let Some(command) = args.next() else {
        eprint!("{USAGE}");
        return Ok(ExitCode::from(2));
    };
    let rest: Vec<OsString> = args.collect();
    match command.to_str() {
        Some("run") => run::main(parse_run(rest)?),
        Some("report") => report::main(parse_report(rest)?).map(|_| ExitCode::SUCCESS),
        Some("diff") => diff::main(parse_diff(rest)?).map(|_| ExitCode::SUCCESS),
        Some("records") => records::main(parse_records(rest)?).map(|_| ExitCode::SUCCESS),
        Some("device") => device::main(parse_device(rest)?).map(|_| ExitCode::SUCCESS),
        Some("-h" | "--help" | "help") => {
            print!("{USAGE}");
            Ok(ExitCode::SUCCESS)
        }
        _ => Err(err!(
            "unknown command {:?}\n{USAGE}",
            command.to_string_lossy()
        )),
    }
}

fn string(v: OsString) -> Result<String> {
    v.into_string()
        .map_err(|v| err!("argument is not UTF-8: {:?}", v.to_string_lossy()))
}

fn number(v: OsString, what: &str) -> Result<usize> {
    let s = string(v)?;
    s.parse()
        .map_err(|_| err!("{what}: expected a number, got {s:?}"))
}

pub struct RunArgs {
    pub options: Option<String>,
    pub program: Option<String>,
    pub lib: Option<PathBuf>,
    pub front: Option<PathBuf>,
    pub command: Vec<OsString>,
    /// Leak checking (run_gate.rs).
    pub suppressions: Option<PathBuf>,
    pub log_file: Option<PathBuf>,
    pub error_exitcode: Option<u8>,
}

fn parse_run(args: Vec<OsString>) -> Result<RunArgs> {
    let mut p = lexopt::Parser::from_args(args);
    let mut out = RunArgs {
        options: None,
        program: None,
        lib: None,
        front: None,
        command: Vec::new(),
        suppressions: None,
        log_file: None,
        error_exitcode: None,
    };
    while let Some(arg) = p.next()? {
        match arg {
            Long("options") => out.options = Some(string(p.value()?)?),
            Long("program") => out.program = Some(string(p.value()?)?),
            Long("lib") => out.lib = Some(p.value()?.into()),
            Long("front") => out.front = Some(p.value()?.into()),
            Long("suppressions") => out.suppressions = Some(p.value()?.into()),
            Long("log-file") => out.log_file = Some(p.value()?.into()),
            Long("error-exitcode") => {
                let n = number(p.value()?, "--error-exitcode")?;
                out.error_exitcode = Some(
                    u8::try_from(n)
                        .ok()
                        .filter(|&n| n > 0)
                        .ok_or_else(|| err!("--error-exitcode: expected 1 to 255, got {n}"))?,
                );
            }
            Value(v) => {
                // `run CMD` without `--` is accepted too; everything from CMD on is CMD's.
                out.command.push(v);
                out.command.extend(p.raw_args()?);
            }
            _ => return Err(arg.unexpected().into()),
        }
    }
    if out.command.is_empty() {
        return Err(err!(
            "run: no command given (usage: malloc-debug run [--options OPTS] -- CMD ARGS...)"
        ));
    }
    Ok(out)
}

pub struct ReportArgs {
    pub dump: PathBuf,
    pub symbols: Option<PathBuf>,
    pub top: usize,
    pub html: Option<PathBuf>,
    pub flamegraph: Option<PathBuf>,
    pub pprof: Option<PathBuf>,
}

fn parse_report(args: Vec<OsString>) -> Result<ReportArgs> {
    let mut p = lexopt::Parser::from_args(args);
    let mut dump = None;
    let mut out = ReportArgs {
        dump: PathBuf::new(),
        symbols: None,
        top: 10,
        html: None,
        flamegraph: None,
        pprof: None,
    };
    while let Some(arg) = p.next()? {
        match arg {
            Long("symbols") => out.symbols = Some(p.value()?.into()),
            Long("top") => out.top = number(p.value()?, "--top")?,
            Long("html") => out.html = Some(p.value()?.into()),
            Long("flamegraph") => out.flamegraph = Some(p.value()?.into()),
            Long("pprof") => out.pprof = Some(p.value()?.into()),
            Value(v) if dump.is_none() => dump = Some(PathBuf::from(v)),
            _ => return Err(arg.unexpected().into()),
        }
    }
    out.dump = dump.ok_or_else(|| err!("report: no DUMP file given"))?;
    Ok(out)
}

pub struct DiffArgs {
    pub old: PathBuf,
    pub new: PathBuf,
    pub symbols: Option<PathBuf>,
    pub top: usize,
}

fn parse_diff(args: Vec<OsString>) -> Result<DiffArgs> {
    let mut p = lexopt::Parser::from_args(args);
    let mut files = Vec::new();
    let mut symbols = None;
    let mut top = 20;
    while let Some(arg) = p.next()? {
        match arg {
            Long("symbols") => symbols = Some(p.value()?.into()),
            Long("top") => top = number(p.value()?, "--top")?,
            Value(v) if files.len() < 2 => files.push(PathBuf::from(v)),
            _ => return Err(arg.unexpected().into()),
        }
    }
    let [old, new]: [PathBuf; 2] = files
        .try_into()
        .map_err(|_| err!("diff: expected two dump files: OLD NEW"))?;
    Ok(DiffArgs {
        old,
        new,
        symbols,
        top,
    })
}

pub struct RecordsArgs {
    pub file: PathBuf,
    pub top: usize,
}

fn parse_records(args: Vec<OsString>) -> Result<RecordsArgs> {
    let mut p = lexopt::Parser::from_args(args);
    let mut file = None;
    let mut top = 10;
    while let Some(arg) = p.next()? {
        match arg {
            Long("top") => top = number(p.value()?, "--top")?,
            Value(v) if file.is_none() => file = Some(PathBuf::from(v)),
            _ => return Err(arg.unexpected().into()),
        }
    }
    Ok(RecordsArgs {
        file: file.ok_or_else(|| err!("records: no FILE given"))?,
        top,
    })
}

pub enum DeviceCommand {
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

pub struct DeviceArgs {
    pub serial: Option<String>,
    pub command: DeviceCommand,
}

fn parse_device(args: Vec<OsString>) -> Result<DeviceArgs> {
    let mut p = lexopt::Parser::from_args(args);
    let mut serial = None;
    let mut positional: Vec<String> = Vec::new();
    let mut options = None;
    let mut restart = true;
    let mut logwrapper = true;
    let mut out = None;
    let mut app = false;
    let mut prefix = "/data/local/tmp/backtrace_heap".to_string();
    let mut lib32 = false;
    let mut wait = 30;
    while let Some(arg) = p.next()? {
        match arg {
            Short('s') | Long("serial") => serial = Some(string(p.value()?)?),
            Long("options") => options = Some(string(p.value()?)?),
            Long("no-restart") => restart = false,
            Long("no-logwrapper") => logwrapper = false,
            Long("out") => out = Some(PathBuf::from(p.value()?)),
            Long("app") => app = true,
            Long("prefix") => prefix = string(p.value()?)?,
            Long("lib32") => lib32 = true,
            Long("wait") => {
                wait = u32::try_from(number(p.value()?, "--wait")?)
                    .map_err(|_| err!("--wait: too many seconds"))?
            }
            Value(v) => positional.push(string(v)?),
            _ => return Err(arg.unexpected().into()),
        }
    }
    let mut positional = positional.into_iter();
    let sub = positional
        .next()
        .ok_or_else(|| err!("device: no subcommand given\n{USAGE}"))?;
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
            options: need_options(options)?,
            restart,
        },
        "disable-program" => DeviceCommand::DisableProgram { restart },
        "enable-app" => DeviceCommand::EnableApp {
            package: operand("package name")?,
            options: need_options(options)?,
            logwrapper,
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
                out: out.ok_or_else(|| err!("device dump: --out FILE is required"))?,
                app,
                prefix,
                wait,
            }
        }
        "push-lib" => DeviceCommand::PushLib {
            lib: PathBuf::from(operand("LIB.so")?),
            lib32,
        },
        other => return Err(err!("device: unknown subcommand {other:?}\n{USAGE}")),
    };
    if let Some(extra) = positional.next() {
        return Err(err!("device {sub}: unexpected argument {extra:?}"));
    }
    Ok(DeviceArgs { serial, command })
}
