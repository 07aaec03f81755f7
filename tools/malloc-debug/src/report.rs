//! `malloc-debug report`: the text tree by allocation site, plus the optional HTML, SVG
//! flamegraph and pprof outputs.

use std::fmt::Write as _;
use std::path::Path;

use crate::cli::ReportArgs;
use crate::dump::{self, Dump};
use crate::profile::{self, Node, Profile, percent};
use crate::symbolize::Symbolizer;
use crate::{Error, Result, flamegraph, html, pprof};

/// How deep the text tree follows callers.
const MAX_DEPTH: usize = 64;

pub fn load(path: &Path, symbols: Option<&Path>) -> Result<(Dump, Profile)> {
    let dump = dump::read(path)?;
    for w in &dump.warnings {
        eprintln!("malloc-debug: {}: warning: {w}", path.display());
    }
    let mut symbolizer = Symbolizer::new(symbols.map(Path::to_path_buf));
    let profile = profile::build(&dump, &mut symbolizer);
    Ok((dump, profile))
}

pub fn main(args: ReportArgs) -> Result<()> {
    let (dump, profile) = load(&args.dump, args.symbols.as_deref())?;
    let title = args
        .dump
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    print!("{}", text(&dump, &profile, args.top));
    if let Some(out) = &args.html {
        write(
            out,
            html::render(&title, &dump, &profile, args.top).as_bytes(),
        )?;
    }
    if let Some(out) = &args.flamegraph {
        let tree = profile::top_down(&profile);
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
    let sites = profile::bottom_up(profile).children.len();
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
    let tree = profile::bottom_up(profile);
    let shown = tree.children.len().min(top);
    let _ = writeln!(
        out,
        "\nTop {shown} of {} allocation sites by bytes, each followed by its callers:\n",
        tree.children.len()
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
