//! `malloc-debug diff OLD NEW` on two real dumps of leaky.c (10 then 30 small nodes): only
//! small_nodes grew, even though the two runs had different load addresses.

mod common;
use common::*;

#[test]
fn growth_by_site_between_two_real_dumps() {
    let (old, _) = real_dump("diff-old", 10);
    let (new, _) = real_dump("diff-new", 30);
    let text = ok(cli().arg("diff").arg(&old).arg(&new).output().unwrap());
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0], "Total: 12708 -> 13348 bytes (+640), 14 -> 34 allocations (+20)",
        "{text}"
    );
    assert_eq!(lines[1], "1 sites grew, 0 shrank, 2 unchanged", "{text}");
    let row: Vec<&str> = lines[4].split_whitespace().collect();
    assert_eq!(
        &row[..5],
        ["+640", "320", "960", "+20", "small_nodes"],
        "{text}"
    );
    assert!(
        lines[4].ends_with("small_nodes (leaky.c:21)  [leaky]"),
        "{text}"
    );
    assert_eq!(lines.len(), 5, "{text}");

    // Reversed, nothing grew.
    let text = ok(cli().arg("diff").arg(&new).arg(&old).output().unwrap());
    assert!(
        text.contains("0 sites grew, 1 shrank, 2 unchanged\n\nNothing grew.\n"),
        "{text}"
    );
}

#[test]
fn diff_needs_two_readable_dumps() {
    let out = cli().args(["diff", "only-one"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        "malloc-debug: diff: expected two dump files: OLD NEW\n"
    );
    let dir = tmp_dir("diff-bad");
    std::fs::write(dir.join("bad"), "Android Native Heap Dump v9\n").unwrap();
    let out = cli()
        .arg("diff")
        .arg(dir.join("bad"))
        .arg(dir.join("bad"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("bad:1: expected 'Android Native Heap Dump v1.0'"),
        "{}",
        stderr(&out)
    );
}
