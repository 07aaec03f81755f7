//! Every subcommand answers --help (exit 0, on stdout, naming every flag), the tool answers
//! --version and -V, and a wrong flag points at the subcommand's --help.

mod common;
use common::*;

/// Each subcommand with every flag it accepts.
const COMMANDS: &[(&str, &[&str])] = &[
    (
        "run",
        &[
            "--options OPTS",
            "--program NAME",
            "--lib LIB.so",
            "--front FRONT.so",
            "--symbols DIR",
            "--no-symbolize",
        ],
    ),
    ("dump", &["--wait SECONDS"]),
    (
        "report",
        &[
            "--symbols DIR",
            "--top N",
            "--html OUT.html",
            "--flamegraph OUT.svg",
            "--pprof OUT.pb.gz",
        ],
    ),
    ("diff", &["--symbols DIR", "--top N"]),
    ("records", &["--top N"]),
    ("symbolize", &["--symbols DIR"]),
    (
        "device",
        &[
            "-s, --serial SERIAL",
            "--options OPTS",
            "--no-restart",
            "--no-logwrapper",
            "--out FILE",
            "--app",
            "--prefix DEVICE_PREFIX",
            "--wait SECONDS",
            "--lib32",
        ],
    ),
];

#[test]
fn every_subcommand_answers_help_naming_every_flag() {
    for (command, flags) in COMMANDS {
        for help in ["--help", "-h"] {
            // --help wins over the operands (for `run`, everything after CMD is CMD's).
            let out = cli().args([command, help, "x"]).output().unwrap();
            assert_eq!(
                out.status.code(),
                Some(0),
                "{command} {help}: {}",
                stderr(&out)
            );
            assert_eq!(stderr(&out), "", "{command}");
            let text = stdout(&out);
            assert!(
                text.starts_with(&format!("usage: malloc-debug {command} [FLAGS] ")),
                "{text}"
            );
            for flag in flags.iter().copied().chain(["-h, --help"]) {
                assert!(
                    text.lines().any(|l| l.starts_with(&format!("  {flag}  "))),
                    "{command} --help does not describe {flag}:\n{text}"
                );
            }
        }
    }
}

#[test]
fn a_help_page_in_full() {
    let out = cli().args(["records", "--help"]).output().unwrap();
    assert_eq!(
        ok(out),
        "usage: malloc-debug records [FLAGS] FILE\n\nSummary of a record_allocs file: calls by \
         kind, the threads, the biggest sizes,\nthe lifetimes and what was never freed.\n\n\
         flags:\n  --top N     show the N biggest entries of each table (default 10)\n  \
         -h, --help  print this help and exit\n"
    );
}

#[test]
fn top_level_help_lists_every_command_and_version() {
    let text = ok(cli().arg("--help").output().unwrap());
    for (command, _) in COMMANDS {
        assert!(
            text.lines()
                .any(|l| l.starts_with(&format!("  {command} "))),
            "{text}"
        );
    }
    assert!(text.contains("-V, --version"), "{text}");
    for v in ["--version", "-V"] {
        let out = cli().arg(v).output().unwrap();
        assert_eq!(
            ok(out),
            format!("malloc-debug {}\n", env!("CARGO_PKG_VERSION"))
        );
    }
    // No command: the same help on stderr, exit 2.
    let out = cli().output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(stderr(&out), text);
}

#[test]
fn a_wrong_flag_points_at_the_help() {
    for (command, _) in COMMANDS {
        let out = cli().args([command, "--bogus"]).output().unwrap();
        assert_eq!(out.status.code(), Some(2));
        assert_eq!(
            stderr(&out),
            format!(
                "malloc-debug: {command}: invalid option '--bogus' (see malloc-debug {command} \
                 --help)\n"
            )
        );
    }
}
