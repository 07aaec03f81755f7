//! Self-contained HTML report (nothing fetched from the network): summary, a table of the
//! allocation sites sortable by bytes and by count, a collapsible call tree by allocation site
//! (native `<details>` elements: works without scripts) and the flamegraph inlined as SVG, which
//! the page's script makes interactive: click a frame to zoom, search, hover for size and count,
//! reset.
//!
//! Size is bounded whatever the dump: at most [`MAX_SITES`] sites, tree nodes under
//! 1/[`TREE_RESOLUTION`] of the total summed into one "smaller callers" line, and the
//! flamegraph's own bound (flamegraph.rs).

use std::fmt::Write as _;

use crate::dump::Dump;
use crate::flamegraph;
use crate::profile::{self, Direction, Limits, Node, Profile, percent};
use crate::report::summary;

/// Bounds on what the page holds, so a huge dump still gives a page a browser can open.
const MAX_SITES: usize = 2000;
const MAX_DEPTH: usize = 64;
const TREE_RESOLUTION: u64 = 20_000;

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
.sites th { cursor: pointer; user-select: none; }
.sites td:nth-child(3), .sites th:nth-child(3) { text-align: left; font-family: monospace; }
.sites th.sorted::after { content: " \25BE"; }
.sites { display: block; max-height: 28em; overflow-y: auto; }
.hidden { color: #888; font-style: italic; }
.flamegraph g.f { cursor: pointer; }
.flamegraph g.f:hover rect { stroke: #000; stroke-width: .5; }
.flamegraph g.match rect { fill: #c957e6; }
.flamegraph g.ancestor rect { opacity: .6; }
#fg-status { font-family: monospace; margin-left: 1em; }
"#;

const SCRIPT: &str = r#"
function setAll(open) {
  document.querySelectorAll('.tree details').forEach(function (d) { d.open = open; });
}
// The sites table: a click on a numeric column header sorts by it, biggest first.
function sortSites(column) {
  var table = document.getElementById('sites');
  var rows = Array.prototype.slice.call(table.querySelectorAll('tr.site'));
  rows.sort(function (a, b) {
    return (+b.cells[column].dataset.v) - (+a.cells[column].dataset.v) ||
           (+b.cells[0].dataset.v) - (+a.cells[0].dataset.v);
  });
  rows.forEach(function (r) { table.tBodies[0].appendChild(r); });
  table.querySelectorAll('th').forEach(function (th, i) {
    th.classList.toggle('sorted', i === column);
  });
}
// The flamegraph: each frame is a g.f element with data-d=ROW data-b=BYTES data-l=LABEL.
var fg = null;
function fgInit() {
  var svg = document.querySelector('.flame svg');
  if (!svg) return;
  var W = +svg.getAttribute('width'), PAD = 10;
  var frames = Array.prototype.map.call(svg.querySelectorAll('g.f'), function (g) {
    var r = g.querySelector('rect');
    return { g: g, r: r, t: g.querySelector('text'), x: +r.getAttribute('x'),
             w: +r.getAttribute('width'), d: +g.dataset.d, b: +g.dataset.b, l: g.dataset.l };
  });
  function fit(label, w) {
    var n = Math.floor((w - 6) / 7);
    return label.length <= n ? label : n > 2 ? label.slice(0, n - 2) + '..' : '';
  }
  function zoom(f) {
    var eps = 1e-6, scale = (W - 2 * PAD) / f.w;
    frames.forEach(function (o) {
      var ancestor = o.d < f.d && o.x <= f.x + eps && o.x + o.w >= f.x + f.w - eps;
      var inside = o.d >= f.d && o.x >= f.x - eps && o.x + o.w <= f.x + f.w + eps;
      o.g.style.display = ancestor || inside ? '' : 'none';
      o.g.classList.toggle('ancestor', ancestor && f.d > 0);
      if (!ancestor && !inside) return;
      var x = ancestor ? PAD : PAD + (o.x - f.x) * scale;
      var w = ancestor ? W - 2 * PAD : o.w * scale;
      o.r.setAttribute('x', x.toFixed(3));
      o.r.setAttribute('width', w.toFixed(3));
      o.t.setAttribute('x', (x + 3).toFixed(1));
      o.t.textContent = fit(o.l, w);
    });
  }
  fg = {
    zoom: zoom,
    reset: function () { zoom(frames[0]); },
    search: function (term) {
      var matched = [], bytes = 0;
      frames.forEach(function (o) {
        var m = term !== '' && o.l.indexOf(term) >= 0;
        o.g.classList.toggle('match', m);
        if (!m) return;
        // Bytes of a match inside another match count once.
        var nested = matched.some(function (p) {
          return p.d < o.d && o.x >= p.x - 1e-6 && o.x + o.w <= p.x + p.w + 1e-6;
        });
        if (!nested) bytes += o.b;
        matched.push(o);
      });
      var total = frames.length ? frames[0].b : 0;
      document.getElementById('fg-status').textContent = term === '' ? '' :
        matched.length + ' frames match: ' + bytes + ' bytes (' +
        (total ? (100 * bytes / total).toFixed(2) : '0.00') + '%)';
    }
  };
  frames.sort(function (a, b) { return a.d - b.d; });
  svg.addEventListener('click', function (e) {
    var g = e.target.closest('g.f');
    if (!g) return;
    zoom(frames.filter(function (o) { return o.g === g; })[0]);
  });
}
document.addEventListener('DOMContentLoaded', fgInit);
"#;

pub fn render(title: &str, dump: &Dump, profile: &Profile, top: usize) -> String {
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
    let sites = profile::sites(profile);
    let _ = writeln!(out, "<h2>Top allocation sites</h2>\n<table class=\"top\">");
    let _ = writeln!(
        out,
        "<tr><th>bytes</th><th>%</th><th>allocations</th><th>site</th></tr>"
    );
    for site in sites.children.iter().take(top) {
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
    sites_table(&mut out, profile, &sites);
    let tree = profile::tree(
        profile,
        Direction::BottomUp,
        Limits {
            min_bytes: (profile.total_bytes / TREE_RESOLUTION).max(1),
            max_sites: MAX_SITES,
            max_depth: MAX_DEPTH,
        },
    );
    let _ = writeln!(
        out,
        "<h2>Call tree by allocation site</h2>\n<p>Click a site to see its callers. \
         <button onclick=\"setAll(true)\">Expand all</button>\
         <button onclick=\"setAll(false)\">Collapse all</button></p>\n<div class=\"tree\" id=\"tree\">"
    );
    for site in &tree.children {
        node(&mut out, profile, site, 0);
    }
    hidden(&mut out, profile, &tree, 0);
    let _ = writeln!(
        out,
        "</div>\n<h2>Flamegraph</h2>\n<p>Click a frame to zoom in, hover for its size and \
         count. <button id=\"fg-reset\" onclick=\"fg.reset()\">Reset zoom</button>\
         <input id=\"fg-search\" type=\"search\" placeholder=\"search frames\" \
         oninput=\"fg.search(this.value)\"><span id=\"fg-status\"></span></p>\n\
         <div class=\"flame\">"
    );
    out.push_str(&flamegraph::svg(title, profile, &flamegraph::tree(profile)));
    out.push_str("</div>\n</body></html>\n");
    out
}

/// Every allocation site (up to [`MAX_SITES`]), sortable by bytes and by count.
fn sites_table(out: &mut String, profile: &Profile, sites: &Node) {
    let _ = writeln!(
        out,
        "<h2>Live allocations by call site</h2>\n<p>{} sites; click a column to sort by it.</p>\n\
         <table class=\"top sites\" id=\"sites\"><thead><tr>\
         <th class=\"sorted\" onclick=\"sortSites(0)\">bytes</th>\
         <th onclick=\"sortSites(1)\">allocations</th><th>site</th><th>module</th>\
         </tr></thead><tbody>",
        sites.children.len()
    );
    for site in sites.children.iter().take(MAX_SITES) {
        let frame = &profile.frames[site.frame.unwrap_or_default()];
        let _ = writeln!(
            out,
            "<tr class=\"site\"><td data-v=\"{b}\">{b}</td><td data-v=\"{c}\">{c}</td>\
             <td>{}</td><td class=\"module\">{}</td></tr>",
            escape(&frame.label()),
            escape(frame.module_base()),
            b = site.bytes,
            c = site.count,
        );
    }
    let _ = writeln!(out, "</tbody></table>");
    if sites.children.len() > MAX_SITES {
        let _ = writeln!(
            out,
            "<p>{} smaller sites not shown.</p>",
            sites.children.len() - MAX_SITES
        );
    }
}

/// The line that stands for the children a tree left out.
fn hidden(out: &mut String, profile: &Profile, node: &Node, depth: usize) {
    let h = node.hidden;
    if h.nodes == 0 {
        return;
    }
    let what = if node.frame.is_some() {
        "callers"
    } else {
        "sites"
    };
    let _ = writeln!(
        out,
        "<div class=\"leaf hidden\"><span class=\"num bytes\">{}</span>\
         <span class=\"num pct\">{:.2}%</span><span class=\"num count\">{}</span>\
         <span class=\"bars\"></span><span class=\"label\" style=\"padding-left:{}em\">\
         {} smaller {what} not shown</span></div>",
        h.bytes,
        percent(h.bytes, profile.total_bytes),
        h.count,
        depth as f64 * 1.5,
        h.nodes
    );
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
    if node.children.is_empty() && node.hidden.nodes == 0 || depth >= MAX_DEPTH {
        let _ = writeln!(out, "<div class=\"leaf\">{line}</div>");
        return;
    }
    let _ = writeln!(out, "<details><summary>{line}</summary>");
    for child in &node.children {
        self::node(out, profile, child, depth + 1);
    }
    hidden(out, profile, node, depth + 1);
    let _ = writeln!(out, "</details>");
}
