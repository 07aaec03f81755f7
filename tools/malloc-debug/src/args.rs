//! The one argument parser of every subcommand. A subcommand describes itself as a [`Spec`]:
//! its operands, a sentence about it, and a table of [`Flag`]s, each with its help text and the
//! function that stores its value. Parsing, `--help` and the usage text all come from that one
//! table, so adding a flag is adding a row, and `--help` names every flag by construction.
//!
//! The subcommand modules depend on this module only; `cli` depends on them (no cycle).

use std::ffi::OsString;
use std::fmt::Write as _;

use lexopt::prelude::*;

use crate::{Result, err};

/// One `--name [VALUE]` flag of a subcommand whose arguments are a `T`.
pub struct Flag<T> {
    /// Long name, without the dashes.
    pub name: &'static str,
    pub short: Option<char>,
    /// Name of the value in the usage (`OPTS`); `None` for a switch.
    pub value: Option<&'static str>,
    pub help: &'static str,
    /// Stores the value (an empty string for a switch).
    pub set: fn(&mut T, OsString) -> Result<()>,
}

/// A subcommand's arguments.
pub struct Spec<T: 'static> {
    /// As typed after `malloc-debug` (`run`, `device`).
    pub command: &'static str,
    /// The operands in the usage line (`DUMP`, `[--] CMD ARGS...`).
    pub operands: &'static str,
    /// What it does, printed under the usage line (may span lines).
    pub about: &'static str,
    pub flags: &'static [Flag<T>],
    /// Takes one operand; it may drain the rest of the command line from the parser (`run`).
    pub operand: fn(&mut T, OsString, &mut lexopt::Parser) -> Result<()>,
}

impl<T: Default> Spec<T> {
    /// The arguments, or `None` when `--help` was asked for (and printed on stdout).
    pub fn parse(&self, args: Vec<OsString>) -> Result<Option<T>> {
        let mut p = lexopt::Parser::from_args(args);
        let mut out = T::default();
        while let Some(arg) = p.next()? {
            let flag = match &arg {
                Short('h') | Long("help") => {
                    print!("{}", self.usage());
                    return Ok(None);
                }
                Long(name) => self.flags.iter().find(|f| f.name == *name),
                Short(c) => self.flags.iter().find(|f| f.short == Some(*c)),
                Value(_) => None,
            };
            match (flag, arg) {
                (Some(flag), _) => {
                    let value = match flag.value {
                        Some(_) => p.value()?,
                        None => OsString::new(),
                    };
                    (flag.set)(&mut out, value)?;
                }
                (None, Value(v)) => (self.operand)(&mut out, v, &mut p)?,
                (None, arg) => {
                    return Err(err!(
                        "{}: {} (see malloc-debug {} --help)",
                        self.command,
                        arg.unexpected(),
                        self.command
                    ));
                }
            }
        }
        Ok(Some(out))
    }
}

impl<T> Spec<T> {
    pub fn usage(&self) -> String {
        let mut out = format!(
            "usage: malloc-debug {} [FLAGS] {}\n\n{}\n\nflags:\n",
            self.command,
            self.operands,
            self.about.trim_end()
        );
        let mut rows: Vec<(String, &str)> = self
            .flags
            .iter()
            .map(|f| {
                let mut left = match f.short {
                    Some(c) => format!("-{c}, --{}", f.name),
                    None => format!("--{}", f.name),
                };
                if let Some(v) = f.value {
                    left.push(' ');
                    left.push_str(v);
                }
                (left, f.help)
            })
            .collect();
        rows.push(("-h, --help".to_string(), "print this help and exit"));
        let width = rows.iter().map(|(l, _)| l.len()).max().unwrap_or(0);
        for (left, help) in rows {
            let mut lines = help.lines();
            let _ = writeln!(out, "  {left:<width$}  {}", lines.next().unwrap_or(""));
            for more in lines {
                let _ = writeln!(out, "  {:<width$}  {more}", "");
            }
        }
        out
    }
}

pub fn string(v: OsString) -> Result<String> {
    v.into_string()
        .map_err(|v| err!("argument is not UTF-8: {:?}", v.to_string_lossy()))
}

pub fn number(v: OsString, what: &str) -> Result<usize> {
    let s = string(v)?;
    s.parse()
        .map_err(|_| err!("{what}: expected a number, got {s:?}"))
}
