//! The repository stands alone: no comment or document cites a document that lives outside it,
//! and every citation of an in-repo document names a file that exists and, with `#anchor`, a
//! section that exists (a heading's GitHub anchor or an explicit `<a id>`); a citation
//! `FILE.md, "Section"` names text the file contains. Code comments cite the behaviour in
//! docs/spec/ by anchor (`docs/spec/options.md#guard`), so renaming a heading there without
//! updating its citations fails here.
//!
//! Plain std, no library under test: scans the source tree from the manifest directory.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

/// Where citations are looked for (relative to the repository root).
const SCANNED: &[&str] = &[
    "src",
    "ffi",
    "tools",
    "tests",
    "scripts",
    "benches",
    "android",
    "examples",
    "docs",
    ".ci",
    "README.md",
    "build.rs",
    "Cargo.toml",
    "Android.bp",
];

/// Names of documents outside the repository (the project's former shared notes). Split so that
/// this file does not cite them itself.
fn outside_names() -> Vec<String> {
    [
        ["../sha", "red"],
        ["/work/sha", "red"],
        ["DESIGN", ".md"],
        ["DESIGN ", "§"],
        ["abi-and-", "dumps"],
        ["options-and-", "errors"],
        ["current-", "aosp"],
        ["ANDROID-TEST", "BEDS"],
    ]
    .iter()
    .map(|p| p.concat())
    .collect()
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn collect(path: &Path, out: &mut Vec<PathBuf>) {
    if path.is_dir() {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name == "target" || name == "node_modules" || name.starts_with(".git") {
            return;
        }
        let mut entries: Vec<_> = fs::read_dir(path)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for e in entries {
            collect(&e, out);
        }
    } else if path.is_file() {
        out.push(path.to_path_buf());
    }
}

/// GitHub's anchor for a heading: lower case; letters, digits, `-` and `_` kept, spaces become
/// `-`, everything else dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors a Markdown file defines.
fn anchors(text: &str) -> Vec<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        if let Some(rest) = line.strip_prefix('#') {
            let heading = rest.trim_start_matches('#');
            if heading.starts_with(' ') {
                let base = slug(heading);
                let n = seen.entry(base.clone()).or_insert(0);
                out.push(if *n == 0 {
                    base.clone()
                } else {
                    format!("{base}-{n}")
                });
                *n += 1;
            }
        }
        for marker in ["<a id=\"", "<a name=\""] {
            let mut rest = line;
            while let Some(i) = rest.find(marker) {
                rest = &rest[i + marker.len()..];
                if let Some(end) = rest.find('"') {
                    out.push(rest[..end].to_string());
                }
            }
        }
    }
    out
}

fn is_path_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/')
}

fn is_anchor_char(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '_' | '-')
}

/// One citation of an in-repo document found in a line.
#[derive(Debug)]
struct Citation {
    path: String,
    anchor: Option<String>,
    /// `FILE.md, "Section"`: the quoted text.
    section: Option<String>,
    /// A Markdown link target (resolved against the citing file's directory).
    link: bool,
}

fn citations(line: &str, markdown: bool) -> Vec<Citation> {
    let mut out = Vec::new();
    let chars: Vec<(usize, char)> = line.char_indices().collect();
    let mut search = 0;
    while let Some(found) = line[search..].find(".md") {
        let end = search + found + 3;
        search = end;
        // The path: path characters before ".md", and ".md" not followed by more of them.
        if line[end..]
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric())
        {
            continue;
        }
        let Some(pos) = chars.iter().position(|&(i, _)| i == search - 3) else {
            continue;
        };
        let mut start = pos;
        while start > 0 && is_path_char(chars[start - 1].1) {
            start -= 1;
        }
        let begin = chars[start].0;
        let path = &line[begin..end];
        // URLs and absolute paths are not citations of this repository.
        let token_start = line[..begin]
            .rfind(|c: char| c.is_whitespace() || c == '<' || c == '(' || c == '`')
            .map_or(0, |i| i + 1);
        if line[token_start..end].contains("://") || path.starts_with('/') || path == ".md" {
            continue;
        }
        let link = line[..begin].ends_with("](");
        // Outside Markdown, only paths (`docs/x.md`) and the README are citations: a bare name
        // there is a string the code handles (e.g. a link parser's test input).
        if !markdown && !path.contains('/') && path != "README.md" {
            continue;
        }
        let mut anchor = None;
        if let Some(rest) = line[end..].strip_prefix('#') {
            let a: String = rest.chars().take_while(|&c| is_anchor_char(c)).collect();
            anchor = Some(a);
        }
        let mut section = None;
        if let Some(rest) = line[end..].strip_prefix(", \"")
            && let Some(close) = rest.find('"')
        {
            section = Some(rest[..close].to_string());
        }
        out.push(Citation {
            path: path.to_string(),
            anchor,
            section,
            link,
        });
    }
    out
}

/// Is `§` on this line a section of an issue (`issue 21 §2`), the only use allowed?
fn section_sign_allowed(line: &str) -> bool {
    let mut rest = line;
    while let Some(i) = rest.find('§') {
        let before = rest[..i].trim_end();
        let words: Vec<&str> = before.rsplit(' ').take(2).collect();
        let is_issue = words.len() == 2
            && words[0]
                .chars()
                .all(|c| c.is_ascii_digit() || c == '.' || c == '#')
            && !words[0].is_empty()
            && words[1]
                .trim_start_matches(|c: char| !c.is_alphanumeric())
                .eq_ignore_ascii_case("issue");
        if !is_issue {
            return false;
        }
        rest = &rest[i + '§'.len_utf8()..];
    }
    true
}

fn normalise(s: &str) -> String {
    s.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

/// Every problem of `text` (the contents of `file`), as `file:line: what` strings.
fn check_text(root: &Path, file: &Path, text: &str) -> Vec<String> {
    let rel = file
        .strip_prefix(root)
        .unwrap_or(file)
        .display()
        .to_string();
    let outside = outside_names();
    let markdown = file.extension().is_some_and(|e| e == "md");
    let mut problems = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let at = format!("{rel}:{}", n + 1);
        for name in &outside {
            if line.contains(name.as_str()) {
                problems.push(format!(
                    "{at}: cites `{name}`, a document outside the repository"
                ));
            }
        }
        if !section_sign_allowed(line) {
            problems.push(format!(
                "{at}: `§` cites a section of a document outside the repository (cite docs/spec/FILE.md#anchor)"
            ));
        }
        for c in citations(line, markdown) {
            let dir = file.parent().unwrap_or(root);
            let candidates = if c.link {
                vec![dir.join(&c.path)]
            } else {
                vec![root.join(&c.path), dir.join(&c.path)]
            };
            let Some(target) = candidates.into_iter().find(|p| p.is_file()) else {
                problems.push(format!("{at}: cites {}, which does not exist", c.path));
                continue;
            };
            let Ok(target_text) = fs::read_to_string(&target) else {
                continue;
            };
            if let Some(anchor) = &c.anchor
                && !anchor.is_empty()
                && !anchors(&target_text).iter().any(|a| a == anchor)
            {
                problems.push(format!(
                    "{at}: cites {}#{anchor}, but {} has no such section",
                    c.path, c.path
                ));
            }
            if let Some(section) = &c.section
                && !normalise(&target_text).contains(&normalise(section))
            {
                problems.push(format!(
                    "{at}: cites {}, \"{section}\", which {} does not contain",
                    c.path, c.path
                ));
            }
        }
    }
    problems
}

#[test]
fn every_citation_points_into_the_repository() {
    let root = root();
    let mut files = Vec::new();
    for p in SCANNED {
        collect(&root.join(p), &mut files);
    }
    let this = root.join("tests/repo_stands_alone.rs");
    let mut problems = Vec::new();
    let mut scanned = 0;
    for file in files.iter().filter(|f| **f != this) {
        let Ok(text) = fs::read_to_string(file) else {
            continue; // binary
        };
        scanned += 1;
        problems.extend(check_text(&root, file, &text));
    }
    assert!(
        scanned > 100,
        "only {scanned} files scanned from {}",
        root.display()
    );
    assert!(
        problems.is_empty(),
        "{} citation problem(s):\n{}",
        problems.len(),
        problems.join("\n")
    );
}

/// The checker itself catches each kind of bad citation (and accepts the good ones).
#[test]
fn planted_bad_citations_are_caught() {
    let root = root();
    let file = root.join("src/lib.rs");
    let check = |line: &str| check_text(&root, &file, line);
    for good in [
        "// docs/spec/options.md#guard",
        "// (docs/spec/errors.md#guard-corruption; README.md)",
        "// docs/design.md, \"The signal-33 rule\"",
        "// issue 21 §2",
        "// (issue 21 §2)",
        "// https://android.googlesource.com/platform/bionic/+/main/libc/malloc_debug/README.md",
    ] {
        assert_eq!(check(good), Vec::<String>::new(), "{good}");
    }
    let spec_section = ["spec ", "§7.5"].concat();
    let outside = ["../shared/", "ANDROID-TESTBEDS.md"].concat();
    for bad in [
        format!("// ({spec_section})"),
        format!("// see {outside}"),
        "// docs/spec/options.md#no-such-option".to_string(),
        "// docs/spec/no-such-page.md".to_string(),
        "// docs/design.md, \"No such section\"".to_string(),
    ] {
        assert!(!check(&bad).is_empty(), "not caught: {bad}");
    }
    let md = root.join("docs/spec/README.md");
    assert!(check_text(&root, &md, "[x](options.md#guard)").is_empty());
    assert!(!check_text(&root, &md, "[x](options.md#guardd)").is_empty());
}
