//! Unit tests of the backtrace store: interning, collections, concurrent readers.

use super::collect::{ENTRIES_SCANNED_PER_RECORD, MIN_COLLECT_AT, STEP_ENTRIES};
use super::*;

/// A live table whose shards hold `ids` (shard k: the ids at k, k + shards, ...), said to
/// have `entries` entries in all.
struct Ids<'a> {
    ids: &'a [u32],
    shards: usize,
    entries: usize,
}

impl LiveIds for Ids<'_> {
    fn shards(&self) -> usize {
        self.shards
    }

    fn for_each_id(&self, k: usize, f: &mut dyn FnMut(u32)) -> usize {
        self.ids
            .iter()
            .skip(k)
            .step_by(self.shards)
            .for_each(|&id| f(id));
        if k == 0 { self.entries } else { 0 }
    }
}

/// Collects, keeping exactly `keep`.
fn collect_keeping(t: &BacktraceTable, keep: &[u32]) {
    t.collect_all(&Ids {
        ids: keep,
        shards: 1,
        entries: keep.len(),
    });
}

#[test]
fn intern_dedups() {
    let t = Box::new(BacktraceTable::new());
    let a = t.intern(&[1, 2, 3]).unwrap();
    let b = t.intern(&[1, 2, 3]).unwrap();
    let c = t.intern(&[1, 2]).unwrap();
    assert_eq!(a, b);
    assert_ne!(a, c);
    assert!(a >= 2 && c >= 2);
    assert_eq!(t.with_frames(a, |f| f.to_vec()), Some(vec![1, 2, 3]));
    assert_eq!(t.len(), 2);
    assert!(t.intern(&[]).is_none());
    assert!(t.intern(&[0; 257]).is_none());
    assert!(t.intern(&[7; 256]).is_some());
}

#[test]
fn collection_frees_what_is_not_in_use_and_ids_are_never_reused() {
    let t = Box::new(BacktraceTable::new());
    let a = t.intern(&[1, 2, 3]).unwrap();
    let c = t.intern(&[1, 2]).unwrap();
    collect_keeping(&t, &[c, 12345, 0, 1]);
    assert_eq!(t.with_frames(a, |f| f.len()), None);
    assert!(!t.contains(a));
    assert_eq!(t.with_frames(c, |f| f.to_vec()), Some(vec![1, 2]));
    assert_eq!((t.len(), t.records()), (1, 1));
    // Re-interning after the record died gives a new id.
    let d = t.intern(&[1, 2, 3]).unwrap();
    assert_ne!(d, a);
    assert_eq!(t.intern(&[1, 2]), Some(c));
    // Marks do not survive a collection: c is freed by the next one that does not name it.
    collect_keeping(&t, &[d]);
    assert!(!t.contains(c) && t.contains(d));
}

#[test]
fn first_id_is_two() {
    let t = Box::new(BacktraceTable::new());
    let mut ids: Vec<u32> = (0..200usize)
        .map(|i| t.intern(&[i, i + 1]).unwrap())
        .collect();
    ids.sort();
    assert!(ids[0] >= 2);
    ids.dedup();
    assert_eq!(ids.len(), 200);
    // Some shard got the first record: id 2 + shard.
    assert!(ids.iter().any(|&i| (2..2 + SHARDS as u32).contains(&i)));
}

#[test]
fn unknown_ids_are_harmless() {
    let t = Box::new(BacktraceTable::new());
    assert_eq!(t.with_frames(5, |_| ()), None);
    assert!(!t.contains(0) && !t.contains(99));
    collect_keeping(&t, &[0, 1, 99]);
}

#[test]
fn many_records_grow_and_shrink() {
    let t = Box::new(BacktraceTable::new());
    let mut seen = std::collections::HashSet::new();
    let mut ids = vec![];
    for i in 0..50_000usize {
        let frames: Vec<usize> = (0..(i % 20 + 1)).map(|k| i * 31 + k).collect();
        let id = t.intern(&frames).unwrap();
        assert!(seen.insert(id), "id reused");
        ids.push((id, frames));
    }
    assert_eq!(t.len(), 50_000);
    assert!(t.collection_wanted());
    // Keep the odd ones: every probe run of both indexes loses members mid-run.
    let kept: Vec<u32> = ids.iter().skip(1).step_by(2).map(|(id, _)| *id).collect();
    collect_keeping(&t, &kept);
    assert!(!t.collection_wanted());
    assert_eq!((t.len(), t.records()), (25_000, 25_000));
    for (i, (id, frames)) in ids.iter().enumerate() {
        let found = t.with_frames(*id, |f| f == &frames[..]);
        assert_eq!(found, (i % 2 == 1).then_some(true), "record {i}");
        // The frames index agrees: a kept vector interns to its id, a freed one to a new id.
        let again = t.intern(frames).unwrap();
        assert_eq!(again == *id, i % 2 == 1, "record {i}");
    }
    for i in 0..25_000usize {
        let id = t.intern(&[i, 99, 98]).unwrap();
        assert!(seen.insert(id), "id reused");
    }
}

/// Keeps MIN_COLLECT_AT + 1 records through a collection said to have visited `scanned`
/// entries, then counts the new records made until the next collection is wanted.
fn records_until_the_next_collection(scanned: usize) -> usize {
    let t = Box::new(BacktraceTable::new());
    let ids: Vec<u32> = (0..MIN_COLLECT_AT + 1)
        .map(|i| t.intern(&[i, 5]).unwrap())
        .collect();
    assert!(t.collection_wanted());
    t.collect_all(&Ids {
        ids: &ids,
        shards: 1,
        entries: scanned,
    });
    let mut made = 0;
    while !t.collection_wanted() {
        assert!(made < 1 << 20, "no collection wanted");
        t.intern(&[made, 6]).unwrap();
        made += 1;
    }
    made
}

#[test]
fn the_next_collection_waits_for_twice_the_survivors() {
    // Due once the records exceed twice the survivors.
    assert_eq!(records_until_the_next_collection(0), MIN_COLLECT_AT + 2);
}

#[test]
fn after_a_long_pass_the_next_collection_waits_for_records_in_proportion() {
    // One new record per ENTRIES_SCANNED_PER_RECORD entries visited: 3 * MIN_COLLECT_AT,
    // more than the survivors' MIN_COLLECT_AT + 1.
    let scanned = ENTRIES_SCANNED_PER_RECORD * 3 * MIN_COLLECT_AT;
    assert_eq!(
        records_until_the_next_collection(scanned),
        3 * MIN_COLLECT_AT + 1
    );
}

#[test]
fn many_threads_interning() {
    let t: &'static BacktraceTable = Box::leak(Box::new(BacktraceTable::new()));
    let threads: Vec<_> = (0..8usize)
        .map(|th| {
            std::thread::spawn(move || {
                for i in 0..20_000usize {
                    // Half shared among threads, half private.
                    let frames = if i % 2 == 0 {
                        vec![i % 100, 1, 2]
                    } else {
                        vec![th, i, 3, 4]
                    };
                    let id = t.intern(&frames).unwrap();
                    assert_eq!(t.with_frames(id, |f| f == &frames[..]), Some(true));
                }
            })
        })
        .collect();
    for th in threads {
        th.join().unwrap();
    }
    assert_eq!(t.len(), 50 + 8 * 10_000);
    collect_keeping(t, &[]);
    assert_eq!(t.len(), 0);
}

#[test]
fn readers_without_the_lock_never_take_another_vectors_id() {
    // One thread collects everything over and over, so record slots are freed and refilled
    // with other vectors of the same size class while the others look them up without the
    // lock: an id handed out must name the vector asked for (or nothing, once collected).
    let t: &'static BacktraceTable = Box::leak(Box::new(BacktraceTable::new()));
    let done: &'static AtomicBool = Box::leak(Box::new(AtomicBool::new(false)));
    let collector = std::thread::spawn(move || {
        let mut collections = 0u64;
        while !done.load(Ordering::Relaxed) {
            collect_keeping(t, &[]);
            collections += 1;
            // Let the readers at the locks (the shard mutexes are not fair).
            std::thread::sleep(std::time::Duration::from_micros(50));
        }
        collections
    });
    let readers: Vec<_> = (0..4usize)
        .map(|th| {
            std::thread::spawn(move || {
                for i in 0..40_000usize {
                    let frames = [i % 97, th, 3, 4 + i % 5];
                    let id = t.intern(&frames).unwrap();
                    let named = t.with_frames(id, |f| f.to_vec());
                    assert!(
                        named.as_ref().is_none_or(|f| *f == frames),
                        "{id}: {named:?}"
                    );
                }
            })
        })
        .collect();
    for r in readers {
        r.join().unwrap();
    }
    done.store(true, Ordering::Relaxed);
    assert!(collector.join().unwrap() > 0);
}

#[test]
fn lock_raw_then_unlock() {
    let t = Box::new(BacktraceTable::new());
    let id = t.intern(&[5]).unwrap();
    t.lock_raw();
    t.unlock_raw();
    assert!(t.contains(id));
}

/// Runs steps of the collection that is due until it ends; returns how many it took.
fn step_until_idle(t: &BacktraceTable, live: &dyn LiveIds) -> usize {
    let mut steps = 0;
    while t.collection_wanted() {
        t.collect_step(live);
        steps += 1;
        assert!(steps < 10_000, "the collection never ended");
    }
    steps
}

#[test]
fn a_collection_runs_a_step_at_a_time() {
    let t = Box::new(BacktraceTable::new());
    let ids: Vec<u32> = (0..MIN_COLLECT_AT + 1)
        .map(|i| t.intern(&[i, 7]).unwrap())
        .collect();
    assert!(t.collection_wanted());
    let before = t.epoch();
    assert_eq!(before & 1, 0);
    // Keep the even ones, spread over 64 live-table shards.
    let kept: Vec<u32> = ids.iter().copied().step_by(2).collect();
    let live = Ids {
        ids: &kept,
        shards: 64,
        entries: kept.len(),
    };
    t.collect_step(&live);
    // Running: the epoch is odd, and nothing is freed before every shard was marked.
    assert_eq!(t.epoch(), before + 1);
    assert!(t.collection_wanted());
    assert_eq!(t.len(), ids.len());
    let steps = 1 + step_until_idle(&t, &live);
    // One marking step (few entries: all 64 shards at once), then one step per record shard.
    assert_eq!(steps, 1 + SHARDS);
    assert_eq!(t.epoch(), before + 2);
    assert_eq!(t.len(), kept.len());
    for (i, &id) in ids.iter().enumerate() {
        assert_eq!(t.contains(id), i % 2 == 0, "id {id}");
    }
}

/// Shards that each report `entries` entries (and hold no ids).
struct EvenShards {
    shards: usize,
    entries: usize,
}

impl LiveIds for EvenShards {
    fn shards(&self) -> usize {
        self.shards
    }

    fn for_each_id(&self, _k: usize, _f: &mut dyn FnMut(u32)) -> usize {
        self.entries
    }
}

#[test]
fn a_marking_step_stops_before_a_shard_that_would_double_it() {
    let t = Box::new(BacktraceTable::new());
    for i in 0..MIN_COLLECT_AT + 1 {
        t.intern(&[i, 9]).unwrap();
    }
    // Shards just under the step's budget: each step marks one, never two.
    let live = EvenShards {
        shards: 4,
        entries: STEP_ENTRIES * 6 / 10,
    };
    assert!(t.collection_wanted());
    let steps = step_until_idle(&t, &live);
    assert_eq!(steps, live.shards + SHARDS);
    // Small shards are still taken together.
    for i in 0..2 * MIN_COLLECT_AT + 1 {
        t.intern(&[i, 10]).unwrap();
    }
    let small = EvenShards {
        shards: 4,
        entries: STEP_ENTRIES / 10,
    };
    assert!(t.collection_wanted());
    assert_eq!(step_until_idle(&t, &small), 1 + SHARDS);
}

#[test]
fn ids_kept_while_a_collection_runs_survive_it() {
    let t = Box::new(BacktraceTable::new());
    let ids: Vec<u32> = (0..MIN_COLLECT_AT + 1)
        .map(|i| t.intern(&[i, 8]).unwrap())
        .collect();
    // The live table names none of them: the collection would free them all.
    let live = Ids {
        ids: &[],
        shards: 4,
        entries: 0,
    };
    t.collect_step(&live);
    assert_eq!(t.epoch() & 1, 1);
    // Threads store ids (old ones, and a new record made meanwhile) after the pass went by,
    // and keep them, as `tracking::publish` does.
    let new = t.intern(&[1, 2, 3, 4]).unwrap();
    for &id in [ids[0], ids[100], new].iter() {
        assert!(t.keep(id));
    }
    step_until_idle(&t, &live);
    assert!(t.contains(ids[0]) && t.contains(ids[100]) && t.contains(new));
    assert!(!t.contains(ids[1]));
    assert_eq!(t.len(), 3);
    // A freed id cannot be kept: the thread interns its frames again.
    assert!(!t.keep(ids[1]));
    // Marks are per collection: the next one frees what nobody keeps or names.
    for i in 0..MIN_COLLECT_AT {
        t.intern(&[i, 9]).unwrap();
    }
    collect_keeping(&t, &[new]);
    assert!(!t.contains(ids[0]) && t.contains(new));
}

#[test]
fn a_pin_holds_off_every_sweep() {
    let t = Box::new(BacktraceTable::new());
    let ids: Vec<u32> = (0..MIN_COLLECT_AT + 1)
        .map(|i| t.intern(&[i, 10]).unwrap())
        .collect();
    let live = Ids {
        ids: &[],
        shards: 1,
        entries: 0,
    };
    // Pinned in the middle of a collection: it is abandoned, nothing freed.
    t.collect_step(&live);
    t.collect_step(&live);
    let freed_before_the_pin = ids.len() - t.len();
    t.pin();
    step_until_idle(&t, &live);
    assert_eq!(t.epoch() & 1, 0);
    assert_eq!(ids.len() - t.len(), freed_before_the_pin);
    // No collection starts while pinned.
    for i in 0..4 * MIN_COLLECT_AT {
        t.intern(&[i, 11]).unwrap();
    }
    let held = t.len();
    step_until_idle(&t, &live);
    assert_eq!(t.len(), held);
    t.unpin();
    collect_keeping(&t, &[]);
    assert_eq!(t.len(), 0);
}

/// The publishing protocol of `tracking::publish` against a live table of atomics: threads
/// keep replacing entries with ids of ever new vectors while others step collections; no entry
/// may ever name a freed record once its thread's publish is done.
#[test]
fn threads_publishing_while_collections_step_never_lose_an_id() {
    use std::sync::atomic::AtomicU32 as Slot;
    const THREADS: usize = 4;
    const SLOTS: usize = 256;
    let t: &'static BacktraceTable = Box::leak(Box::new(BacktraceTable::new()));
    let table: &'static [Slot] = Box::leak((0..THREADS * SLOTS).map(|_| Slot::new(0)).collect());
    struct Live(&'static [Slot]);
    impl LiveIds for Live {
        fn shards(&self) -> usize {
            8
        }
        fn for_each_id(&self, k: usize, f: &mut dyn FnMut(u32)) -> usize {
            let part = self.0.len() / 8;
            for s in &self.0[k * part..(k + 1) * part] {
                f(s.load(Ordering::SeqCst));
            }
            part
        }
    }
    let threads: Vec<_> = (0..THREADS)
        .map(|th| {
            std::thread::spawn(move || {
                for i in 0..20_000usize {
                    let slot = &table[th * SLOTS + i % SLOTS];
                    let frames = [th, i, 77];
                    // publish: epoch, intern, store, then keep (or intern again) while a
                    // collection overlapped.
                    let mut before = t.epoch();
                    let mut id = t.intern(&frames).unwrap();
                    slot.store(id, Ordering::SeqCst);
                    loop {
                        let now = t.epoch();
                        if (now == before && now & 1 == 0) || t.keep(id) {
                            break;
                        }
                        before = now;
                        id = t.intern(&frames).unwrap();
                        slot.store(id, Ordering::SeqCst);
                    }
                    // Published: the record must outlive any collection while it is stored.
                    if t.collection_wanted() {
                        t.collect_step(&Live(table));
                    }
                    let back = slot.load(Ordering::SeqCst);
                    assert_eq!(
                        t.with_frames(back, |f| f == frames),
                        Some(true),
                        "thread {th} call {i}: id {back} lost"
                    );
                }
            })
        })
        .collect();
    for th in threads {
        th.join().unwrap();
    }
    assert!(t.epoch() >= 4, "collections ran: epoch {}", t.epoch());
}
