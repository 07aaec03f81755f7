//! The top level: which subcommand runs. Each subcommand module owns its arguments (its `SPEC`,
//! see `args`) and its `main`; this module only dispatches, and answers `--help`/`--version`.

use std::ffi::OsString;
use std::process::ExitCode;

use crate::{Result, device, diff, err, hostdump, logsym, records, report, run};

struct Command {
    name: &'static str,
    about: &'static str,
    main: fn(Vec<OsString>) -> Result<ExitCode>,
}

const COMMANDS: &[Command] = &[
    Command {
        name: "run",
        about: "run a program under malloc debug (glibc front), frames with file:line",
        main: run::main,
    },
    Command {
        name: "dump",
        about: "make a running program (started by `run`) write its heap dump",
        main: hostdump::main,
    },
    Command {
        name: "report",
        about: "symbolized report of a heap dump: text, HTML, flamegraph, pprof",
        main: report::main,
    },
    Command {
        name: "diff",
        about: "what grew between two heap dumps, by allocation site",
        main: diff::main,
    },
    Command {
        name: "records",
        about: "summary of a record_allocs file",
        main: records::main,
    },
    Command {
        name: "symbolize",
        about: "add function, file and line to the frames of a malloc_debug log (host, logcat)",
        main: logsym::main,
    },
    Command {
        name: "device",
        about: "adb helpers: enable malloc debug for a program or app, dump, push the library",
        main: device::main,
    },
];

fn usage() -> String {
    let mut out = String::from("usage: malloc-debug COMMAND [ARGS...]\n\ncommands:\n");
    for c in COMMANDS {
        out.push_str(&format!("  {:<10} {}\n", c.name, c.about));
    }
    out.push_str(
        "\n`malloc-debug COMMAND --help` describes a command and all its flags.\n\
         -h, --help     print this help and exit\n\
         -V, --version  print the version and exit\n",
    );
    out
}

pub fn main(args: Vec<OsString>) -> Result<ExitCode> {
    let mut args = args.into_iter();
    let Some(command) = args.next() else {
        eprint!("{}", usage());
        return Ok(ExitCode::from(2));
    };
    let rest: Vec<OsString> = args.collect();
    let name = command.to_str().unwrap_or("");
    if let Some(c) = COMMANDS.iter().find(|c| c.name == name) {
        return (c.main)(rest);
    }
    match name {
        "-h" | "--help" | "help" => {
            print!("{}", usage());
            Ok(ExitCode::SUCCESS)
        }
        "-V" | "--version" => {
            println!("malloc-debug {}", env!("CARGO_PKG_VERSION"));
            Ok(ExitCode::SUCCESS)
        }
        _ => Err(err!(
            "unknown command {:?}\n{}",
            command.to_string_lossy(),
            usage()
        )),
    }
}
