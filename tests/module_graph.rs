//! The library's layers (docs/design.md, "Layers"), kept by a test: every `crate::` path in
//! `src/` is an edge from the module that writes it to the top-level module it names, and no
//! edge may point to a higher layer or close a cycle.
//!
//! `cargo test --test module_graph -- --nocapture` prints the graph. A new top-level module must
//! be given a layer in `LAYERS` below.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// From the bottom. A module may import modules of its own layer (without a cycle) and of the
/// layers below it; data that must go up goes as plain values or function pointers.
const LAYERS: &[(&str, &[&str])] = &[
    (
        "platform and system",
        &[
            "bytes",
            "config",
            "dispatch",
            "errors",
            "fmt",
            "log",
            "log_file",
            "monotonic_clock",
            "mutex",
            "original_stderr",
            "output",
            "pages",
            "platform",
            "report_stack",
            "sync",
        ],
    ),
    (
        "data structures",
        &[
            "backtrace",
            "free_queue",
            "spare_blocks",
            "header",
            "plan",
            "live_table",
            "presence_map",
            "state",
            "suppress",
            "symbolize",
        ],
    ),
    (
        "features",
        &[
            "crossing",
            "error_context",
            "error_marker",
            "failure",
            "free_track",
            "guard",
            "leaks",
            "record_allocs",
            "report",
            "signals",
            "snapshot",
            "tracking",
            "unreachable",
            "verify",
        ],
    ),
    (
        "allocation pipeline",
        &["alloc", "deferred", "entry", "iterate"],
    ),
    ("lifecycle", &["lifecycle"]),
    ("C exports", &["exports"]),
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|(_, mods)| mods.contains(&module))
}

/// Source without comment lines and without the unit tests (`#[cfg(test)] mod tests` and
/// `tests.rs` files: tests may reach anywhere).
fn code_of(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests {") {
        Some(i) => &text[..i],
        None => text,
    };
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn ident(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The top-level modules named by `crate::` paths in `code` (`crate::a::b`, `crate::{a, b::c}`).
fn imports(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        let before = rest[..i].chars().next_back();
        rest = &rest[i + "crate::".len()..];
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$') {
            continue; // `$crate::` is a macro's own path; `xcrate::` is not ours
        }
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1;
            let mut item_start = true;
            for (j, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    ',' if depth == 1 => item_start = true,
                    c if c.is_whitespace() => {}
                    _ if item_start && depth == 1 => {
                        item_start = false;
                        let name = ident(&group[j..]);
                        if !name.is_empty() {
                            out.insert(name.to_string());
                        }
                    }
                    _ => {}
                }
            }
        } else {
            let name = ident(rest);
            if !name.is_empty() {
                out.insert(name.to_string());
            }
        }
    }
    out
}

fn walk(dir: &Path, files: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            walk(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

/// module -> (imported module -> files that import it)
fn graph() -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    walk(&src, &mut files);
    let mut graph: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for file in files {
        let rel = file
            .strip_prefix(&src)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let top = rel.split('/').next().unwrap().trim_end_matches(".rs");
        if top == "lib" || rel.ends_with("/tests.rs") || rel.contains("/tests/") {
            continue;
        }
        let entry = graph.entry(top.to_string()).or_default();
        for to in imports(&code_of(&std::fs::read_to_string(&file).unwrap())) {
            if to != top {
                entry.entry(to).or_default().insert(rel.clone());
            }
        }
    }
    graph
}

/// Strongly connected components with more than one module (Tarjan).
fn cycles(graph: &BTreeMap<String, BTreeMap<String, BTreeSet<String>>>) -> Vec<Vec<String>> {
    struct Tarjan<'g> {
        graph: &'g BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
        index: BTreeMap<&'g str, (usize, usize)>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        out: Vec<Vec<String>>,
    }
    impl<'g> Tarjan<'g> {
        fn visit(&mut self, v: &'g str) {
            let n = self.index.len();
            self.index.insert(v, (n, n));
            self.stack.push(v);
            self.on_stack.insert(v);
            let edges = self.graph.get(v).into_iter().flat_map(|e| e.keys());
            for w in edges {
                if !self.index.contains_key(w.as_str()) {
                    self.visit(w);
                    let low = self.index[w.as_str()].1;
                    let e = self.index.get_mut(v).unwrap();
                    e.1 = e.1.min(low);
                } else if self.on_stack.contains(w.as_str()) {
                    let idx = self.index[w.as_str()].0;
                    let e = self.index.get_mut(v).unwrap();
                    e.1 = e.1.min(idx);
                }
            }
            let (idx, low) = self.index[v];
            if idx == low {
                let mut comp = Vec::new();
                loop {
                    let w = self.stack.pop().unwrap();
                    self.on_stack.remove(w);
                    comp.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if comp.len() > 1 {
                    comp.sort();
                    self.out.push(comp);
                }
            }
        }
    }
    let mut t = Tarjan {
        graph,
        index: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !t.index.contains_key(v.as_str()) {
            t.visit(v);
        }
    }
    t.out
}

#[test]
fn the_parser_reads_paths_and_groups() {
    let code = "use crate::a::B;\nuse crate::{b, c::{D, E}, d::f};\nlet x = crate::e::g();\n\
                $crate::log::x!(); // crate::z\n";
    let got: Vec<_> = imports(&code_of(code)).into_iter().collect();
    assert_eq!(got, ["a", "b", "c", "d", "e"]);
}

#[test]
fn imports_point_only_downward_and_form_no_cycle() {
    let graph = graph();
    let mut problems = Vec::new();
    let mut upward = 0;
    for (from, edges) in &graph {
        let Some(lf) = layer_of(from) else {
            problems.push(format!("module `{from}` has no layer in LAYERS"));
            continue;
        };
        println!(
            "{from} ({}) -> {:?}",
            LAYERS[lf].0,
            edges.keys().collect::<Vec<_>>()
        );
        for (to, files) in edges {
            let Some(lt) = layer_of(to) else { continue };
            if lt > lf {
                upward += 1;
                problems.push(format!(
                    "upward import: {from} ({}) -> {to} ({}) in {files:?}",
                    LAYERS[lf].0, LAYERS[lt].0
                ));
            }
        }
    }
    let cycles = cycles(&graph);
    for c in &cycles {
        problems.push(format!("import cycle among {} modules: {c:?}", c.len()));
    }
    println!("{upward} upward edges, {} cycles", cycles.len());
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}
