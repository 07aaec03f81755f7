//! The check of record_allocs' timestamps against a program's own CLOCK_MONOTONIC reads, shared
//! by the host and Android test crates (included with `#[path]`, as skip_log.rs is).

use std::collections::HashMap;

/// `reads`: the program's lines `clock SIZE BEFORE AFTER`, one per timed malloc of SIZE bytes
/// (sizes distinct); `records`: the record_allocs file. Every timed malloc's entry must start
/// no earlier than BEFORE and end no later than AFTER, each with a microsecond of slack (the
/// library's counter clock is nanoseconds off the kernel's; docs/design.md, "The record_allocs
/// clock"), and end no earlier than it starts. Panics otherwise, or when not all `expected`
/// timed mallocs were found.
pub fn assert_times_within_reads(records: &str, reads: &str, expected: usize) {
    let reads: HashMap<u64, (u64, u64)> = reads
        .lines()
        .filter_map(|l| l.strip_prefix("clock "))
        .map(|rest| {
            let f: Vec<u64> = rest.split(' ').map(|x| x.parse().unwrap()).collect();
            (f[0], (f[1], f[2]))
        })
        .collect();
    assert_eq!(reads.len(), expected, "the program's clock reads");
    let mut checked = 0;
    for line in records.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        if f.get(1) != Some(&"malloc") {
            continue;
        }
        let Some(&(before, after)) = f[3].parse().ok().and_then(|size: u64| reads.get(&size))
        else {
            continue;
        };
        let (start, end): (u64, u64) = (f[4].parse().unwrap(), f[5].parse().unwrap());
        assert!(
            before <= start + 1_000 && start <= end && end <= after + 1_000,
            "{line}: the program read {before} and {after}"
        );
        checked += 1;
    }
    assert_eq!(checked, expected, "timed mallocs found in the records");
}
