//! `malloc-debug records FILE` on hand-written files in the exact format of spec
//! docs/spec/abi.md#line-format (every line shape, with and without timestamps/present bytes).

mod common;
use common::*;

const RECORDS: &str = "\
186: malloc 0xb6038060 20 1000 1500
186: calloc 0xb609f080 32 4 2000 2100
186: memalign 0x85423660 16 104 2200 2300
187: malloc 0xb6040000 4096 2400 2500
186: realloc 0xb603e9a0 0xb609f080 12 3000 3200 4096
186: free 0xb6038060 5000 5100 4096
187: free 0xb6040000 2000000 2000100 4096
186: realloc 0xb6050000 0x0 64 6000 6100
186: realloc 0x0 0xb6050000 0 7000 8000 128
187: malloc 0x0 100
186: free 0x85423660
187: thread_done 0x0 999
";

#[test]
fn summary_of_every_line_shape() {
    let dir = tmp_dir("records");
    let file = dir.join("record_allocs.txt");
    std::fs::write(&file, RECORDS).unwrap();
    let text = ok(cli().arg("records").arg(&file).output().unwrap());
    let expected = "\
12 records, 2 threads

Calls per type:
  malloc                3
  calloc                1
  memalign              1
  realloc               3
  free                  3
  thread_done           1

Calls per thread:
       TID      malloc      calloc    memalign     realloc        free thread_done
       186           1           1           1           3           2           0
       187           2           0           0           0           1           1

Peak live bytes: 4348 (after record 4); live at end: 12 bytes in 1 allocations

Top requested sizes:
          SIZE      CALLS
            12          1
            20          1
            64          1
           100          1
           104          1
           128          1
          4096          1

Lifetimes (allocation end to free start):
  < 1 us              2
  < 10 us             1
  < 100 us            0
  < 1 ms              0
  < 10 ms             1
  < 100 ms            0
  < 1 s               0
  >= 1 s              0
  no times            1
  not freed           1
";
    assert_eq!(text, expected);
    let text = ok(cli()
        .arg("records")
        .arg(&file)
        .args(["--top", "2"])
        .output()
        .unwrap());
    assert!(
        text.contains(
            "SIZE      CALLS\n            12          1\n            20          1\n\nLifetimes"
        ),
        "{text}"
    );
}

fn bad(body: &str) -> String {
    let dir = tmp_dir("records-bad");
    let file = dir.join("r.txt");
    std::fs::write(&file, body).unwrap();
    let out = cli().arg("records").arg(&file).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    stderr(&out).replace(&file.display().to_string(), "FILE")
}

#[test]
fn malformed_records_name_the_line() {
    assert_eq!(
        bad("1: malloc 0x10 8\n1: mallocc 0x10 8\n"),
        "malloc-debug: FILE:2: expected a type (malloc, calloc, memalign, realloc, free, thread_done) after '<tid>: ', found \"1: mallocc 0x10 8\"\n"
    );
    assert_eq!(
        bad("x: malloc 0x10 8\n"),
        "malloc-debug: FILE:1: expected a decimal thread id before ':', found \"x: malloc 0x10 8\"\n"
    );
    assert_eq!(
        bad("1: free 10\n"),
        "malloc-debug: FILE:1: expected the pointer as 0x<hex> in a free line, found \"1: free 10\"\n"
    );
    assert_eq!(
        bad("1: calloc 0x10 4\n"),
        "malloc-debug: FILE:1: expected the element size as a decimal number in a calloc line, found \"1: calloc 0x10 4\"\n"
    );
    assert_eq!(
        bad("1: malloc 0x10 8 1 2 3\n"),
        "malloc-debug: FILE:1: expected at most 2 more numbers ('<start_ns> <end_ns>') in a malloc line, found \"1: malloc 0x10 8 1 2 3\"\n"
    );
}

/// End to end on a record file written by the library for leaky.c (3 x malloc(4096), 10 x
/// malloc(32), calloc(4, 25), nothing freed).
#[test]
fn summary_of_a_real_record_file() {
    let dir = tmp_dir("records-real");
    let file = dir.join("rec.txt");
    let out = cli()
        .arg("run")
        .arg("--options")
        .arg(format!(
            "record_allocs record_allocs_file={} record_allocs_on_exit",
            file.display()
        ))
        .arg("--")
        .arg(leaky())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    // Written at exit as <record file>.<pid>.
    let written = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            p.to_string_lossy()
                .starts_with(&format!("{}.", file.display()))
        })
        .unwrap_or_else(|| panic!("no record file in {}: {}", dir.display(), stderr(&out)));
    let text = ok(cli().arg("records").arg(&written).output().unwrap());
    let count = |section: &str, key: &str| -> u64 {
        text.split(section)
            .nth(1)
            .and_then(|s| s.lines().find(|l| l.split_whitespace().next() == Some(key)))
            .and_then(|l| l.split_whitespace().last())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no {key} under {section}:\n{text}"))
    };
    assert!(count("Calls per type:", "malloc") >= 13, "{text}");
    assert!(count("Calls per type:", "calloc") >= 1, "{text}");
    assert!(count("Top requested sizes:", "4096") >= 3, "{text}");
    assert!(count("Top requested sizes:", "32") >= 10, "{text}");
    let peak: u64 = text
        .split("Peak live bytes: ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert!(peak >= 12708, "{text}");
    assert!(count("Lifetimes", "not") >= 14, "{text}");
}
