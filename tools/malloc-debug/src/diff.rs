//! `malloc-debug diff OLD NEW`: what grew between two dumps, by allocation site. Sites are
//! matched by their symbolized label (or module+offset), so two runs of a program with different
//! load addresses still line up.

use std::collections::BTreeMap;

use crate::Result;
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use crate::args::{Flag, Spec, number};
use crate::profile::{self, Profile};
use crate::report::load;

#[derive(Default, Clone, Copy)]
struct Totals {
    bytes: u64,
    count: u64,
}

fn by_site(profile: &Profile) -> BTreeMap<String, Totals> {
    let mut sites: BTreeMap<String, Totals> = BTreeMap::new();
    for site in profile::sites(profile).children {
        let Some(id) = site.frame else { continue };
        let frame = &profile.frames[id];
        let key = if frame.module.is_empty() {
            frame.label()
        } else {
            format!("{}  [{}]", frame.label(), frame.module_base())
        };
        let t = sites.entry(key).or_default();
        t.bytes = t.bytes.saturating_add(site.bytes);
        t.count = t.count.saturating_add(site.count);
    }
    sites
}

#[derive(Default)]
pub struct Args {
    files: Vec<PathBuf>,
    symbols: Option<PathBuf>,
    top: Option<usize>,
}

pub const SPEC: Spec<Args> = Spec {
    command: "diff",
    operands: "OLD NEW",
    about: "What grew between two heap dumps of one process, by allocation site.",
    flags: &[
        crate::report::symbols_flag(|a: &mut Args, v| {
            a.symbols = Some(v.into());
            Ok(())
        }),
        Flag {
            name: "top",
            short: None,
            value: Some("N"),
            help: "show the N sites that changed most (default 20)",
            set: |a, v| {
                a.top = Some(number(v, "--top")?);
                Ok(())
            },
        },
    ],
    operand: |a: &mut Args, v: OsString, _| {
        a.files.push(v.into());
        Ok(())
    },
};

pub fn main(args: Vec<OsString>) -> Result<ExitCode> {
    let Some(args) = SPEC.parse(args)? else {
        return Ok(ExitCode::SUCCESS);
    };
    let [old, new]: [PathBuf; 2] = args
        .files
        .try_into()
        .map_err(|_| crate::err!("diff: expected two dump files: OLD NEW"))?;
    let (_, old) = load(&old, args.symbols.as_deref())?;
    let (_, new) = load(&new, args.symbols.as_deref())?;
    print!("{}", render(&old, &new, args.top.unwrap_or(20)));
    Ok(ExitCode::SUCCESS)
}

fn render(old: &Profile, new: &Profile, top: usize) -> String {
    use std::fmt::Write as _;
    let (a, b) = (by_site(old), by_site(new));
    let mut rows: Vec<(String, Totals, Totals)> = Vec::new();
    let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    for key in keys {
        rows.push((
            key.clone(),
            a.get(key).copied().unwrap_or_default(),
            b.get(key).copied().unwrap_or_default(),
        ));
    }
    let delta = |r: &(String, Totals, Totals)| r.2.bytes as i128 - r.1.bytes as i128;
    rows.sort_by(|x, y| delta(y).cmp(&delta(x)).then(x.0.cmp(&y.0)));
    let grew: Vec<_> = rows.iter().filter(|r| delta(r) > 0).collect();
    let shrank = rows.iter().filter(|r| delta(r) < 0).count();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Total: {} -> {} bytes ({:+}), {} -> {} allocations ({:+})",
        old.total_bytes,
        new.total_bytes,
        new.total_bytes as i128 - old.total_bytes as i128,
        old.total_count,
        new.total_count,
        new.total_count as i128 - old.total_count as i128
    );
    let _ = writeln!(
        out,
        "{} sites grew, {shrank} shrank, {} unchanged\n",
        grew.len(),
        rows.len() - grew.len() - shrank
    );
    if grew.is_empty() {
        let _ = writeln!(out, "Nothing grew.");
        return out;
    }
    let _ = writeln!(
        out,
        "{:>12} {:>12} {:>12} {:>9}  SITE",
        "DELTA", "OLD", "NEW", "+COUNT"
    );
    for (key, o, n) in grew.iter().take(top).map(|r| (&r.0, r.1, r.2)) {
        let _ = writeln!(
            out,
            "{:>+12} {:>12} {:>12} {:>+9}  {key}",
            n.bytes as i128 - o.bytes as i128,
            o.bytes,
            n.bytes,
            n.count as i128 - o.count as i128
        );
    }
    out
}
