//! `malloc-debug report`: the text tree by allocation site, plus the optional HTML, SVG
//! flamegraph and pprof outputs.

use std::fmt::Write as _;
use std::path::Path;

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use crate::args::{Flag, Spec, number};
use crate::dump::{self, Dump};
use crate::profile::{self, Node, Profile, percent};
use crate::symbolize::Symbolizer;
use crate::{Error, Result, flamegraph, html, pprof};

/// How deep the text tree follows callers.
const MAX_DEPTH: usize = 64;

pub fn load(path: &Path, symbols: Option<&Path>) -> Result<(Dump, Profile)> {
    let mut dump = dump::read(path)?;
    for w in &dump.warnings {
        eprintln!("malloc-debug: {}: warning: {w}", path.display());
    }
    let mut symbolizer = Symbolizer::new(symbols.map(Path::to_path_buf));
    let profile = profile::build(&mut dump, &mut symbolizer);
    Ok((dump, profile))
}

#[derive(Default)]
pub struct Args {
    pub dump: Option<PathBuf>,
    pub symbols: Option<PathBuf>,
    pub top: Option<usize>,
    pub html: Option<PathBuf>,
    pub flamegraph: Option<PathBuf>,
    pub pprof: Option<PathBuf>,
}

/// `--symbols DIR`, shared by every subcommand that symbolizes (report, diff, symbolize, run);
/// `set` stores the directory in that subcommand's arguments.
pub const fn symbols_flag<T>(set: fn(&mut T, OsString) -> Result<()>) -> Flag<T> {
    Flag {
        name: "symbols",
        short: None,
        value: Some("DIR"),
        help: "look for the modules' files (with debug info) under DIR first:\n\
               DIR/<path on the device> (like $ANDROID_PRODUCT_OUT/symbols), then \
               DIR/<file name>",
        set,
    }
}

pub const SPEC: Spec<Args> = Spec {
    command: "report",
    operands: "DUMP",
    about: "Symbolized report of a heap dump (v1.0, v1.1, v1.2): the allocations by call site,\n\
            as a text tree on stdout and optionally as HTML, an SVG flamegraph or pprof.",
    flags: &[
        symbols_flag(|a: &mut Args, v| {
            a.symbols = Some(v.into());
            Ok(())
        }),
        Flag {
            name: "top",
            short: None,
            value: Some("N"),
            help: "show the N biggest call sites at each level (default 10)",
            set: |a, v| {
                a.top = Some(number(v, "--top")?);
                Ok(())
            },
        },
        Flag {
            name: "html",
            short: None,
            value: Some("OUT.html"),
            help: "also write an HTML report (flamegraph and tables)",
            set: |a, v| {
                a.html = Some(v.into());
                Ok(())
            },
        },
        Flag {
            name: "flamegraph",
            short: None,
            value: Some("OUT.svg"),
            help: "also write an SVG flamegraph",
            set: |a, v| {
                a.flamegraph = Some(v.into());
                Ok(())
            },
        },
        Flag {
            name: "pprof",
            short: None,
            value: Some("OUT.pb.gz"),
            help: "also write a pprof profile (go tool pprof, speedscope)",
            set: |a, v| {
                a.pprof = Some(v.into());
                Ok(())
            },
        },
    ],
    operand: |a: &mut Args, v: OsString, _| {
        if a.dump.is_some() {
            return Err(crate::err!(
                "report: unexpected argument {:?}",
                v.to_string_lossy()
            ));
        }
        a.dump = Some(v.into());
        Ok(())
    },
};

pub fn main(args: Vec<OsString>) -> Result<ExitCode> {
    let Some(args) = SPEC.parse(args)? else {
        return Ok(ExitCode::SUCCESS);
    };
    let dump_path = args
        .dump
        .clone()
        .ok_or_else(|| crate::err!("report: no DUMP file given"))?;
    let top = args.top.unwrap_or(10);
    run(&dump_path, &args, top)?;
    Ok(ExitCode::SUCCESS)
}

fn run(dump_path: &Path, args: &Args, top: usize) -> Result<()> {
    let (dump, profile) = load(dump_path, args.symbols.as_deref())?;
    let title = dump_path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    print!("{}", text(&dump, &profile, top));
    if let Some(out) = &args.html {
        write(out, html::render(&title, &dump, &profile, top).as_bytes())?;
    }
    if let Some(out) = &args.flamegraph {
        let tree = flamegraph::tree(&profile);
        write(out, flamegraph::svg(&title, &profile, &tree).as_bytes())?;
    }
    if let Some(out) = &args.pprof {
        write(out, &pprof::encode_gzip(&profile)?)?;
    }
    Ok(())
}

pub fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    std::fs::write(path, bytes).map_err(|e| Error(format!("cannot write {}: {e}", path.display())))
}

pub fn summary(dump: &Dump, profile: &Profile) -> String {
    let fingerprint = dump
        .fingerprint
        .as_deref()
        .map(|f| format!(", fingerprint '{f}'"))
        .unwrap_or_default();
    let sites = profile::sites(profile).children.len();
    format!(
        "Heap dump {}{fingerprint}: {} bytes in {} allocations ({} records, {} sites, {} maps, \
         backtrace size {})",
        dump.version.as_str(),
        profile.total_bytes,
        profile.total_count,
        dump.records.len(),
        sites,
        dump.maps.len(),
        dump.backtrace_size
    )
}

pub fn text(dump: &Dump, profile: &Profile, top: usize) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}", summary(dump, profile));
    if !profile.missing.is_empty() {
        let _ = writeln!(
            out,
            "Not symbolized (file not found; see --symbols): {}",
            profile.missing.join(", ")
        );
    }
    // Only the `top` sites' callers are built: a million distinct stacks stay cheap.
    let tree = profile::tree(
        profile,
        profile::Direction::BottomUp,
        profile::Limits {
            max_sites: top,
            ..profile::Limits::ALL
        },
    );
    let sites = tree.children.len() + tree.hidden.nodes;
    let shown = tree.children.len();
    let _ = writeln!(
        out,
        "\nTop {shown} of {sites} allocation sites by bytes, each followed by its callers:\n"
    );
    let _ = writeln!(out, "{:>12} {:>7} {:>9}  SITE", "BYTES", "%TOTAL", "COUNT");
    for site in tree.children.iter().take(top) {
        text_node(&mut out, profile, site, 0);
    }
    out
}

fn text_node(out: &mut String, profile: &Profile, node: &Node, depth: usize) {
    let Some(id) = node.frame else { return };
    let frame = &profile.frames[id];
    let module = if depth == 0 && !frame.module.is_empty() {
        format!("  [{}]", frame.module)
    } else {
        String::new()
    };
    let _ = writeln!(
        out,
        "{:>12} {:>6.2}% {:>9}  {}{}{module}",
        node.bytes,
        percent(node.bytes, profile.total_bytes),
        node.count,
        "  ".repeat(depth),
        frame.label()
    );
    if depth < MAX_DEPTH {
        for child in &node.children {
            text_node(out, profile, child, depth + 1);
        }
    }
}
