//! The documentation's links to files of the repository (images included) resolve: docs/tools.md
//! once linked a screenshot that was not there. Screenshots are made by the tests that drive the
//! page they show (docs/report.png: html_chromium with MALLOC_DEBUG_SCREENSHOT set).

mod common;
use common::*;

/// `](target)` links of a Markdown text, without `#anchors`; web and mail links left out.
fn local_links(text: &str) -> Vec<String> {
    text.split("](")
        .skip(1)
        .filter_map(|rest| rest.split_once(')').map(|(t, _)| t))
        .map(|t| t.split('#').next().unwrap_or("").trim().to_string())
        .filter(|t| !t.is_empty() && !t.contains("://") && !t.starts_with("mailto:"))
        .collect()
}

#[test]
fn every_local_link_of_the_docs_resolves() {
    let root = workspace_root();
    let mut docs = vec![root.join("README.md")];
    for e in std::fs::read_dir(root.join("docs")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "md") {
            docs.push(p);
        }
    }
    let mut broken = Vec::new();
    let mut images = 0;
    for doc in &docs {
        let text = std::fs::read_to_string(doc).unwrap();
        for link in local_links(&text) {
            images += usize::from(link.ends_with(".png"));
            if !doc.parent().unwrap().join(&link).exists() {
                broken.push(format!("{}: {link}", doc.display()));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
    assert!(
        images >= 2,
        "README.md and docs/tools.md show docs/report.png"
    );
}

#[test]
fn links_are_found() {
    assert_eq!(
        local_links("a ![x](report.png) b [y](https://e.org/) [z](tools.md#run) [w](#top)"),
        ["report.png", "tools.md"]
    );
}
