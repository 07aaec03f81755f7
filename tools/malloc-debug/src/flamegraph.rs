//! Flamegraph SVG (outermost callers at the bottom, width = bytes), self-contained: the same
//! picture is written as `--flamegraph OUT.svg` and inlined in the HTML report, whose script
//! makes it interactive (zoom, search, reset) from each frame's `<g class="f">` data: `data-d`
//! (row), `data-b` (bytes) and `data-l` (the full label).
//!
//! The tree is [`tree`]: frames narrower than 1/[`RESOLUTION`] of the total are left out, so the
//! picture of a million distinct stacks stays a few thousand rectangles.

use std::fmt::Write as _;

use crate::html::escape;
use crate::profile::{self, Direction, Limits, Node, Profile, percent};

/// The smallest frame kept is this fraction of the total: a tenth of a pixel at full width, so
/// zooming in on a frame of a few percent still shows its callees.
const RESOLUTION: u64 = 10_000;

/// The top-down tree the flamegraph draws.
pub fn tree(profile: &Profile) -> Node {
    profile::tree(
        profile,
        Direction::TopDown,
        Limits {
            min_bytes: (profile.total_bytes / RESOLUTION).max(1),
            ..Limits::ALL
        },
    )
}

const WIDTH: f64 = 1200.0;
const ROW: f64 = 18.0;
const PAD: f64 = 10.0;
const TITLE: f64 = 30.0;

fn depth(node: &Node) -> usize {
    1 + node.children.iter().map(depth).max().unwrap_or(0)
}

/// Warm colours derived from the name, so a function keeps its colour across reports.
fn colour(name: &str) -> String {
    let h = name
        .bytes()
        .fold(2166136261u32, |h, b| (h ^ b as u32).wrapping_mul(16777619));
    let r = 205 + (h % 50);
    let g = 80 + ((h >> 8) % 130);
    let b = (h >> 16) % 55;
    format!("rgb({r},{g},{b})")
}

pub fn svg(title: &str, profile: &Profile, root: &Node) -> String {
    let rows = depth(root);
    let height = TITLE + rows as f64 * ROW + 2.0 * PAD;
    let mut out = String::new();
    let _ = write!(
        out,
        r##"<svg xmlns="http://www.w3.org/2000/svg" class="flamegraph" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="monospace" font-size="12">
<rect x="0" y="0" width="{WIDTH}" height="{height}" fill="#f8f8f8"/>
<text x="{}" y="20" text-anchor="middle" font-size="16">{} — {} bytes in {} allocations</text>
"##,
        WIDTH / 2.0,
        escape(title),
        profile.total_bytes,
        profile.total_count
    );
    let scale = (WIDTH - 2.0 * PAD) / root.bytes.max(1) as f64;
    draw(&mut out, profile, root, PAD, height - PAD - ROW, scale, 0);
    out.push_str("</svg>\n");
    out
}

fn draw(
    out: &mut String,
    profile: &Profile,
    node: &Node,
    x: f64,
    y: f64,
    scale: f64,
    depth: usize,
) {
    let w = node.bytes as f64 * scale;
    let label = match node.frame {
        Some(id) => profile.frames[id].label(),
        None => "all".to_string(),
    };
    let tip = format!(
        "{label}: {} bytes ({:.2}%), {} allocations",
        node.bytes,
        percent(node.bytes, profile.total_bytes),
        node.count
    );
    // About 7 pixels per character at font-size 12.
    let chars = ((w - 6.0) / 7.0).max(0.0) as usize;
    let shown: String = if label.chars().count() <= chars {
        label.clone()
    } else if chars > 2 {
        label.chars().take(chars - 2).collect::<String>() + ".."
    } else {
        String::new()
    };
    let _ = writeln!(
        out,
        r#"<g class="f" data-d="{depth}" data-b="{}" data-l="{}"><title>{}</title><rect x="{x:.3}" y="{y:.1}" width="{w:.3}" height="{:.1}" rx="2" fill="{}"/><text x="{:.1}" y="{:.1}">{}</text></g>"#,
        node.bytes,
        escape(&label),
        escape(&tip),
        ROW - 1.0,
        colour(&label),
        x + 3.0,
        y + ROW - 5.0,
        escape(&shown)
    );
    let mut cx = x;
    for child in &node.children {
        draw(out, profile, child, cx, y - ROW, scale, depth + 1);
        cx += child.bytes as f64 * scale;
    }
}
