//! `malloc-debug records FILE`: summary of a record_allocs file
//! (docs/spec/abi.md#line-format):
//! calls per type and per thread, peak live bytes, the most requested sizes, and how long
//! allocations lived.
//!
//! Line shapes (numbers decimal, pointers `0x` hex):
//!   TID: malloc PTR SIZE [START END]
//!   TID: calloc PTR N SIZE [START END]
//!   TID: memalign PTR ALIGN SIZE [START END]
//!   TID: realloc PTR OLD_PTR SIZE [START END [PRESENT]]
//!   TID: free PTR [START END [PRESENT]]
//!   TID: thread_done 0x0 [END]

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use crate::args::{Flag, Spec, number};
use crate::progress::Progress;
use crate::{Error, Result};

pub const TYPES: [&str; 6] = [
    "malloc",
    "calloc",
    "memalign",
    "realloc",
    "free",
    "thread_done",
];

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub tid: u64,
    /// Index into TYPES.
    pub kind: usize,
    pub ptr: u64,
    pub old_ptr: u64,
    /// Bytes requested (calloc: n × size).
    pub size: u64,
    pub start_ns: u64,
    pub end_ns: u64,
}

fn parse_line(line: &str) -> std::result::Result<Entry, String> {
    let (tid, rest) = line
        .split_once(": ")
        .ok_or_else(|| "'<tid>: <type> 0x<ptr> ...'".to_string())?;
    let tid = tid
        .trim()
        .parse::<u64>()
        .map_err(|_| "a decimal thread id before ':'".to_string())?;
    let mut t = rest.split_ascii_whitespace();
    let kind_name = t.next().unwrap_or("");
    let kind = TYPES
        .iter()
        .position(|k| *k == kind_name)
        .ok_or_else(|| format!("a type ({}) after '<tid>: '", TYPES.join(", ")))?;
    let hex = |s: Option<&str>, what: &str| -> std::result::Result<u64, String> {
        s.and_then(|s| s.strip_prefix("0x"))
            .and_then(|s| u64::from_str_radix(s, 16).ok())
            .ok_or_else(|| format!("{what} as 0x<hex> in a {kind_name} line"))
    };
    let dec = |s: Option<&str>, what: &str| -> std::result::Result<u64, String> {
        s.and_then(|s| s.parse::<u64>().ok())
            .ok_or_else(|| format!("{what} as a decimal number in a {kind_name} line"))
    };
    let ptr = hex(t.next(), "the pointer")?;
    let mut e = Entry {
        tid,
        kind,
        ptr,
        old_ptr: 0,
        size: 0,
        start_ns: 0,
        end_ns: 0,
    };
    // (fields, max optional trailing numbers)
    let optional = match kind_name {
        "malloc" => {
            e.size = dec(t.next(), "the size")?;
            2
        }
        "calloc" => {
            let n = dec(t.next(), "the element count")?;
            let size = dec(t.next(), "the element size")?;
            e.size = n.saturating_mul(size);
            2
        }
        "memalign" => {
            dec(t.next(), "the alignment")?;
            e.size = dec(t.next(), "the size")?;
            2
        }
        "realloc" => {
            e.old_ptr = hex(t.next(), "the old pointer")?;
            e.size = dec(t.next(), "the size")?;
            3
        }
        "free" => 3,
        _ => {
            if let Some(end) = t.next() {
                e.end_ns = dec(Some(end), "the end time")?;
            }
            0
        }
    };
    let rest: Vec<&str> = t.collect();
    if rest.len() > optional || rest.len() == 1 {
        return Err(format!(
            "at most {optional} more numbers ('<start_ns> <end_ns>'{}) in a {kind_name} line",
            if optional == 3 {
                " [present bytes]"
            } else {
                ""
            }
        ));
    }
    if rest.len() >= 2 {
        e.start_ns = dec(Some(rest[0]), "the start time")?;
        e.end_ns = dec(Some(rest[1]), "the end time")?;
    }
    if rest.len() == 3 {
        rest[2]
            .parse::<i64>()
            .map_err(|_| format!("present bytes as a number in a {kind_name} line"))?;
    }
    Ok(e)
}

pub fn parse(text: &str) -> Result<Vec<Entry>> {
    let mut progress = Progress::new("reading records", text.len() as u64);
    let mut done = 0u64;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        done += line.len() as u64 + 1;
        if i.is_multiple_of(4096) {
            progress.set(done);
        }
        if line.trim().is_empty() {
            continue;
        }
        let entry = parse_line(line).map_err(|expected| {
            let shown: String = line.chars().take(80).collect();
            Error(format!("{}: expected {expected}, found {shown:?}", i + 1))
        })?;
        out.push(entry);
    }
    Ok(out)
}

/// Live allocations while replaying the file. Sums saturate: a hand-edited file with absurd sizes
/// gives absurd totals, not a panic.
#[derive(Default)]
struct Live {
    /// ptr → (size, end_ns of the allocating call).
    ptrs: HashMap<u64, (u64, u64)>,
    bytes: u64,
}

impl Live {
    fn add(&mut self, ptr: u64, size: u64, born: u64) {
        if ptr == 0 {
            return;
        }
        // A pointer allocated twice without a free in between (records dropped at capacity):
        // the newer allocation replaces the older.
        if let Some((old, _)) = self.ptrs.insert(ptr, (size, born)) {
            self.bytes = self.bytes.saturating_sub(old);
        }
        self.bytes = self.bytes.saturating_add(size);
    }

    /// The allocation time of `ptr`, if it was live.
    fn remove(&mut self, ptr: u64) -> Option<u64> {
        let (size, born) = self.ptrs.remove(&ptr)?;
        self.bytes = self.bytes.saturating_sub(size);
        Some(born)
    }
}

/// Lifetime buckets: upper bounds in ns and their names.
const BUCKETS: [(u64, &str); 7] = [
    (1_000, "< 1 us"),
    (10_000, "< 10 us"),
    (100_000, "< 100 us"),
    (1_000_000, "< 1 ms"),
    (10_000_000, "< 10 ms"),
    (100_000_000, "< 100 ms"),
    (1_000_000_000, "< 1 s"),
];

pub fn summarize(entries: &[Entry], top: usize) -> String {
    let mut per_type = [0u64; 6];
    let mut per_thread: BTreeMap<u64, [u64; 6]> = BTreeMap::new();
    let mut sizes: HashMap<u64, u64> = HashMap::new();
    let mut live = Live::default();
    let (mut peak, mut peak_at) = (0u64, 0usize);
    let mut lifetimes = [0u64; BUCKETS.len() + 1];
    let mut unknown_lifetime = 0u64;
    let mut unmatched_frees = 0u64;
    let mut release = |live: &mut Live, ptr: u64, at_ns: u64| match live.remove(ptr) {
        Some(born) if born == 0 || at_ns == 0 || at_ns < born => unknown_lifetime += 1,
        Some(born) => {
            let life = at_ns - born;
            let b = BUCKETS
                .iter()
                .position(|(limit, _)| life < *limit)
                .unwrap_or(BUCKETS.len());
            lifetimes[b] += 1;
        }
        None => unmatched_frees += 1,
    };
    for (i, e) in entries.iter().enumerate() {
        per_type[e.kind] += 1;
        per_thread.entry(e.tid).or_default()[e.kind] += 1;
        match TYPES[e.kind] {
            "malloc" | "calloc" | "memalign" => {
                *sizes.entry(e.size).or_default() += 1;
                live.add(e.ptr, e.size, e.end_ns);
            }
            "realloc" => {
                if e.old_ptr != 0 {
                    release(&mut live, e.old_ptr, e.start_ns);
                }
                if e.ptr != 0 {
                    *sizes.entry(e.size).or_default() += 1;
                    live.add(e.ptr, e.size, e.end_ns);
                }
            }
            "free" if e.ptr != 0 => release(&mut live, e.ptr, e.start_ns),
            _ => {}
        }
        if live.bytes > peak {
            peak = live.bytes;
            peak_at = i + 1;
        }
    }
    let live_bytes = live.bytes;
    let live = live.ptrs;

    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} records, {} threads",
        entries.len(),
        per_thread.len()
    );
    let _ = writeln!(out, "\nCalls per type:");
    for (k, n) in TYPES.iter().zip(per_type) {
        let _ = writeln!(out, "  {k:<12} {n:>10}");
    }
    let _ = writeln!(out, "\nCalls per thread:");
    let _ = write!(out, "  {:>8}", "TID");
    for k in TYPES {
        let _ = write!(out, " {k:>11}");
    }
    let _ = writeln!(out);
    for (tid, counts) in &per_thread {
        let _ = write!(out, "  {tid:>8}");
        for n in counts {
            let _ = write!(out, " {n:>11}");
        }
        let _ = writeln!(out);
    }
    let _ = writeln!(
        out,
        "\nPeak live bytes: {peak} (after record {peak_at}); live at end: {live_bytes} bytes in {} allocations",
        live.len()
    );
    if unmatched_frees > 0 {
        let _ = writeln!(
            out,
            "Frees of pointers not allocated in this file: {unmatched_frees}"
        );
    }
    let mut top_sizes: Vec<(u64, u64)> = sizes.into_iter().collect();
    top_sizes.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let _ = writeln!(out, "\nTop requested sizes:");
    let _ = writeln!(out, "  {:>12} {:>10}", "SIZE", "CALLS");
    for (size, n) in top_sizes.iter().take(top) {
        let _ = writeln!(out, "  {size:>12} {n:>10}");
    }
    let _ = writeln!(out, "\nLifetimes (allocation end to free start):");
    for (i, n) in lifetimes.iter().enumerate() {
        let name = BUCKETS.get(i).map_or(">= 1 s", |b| b.1);
        let _ = writeln!(out, "  {name:<10} {n:>10}");
    }
    let _ = writeln!(out, "  {:<10} {:>10}", "no times", unknown_lifetime);
    let _ = writeln!(out, "  {:<10} {:>10}", "not freed", live.len());
    out
}

#[derive(Default)]
pub struct Args {
    file: Option<PathBuf>,
    top: Option<usize>,
}

pub const SPEC: Spec<Args> = Spec {
    command: "records",
    operands: "FILE",
    about: "Summary of a record_allocs file: calls by kind, the threads, the biggest sizes,\n\
            the lifetimes and what was never freed.",
    flags: &[Flag {
        name: "top",
        short: None,
        value: Some("N"),
        help: "show the N biggest entries of each table (default 10)",
        set: |a, v| {
            a.top = Some(number(v, "--top")?);
            Ok(())
        },
    }],
    operand: |a: &mut Args, v: OsString, _| {
        if a.file.is_some() {
            return Err(crate::err!(
                "records: unexpected argument {:?}",
                v.to_string_lossy()
            ));
        }
        a.file = Some(v.into());
        Ok(())
    },
};

pub fn main(args: Vec<OsString>) -> Result<ExitCode> {
    let Some(args) = SPEC.parse(args)? else {
        return Ok(ExitCode::SUCCESS);
    };
    let file = args
        .file
        .ok_or_else(|| crate::err!("records: no FILE given"))?;
    let bytes = std::fs::read(&file).map_err(|e| Error(format!("{}: {e}", file.display())))?;
    let text = String::from_utf8_lossy(&bytes);
    let entries = parse(&text).map_err(|e| Error(format!("{}:{}", file.display(), e.0)))?;
    print!("{}", summarize(&entries, args.top.unwrap_or(10)));
    Ok(ExitCode::SUCCESS)
}
