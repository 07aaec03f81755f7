use super::*;
use std::collections::HashMap;
use std::sync::Arc;

fn info(size: u32) -> Info {
    Info {
        size,
        backtrace_id: 0,
    }
}

fn table() -> Box<LiveTable> {
    Box::new(LiveTable::new(never_quiescent))
}

fn all(t: &LiveTable) -> Vec<(usize, Info)> {
    let mut seen = Vec::new();
    t.lock_all().for_each(|p, i| seen.push((p, i)));
    seen.sort_by_key(|e| e.0);
    seen
}

/// Recomputes every overflow count from where the entries are and compares (single-threaded).
fn check_overflow_counts(t: &LiveTable) {
    for s in &t.shards {
        // SAFETY: a shard's table pointer is null or a live table; single-threaded here, so
        // nothing retires it while it is read.
        let Some(table) = (unsafe { s.table.load(Ordering::SeqCst).as_ref() }) else {
            continue;
        };
        let n = table.bucket_count;
        let mut expected = vec![0u32; n];
        for (b, bucket) in table.buckets().iter().enumerate() {
            for slot in &bucket.slots {
                let k = slot.key.load(Ordering::Relaxed);
                if is_key(k) {
                    let mut c = table.home(hash(k));
                    while c != b {
                        expected[c] += 1;
                        c = (c + 1) & (n - 1);
                    }
                }
            }
        }
        let counts: Vec<u32> = table
            .overflow()
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect();
        assert_eq!(counts, expected);
    }
}

#[test]
fn add_get_remove_many() {
    let t = table();
    for i in 1..200_000usize {
        assert!(t.add(i * 16, info(i as u32)));
    }
    assert_eq!(t.lock_all().approximate_len(), 199_999);
    for i in (1..200_000usize).step_by(2) {
        assert_eq!(t.remove(i * 16), Some(info(i as u32)));
    }
    for i in 1..200_000usize {
        let expected = (i % 2 == 0).then(|| info(i as u32));
        assert_eq!(t.get(i * 16), expected, "pointer {}", i * 16);
    }
    assert_eq!(t.remove(16), None);
    check_overflow_counts(&t);
}

#[test]
fn matches_a_model_under_random_operations() {
    let t = table();
    let mut model = HashMap::new();
    let mut x: u64 = 0x1234_5678;
    for _ in 0..300_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        // A small key space so that removals hit, with clustered addresses.
        let p = ((x % 5000) as usize + 1) * 16;
        match x % 3 {
            0 | 1 => {
                if let std::collections::hash_map::Entry::Vacant(e) = model.entry(p) {
                    t.add(p, info((x >> 40) as u32));
                    e.insert(info((x >> 40) as u32));
                }
            }
            _ => assert_eq!(t.remove(p), model.remove(&p)),
        }
    }
    check_overflow_counts(&t);
    let mut expected: Vec<_> = model.into_iter().collect();
    expected.sort_by_key(|e| e.0);
    assert_eq!(all(&t), expected);
}

#[test]
fn misaligned_pointers_are_never_entries() {
    let t = table();
    assert!(t.add(0x1000, info(1)));
    // 0x1001 mangles to the frozen form of 0x1000's key.
    assert!(!t.add(0x1001, info(2)));
    assert_eq!(t.get(0x1001), None);
    assert_eq!(t.remove(0x1001), None);
    assert_eq!(t.get(0x1000), Some(info(1)));
}

#[test]
fn set_info_replaces_an_entry() {
    let t = table();
    t.add(0x2000, info(1));
    assert!(t.set_info(Key::of(0x2000), info(7)));
    assert_eq!(t.get(0x2000), Some(info(7)));
    assert!(!t.set_info(Key::of(0x3000), info(7)));
}

#[test]
fn keys_are_stored_mangled() {
    let t = table();
    t.add(0x1000, info(1));
    let mut keys = Vec::new();
    for s in &t.shards {
        // SAFETY: a shard's table pointer is null or a live table; this test is the only
        // thread using `t`, so nothing retires it while it is read.
        if let Some(table) = unsafe { s.table.load(Ordering::SeqCst).as_ref() } {
            table.for_each(|k, _| keys.push(k));
        }
    }
    assert_eq!(keys, [!0x1000usize]);
}

/// Heap addresses come in strides (16-byte chunks, 4 KiB pages, 64 KiB mmaps): every stride
/// must spread over all shards.
#[test]
fn strided_pointers_spread_over_shards() {
    for stride in [16usize, 48, 4096, 65536, 1 << 20, 1 << 21] {
        let t = table();
        let n = 64 * 1024;
        for i in 0..n {
            t.add(0x5555_0000_0000 + i * stride, info(1));
        }
        let per_shard: Vec<usize> = t.shards.iter().map(|s| s.len.get()).collect();
        let max = *per_shard.iter().max().unwrap();
        assert!(
            max <= 2 * n / SHARDS,
            "stride {stride}: shard sizes {per_shard:?}"
        );
        check_overflow_counts(&t);
    }
}

/// Threads add and remove their own pointers while the shards grow under them: every entry
/// is found exactly while it is live, and the final contents are exact.
#[test]
fn concurrent_adds_removes_and_growth() {
    let nthreads = 4;
    let t: Arc<LiveTable> = Arc::new(LiveTable::new(never_quiescent));
    let threads: Vec<_> = (0..nthreads)
        .map(|id| {
            let t = Arc::clone(&t);
            std::thread::spawn(move || {
                let base = 0x1000_0000 * (id + 1);
                for round in 0..3usize {
                    for i in 0..40_000usize {
                        let p = base + i * 16;
                        assert!(t.add(p, info((i + round) as u32)));
                        assert_eq!(t.get(p), Some(info((i + round) as u32)));
                    }
                    for i in (0..40_000usize).filter(|i| i % 4 != 0) {
                        let p = base + i * 16;
                        assert_eq!(t.remove(p), Some(info((i + round) as u32)), "p {p:#x}");
                        assert_eq!(t.get(p), None);
                    }
                    for i in (0..40_000usize).filter(|i| i % 4 == 0) {
                        assert_eq!(t.remove(base + i * 16), Some(info((i + round) as u32)));
                    }
                }
                for i in 0..1000usize {
                    t.add(base + i * 16, info(i as u32));
                }
            })
        })
        .collect();
    // A whole-table pass meanwhile: holds growth off, inserts go on.
    for _ in 0..20 {
        let locked = t.lock_all();
        let mut n = 0;
        locked.for_each(|_, _| n += 1);
        drop(locked);
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    for th in threads {
        th.join().unwrap();
    }
    assert_eq!(all(&t).len(), 1000 * nthreads);
    check_overflow_counts(&t);
}

/// Retired tables are unmapped once the observer reports quiescence.
#[test]
fn retired_tables_are_reclaimed_when_quiescent() {
    fn always(seen: &mut u32) -> bool {
        *seen = u32::MAX;
        true
    }
    let t = Box::new(LiveTable::new(always));
    for i in 1..100_000usize {
        t.add(i * 16, info(1));
    }
    let retired: usize = t
        .shards
        .iter()
        .map(|s| {
            s.grow
                .lock()
                .retired
                .iter()
                .filter(|r| r.table.is_some())
                .count()
        })
        .sum();
    assert_eq!(retired, 0);
    assert_eq!(t.get(16), Some(info(1)));
}

#[test]
fn two_threads_without_growth() {
    let t: Arc<LiveTable> = Arc::new(LiveTable::new(never_quiescent));
    for i in 0..400_000usize {
        t.add(0x7000_0000_0000 + i * 16, info(1));
    }
    for i in 0..400_000usize {
        t.remove(0x7000_0000_0000 + i * 16);
    }
    let threads: Vec<_> = (0..2usize)
        .map(|id| {
            let t = Arc::clone(&t);
            std::thread::spawn(move || {
                let base = 0x1000_0000 * (id + 1);
                for round in 0..3usize {
                    for i in 0..40_000usize {
                        assert!(t.add(base + i * 16, info((i + round) as u32)));
                    }
                    for i in 0..40_000usize {
                        let p = base + i * 16;
                        assert_eq!(t.remove(p), Some(info((i + round) as u32)), "p {p:#x}");
                    }
                }
            })
        })
        .collect();
    for th in threads {
        th.join().unwrap();
    }
}

/// Blocks next to each other in memory (32 bytes apart and more) get neighbouring home
/// buckets in one shard, so that a run of allocations touches neighbouring cache lines of the
/// table (`hash`): a chunk's blocks share the hash's high bits and differ in its low bits, one
/// step per 32 bytes.
#[test]
fn neighbouring_blocks_get_neighbouring_buckets() {
    let t = table();
    let chunk = 0x5555_0000_0800usize;
    for step in [32usize, 48, 64] {
        let keys: Vec<usize> = (0..2048 / step)
            .map(|i| Key::of(chunk + i * step).0)
            .collect();
        let bases: Vec<u64> = keys.iter().map(|&k| hash(k) & !CHUNK_SLOT_MASK).collect();
        assert!(
            bases.iter().all(|&b| b == bases[0]),
            "step {step}: {bases:?}"
        );
        let steps: Vec<u64> = keys.iter().map(|&k| hash(k) & CHUNK_SLOT_MASK).collect();
        let mut distinct = steps.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), steps.len(), "step {step}: {steps:?}");
        // In a table: each block's home is at most a block's steps from the previous one's.
        t.add(chunk, info(1));
        let s = t.shard(hash(keys[0]));
        // SAFETY: single-threaded; the shard has a table since the add above.
        let table = unsafe { s.table.load(Ordering::SeqCst).as_ref() }.unwrap();
        let homes: Vec<usize> = keys.iter().map(|&k| table.home(hash(k))).collect();
        for w in homes.windows(2) {
            let gap = (w[0] + table.bucket_count - w[1]) % table.bucket_count;
            assert!(gap <= step / 32 + 1, "step {step}: {homes:?}");
        }
        assert!(t.remove(chunk).is_some());
    }
}

/// A shard's count may lose updates to races (`Count`); every growth sets it to the number of
/// entries it copied, so the drift never outlives the table it happened on.
#[test]
fn growth_sets_the_count_to_what_it_copied() {
    let t = table();
    for i in 1..1000usize {
        t.add(i * 16, info(1));
    }
    // Drift every count as lost updates would (down by half).
    for s in &t.shards {
        s.len.set(s.len.get() / 2);
    }
    // Enough more entries that every shard grows at least once after the drift.
    for i in 1000..200_000usize {
        t.add(i * 16, info(1));
    }
    for (k, s) in t.shards.iter().enumerate() {
        let mut exact = 0;
        // SAFETY: this test is the only thread using `t`: nothing retires the table meanwhile.
        if let Some(table) = unsafe { s.table.load(Ordering::SeqCst).as_ref() } {
            table.for_each(|_, _| exact += 1);
        }
        assert_eq!(s.len.get(), exact, "shard {k}");
    }
}
