//! Self-contained HTML report: summary, a collapsible call tree by allocation site (native
//! `<details>` elements: works without scripts, nothing fetched from the network) and the
//! flamegraph inlined as SVG.

use std::fmt::Write as _;

use crate::dump::Dump;
use crate::flamegraph;
use crate::profile::{self, Node, Profile, percent};
use crate::report::summary;

/// Bounds on what the page holds, so a huge dump still gives a page a browser can open.
const MAX_SITES: usize = 2000;
const MAX_DEPTH: usize = 64;

pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = r#"
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.5em; }
.summary { font-family: monospace; background: #f4f4f4; padding: .6em; }
.tree { font-family: monospace; font-size: 13px; }
.tree summary, .tree .leaf { padding: 1px 0; white-space: nowrap; }
.tree summary { cursor: pointer; list-style: none; }
.tree summary::-webkit-details-marker { display: none; }
.tree summary:hover { background: #fff3d6; }
.tree .label::before { display: inline-block; width: 1.2em; content: ""; }
.tree summary .label::before { content: "\25B8"; }
.tree details[open] > summary .label::before { content: "\25BE"; }
.num { display: inline-block; text-align: right; color: #555; }
.bytes { width: 9em; } .pct { width: 5.5em; } .count { width: 6em; }
.bar { display: inline-block; height: .7em; background: #e8833a; margin: 0 .5em; vertical-align: middle; }
.bars { display: inline-block; width: 90px; }
.top { border-collapse: collapse; }
.top td, .top th { padding: 2px 14px 2px 0; text-align: right; font-variant-numeric: tabular-nums; }
.top td:last-child, .top th:last-child { text-align: left; font-family: monospace; }
.module { color: #888; }
.flame { overflow-x: auto; border: 1px solid #ddd; }
button { margin-right: .5em; }
"#;

const SCRIPT: &str = r#"
function setAll(open) {
  document.querySelectorAll('.tree details').forEach(function (d) { d.open = open; });
}
"#;

pub fn render(title: &str, dump: &Dump, profile: &Profile, top: usize) -> String {
    let tree = profile::bottom_up(profile);
    let mut out = String::new();
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>malloc-debug: {t}</title><style>{STYLE}</style><script>{SCRIPT}</script></head>\n\
         <body>\n<h1>Native heap: {t}</h1>\n<div class=\"summary\">{s}</div>\n",
        t = escape(title),
        s = escape(&summary(dump, profile))
    );
    if !profile.missing.is_empty() {
        let _ = writeln!(
            out,
            "<p>Not symbolized (file not found): {}</p>",
            escape(&profile.missing.join(", "))
        );
    }
    let _ = writeln!(out, "<h2>Top allocation sites</h2>\n<table class=\"top\">");
    let _ = writeln!(
        out,
        "<tr><th>bytes</th><th>%</th><th>allocations</th><th>site</th></tr>"
    );
    for site in tree.children.iter().take(top) {
        let frame = &profile.frames[site.frame.unwrap_or_default()];
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{:.2}%</td><td>{}</td>\
             <td>{}</td></tr>",
            site.bytes,
            percent(site.bytes, profile.total_bytes),
            site.count,
            escape(&frame.label())
        );
    }
    let _ = writeln!(out, "</table>");
    let _ = writeln!(
        out,
        "<h2>Call tree by allocation site</h2>\n<p>Click a site to see its callers. \
         <button onclick=\"setAll(true)\">Expand all</button>\
         <button onclick=\"setAll(false)\">Collapse all</button></p>\n<div class=\"tree\" id=\"tree\">"
    );
    for site in tree.children.iter().take(MAX_SITES) {
        node(&mut out, profile, site, 0);
    }
    if tree.children.len() > MAX_SITES {
        let _ = writeln!(
            out,
            "<p>{} smaller sites not shown.</p>",
            tree.children.len() - MAX_SITES
        );
    }
    let _ = writeln!(out, "</div>\n<h2>Flamegraph</h2>\n<div class=\"flame\">");
    out.push_str(&flamegraph::svg(
        title,
        profile,
        &profile::top_down(profile),
    ));
    out.push_str("</div>\n</body></html>\n");
    out
}

fn node(out: &mut String, profile: &Profile, node: &Node, depth: usize) {
    let Some(id) = node.frame else { return };
    let frame = &profile.frames[id];
    let pct = percent(node.bytes, profile.total_bytes);
    let module = if frame.module.is_empty() {
        String::new()
    } else {
        format!(
            " <span class=\"module\">{}</span>",
            escape(frame.module_base())
        )
    };
    let line = format!(
        "<span class=\"num bytes\">{}</span><span class=\"num pct\">{pct:.2}%</span>\
         <span class=\"num count\">{}</span><span class=\"bars\"><span class=\"bar\" \
         style=\"width:{:.0}px\"></span></span><span class=\"label\" \
         style=\"padding-left:{}em\">{}</span>{module}",
        node.bytes,
        node.count,
        (pct * 0.8).max(1.0),
        depth as f64 * 1.5,
        escape(&frame.label())
    );
    if node.children.is_empty() || depth >= MAX_DEPTH {
        let _ = writeln!(out, "<div class=\"leaf\">{line}</div>");
        return;
    }
    let _ = writeln!(out, "<details><summary>{line}</summary>");
    for child in &node.children {
        self::node(out, profile, child, depth + 1);
    }
    let _ = writeln!(out, "</details>");
}
