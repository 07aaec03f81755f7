//! Per-return-address unwind rules, shared by all threads without locks.
//!
//! A fixed open-addressing table in `.bss` (zero pages until touched). Each slot is a small
//! seqlock: a writer makes the sequence odd, stores the fields, makes it even again; a reader
//! takes the fields only if it saw the same even sequence before and after. Writers that find
//! a slot busy simply skip caching. Every slot carries the loader generation it was computed
//! under (see `cfi::generation`), so a `dlclose` invalidates all entries at once without a sweep.

#[cfg(test)]
use super::rule::from_pair;
use super::rule::{Entry, Packed, to_pair};
use core::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering, fence};

const SLOTS: usize = 4096;
const PROBES: usize = 4;

#[repr(C, align(32))]
struct Slot {
    seq: AtomicU32,
    generation: AtomicU32,
    key: AtomicUsize,
    words: [AtomicU64; 2],
}

impl Slot {
    const fn new() -> Self {
        Slot {
            seq: AtomicU32::new(0),
            generation: AtomicU32::new(0),
            key: AtomicUsize::new(0),
            words: [const { AtomicU64::new(0) }; 2],
        }
    }
}

pub struct RuleCache {
    slots: [Slot; SLOTS],
}

pub static CACHE: RuleCache = RuleCache::new();

/// Generation stored for entries of code that can never be unloaded (modules loaded before
/// `startup`): valid under every generation, so a walk through such code needs no generation
/// check at all. Real generations never take this value.
pub const ANY_GENERATION: u32 = u32::MAX;
/// "Not read yet": matches only ANY_GENERATION entries.
pub const UNKNOWN_GENERATION: u32 = u32::MAX - 1;

/// Home slot: a cheap fold of the address (it is on the walk's critical path: one lookup per
/// frame depends on the return address just read from the stack).
#[inline(always)]
fn home(key: usize) -> usize {
    (key ^ (key >> 12)) & (SLOTS - 1)
}

/// The `i`th slot a key of home slot `h` may occupy: the home slot's aligned group of
/// `PROBES`, its cache-line buddy (32-byte slots) first.
#[inline(always)]
fn probe(h: usize, i: usize) -> usize {
    h ^ i
}

/// Starts a seqlock write (the slots here and the memos of memo.rs): makes the sequence odd.
/// `None` when another writer holds it: the caller skips its write, which is only a cache fill.
pub(super) fn begin_write(seq: &AtomicU32) -> Option<u32> {
    let s = seq.load(Ordering::Relaxed);
    if s & 1 != 0
        || seq
            .compare_exchange(s, s.wrapping_add(1), Ordering::Acquire, Ordering::Relaxed)
            .is_err()
    {
        return None;
    }
    fence(Ordering::Release);
    Some(s)
}

/// Ends a write begun at sequence `s`: readers that saw `s` (or the odd value) retry.
pub(super) fn end_write(seq: &AtomicU32, s: u32) {
    seq.store(s.wrapping_add(2), Ordering::Release);
}

impl RuleCache {
    pub const fn new() -> Self {
        RuleCache {
            slots: [const { Slot::new() }; SLOTS],
        }
    }

    /// The entry for return address `key` computed under `generation`, if cached.
    #[cfg(test)]
    pub fn get(&self, key: usize, generation: u32) -> Option<Entry> {
        self.get_tagged(key, generation)
            .and_then(|(p, _)| Entry::unpack(from_pair(p)))
    }

    /// `get` in packed form, with whether the entry holds in every generation (code that is
    /// never unloaded).
    pub fn get_tagged(&self, key: usize, generation: u32) -> Option<(Packed, bool)> {
        let h = home(key);
        (0..PROBES).find_map(|i| self.read(probe(h, i), key, generation))
    }

    /// Hot-loop lookup: the home slot and its buddy in the same cache line, in registers.
    /// Further probes and misses go through [`get_tagged`](Self::get_tagged) / the slow path.
    /// Two hot return addresses that share a home slot are common (node's start-up: 364,000 of
    /// 452,000 walks met one), and the second must not leave the inline path.
    #[inline(always)]
    pub fn get_home(&self, key: usize, generation: u32) -> Option<(Packed, bool)> {
        let h = home(key);
        self.read(h, key, generation)
            .or_else(|| self.read(probe(h, 1), key, generation))
    }

    /// The slot's words if it holds `key` under `generation` and no writer interfered, and
    /// whether its entry holds in every generation.
    #[inline(always)]
    fn read(&self, idx: usize, key: usize, generation: u32) -> Option<(Packed, bool)> {
        let slot = &self.slots[idx & (SLOTS - 1)];
        let s1 = slot.seq.load(Ordering::Acquire);
        let k = slot.key.load(Ordering::Relaxed);
        let g = slot.generation.load(Ordering::Relaxed);
        let p = (
            slot.words[0].load(Ordering::Relaxed),
            slot.words[1].load(Ordering::Relaxed),
        );
        fence(Ordering::Acquire);
        let s2 = slot.seq.load(Ordering::Relaxed);
        let permanent = g == ANY_GENERATION;
        let ok = (k == key) & ((g == generation) | permanent) & (s1 == s2) & (s1 & 1 == 0);
        ok.then_some((p, permanent))
    }

    /// Caches `entry` for `key`. Takes the first probe slot that is empty, already holds the
    /// key, or holds a stale generation; otherwise replaces the home slot. Gives up (no harm)
    /// if another thread is writing that slot.
    pub fn put(&self, key: usize, generation: u32, entry: Entry) {
        if key == 0 {
            return;
        }
        let h = home(key);
        let mut target = h;
        for i in 0..PROBES {
            let idx = probe(h, i) & (SLOTS - 1);
            let slot = &self.slots[idx];
            let k = slot.key.load(Ordering::Relaxed);
            let g = slot.generation.load(Ordering::Relaxed);
            if k == 0 || k == key || (g != generation && g != ANY_GENERATION) {
                target = idx;
                break;
            }
        }
        let slot = &self.slots[target];
        let Some(s) = begin_write(&slot.seq) else {
            return;
        };
        let p = to_pair(entry.pack());
        slot.key.store(key, Ordering::Relaxed);
        slot.generation.store(generation, Ordering::Relaxed);
        slot.words[0].store(p.0, Ordering::Relaxed);
        slot.words[1].store(p.1, Ordering::Relaxed);
        end_write(&slot.seq, s);
    }

    /// Forgets everything (tests; never needed for correctness thanks to generations).
    #[cfg(test)]
    pub fn clear(&self) {
        for slot in &self.slots {
            slot.key.store(0, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backtrace::rule::{FpRule, Rule};

    fn rule(n: i32) -> Entry {
        Entry::Rule(Rule {
            cfa_fp: n % 2 == 0,
            cfa_off: n,
            ra_off: -8,
            fp: FpRule::At(-16),
            ra_signed: false,
        })
    }

    #[test]
    fn hit_miss_and_generation() {
        let c = Box::new(RuleCache::new());
        assert_eq!(c.get(0x1000, 7), None);
        c.put(0x1000, 7, rule(16));
        assert_eq!(c.get(0x1000, 7), Some(rule(16)));
        // A module load/unload changes the generation: the entry no longer matches.
        assert_eq!(c.get(0x1000, 8), None);
        assert_eq!(c.get(0x1000, UNKNOWN_GENERATION), None);
        // Entries of permanent code match every generation.
        c.put(0x2000, ANY_GENERATION, rule(32));
        assert_eq!(c.get(0x2000, 8), Some(rule(32)));
        assert_eq!(c.get(0x2000, UNKNOWN_GENERATION), Some(rule(32)));
        c.put(0x1000, 8, Entry::End);
        assert_eq!(c.get(0x1000, 8), Some(Entry::End));
        assert_eq!(c.get(0x1000, 7), None);
    }

    #[test]
    fn collisions_keep_newest() {
        let c = Box::new(RuleCache::new());
        for i in 1..20_000usize {
            c.put(i * 16, 1, rule(i as i32));
        }
        let hits = (1..20_000usize)
            .filter(|&i| c.get(i * 16, 1) == Some(rule(i as i32)))
            .count();
        assert!(hits > 2000, "{hits}");
        // Whatever is returned is exactly what was stored for that key.
        for i in 1..20_000usize {
            if let Some(e) = c.get(i * 16, 1) {
                assert_eq!(e, rule(i as i32));
            }
        }
    }

    #[test]
    fn concurrent_readers_never_see_torn_entries() {
        let c: &'static RuleCache = Box::leak(Box::new(RuleCache::new()));
        let writers: Vec<_> = (0..2)
            .map(|t| {
                std::thread::spawn(move || {
                    for round in 0..200_000i32 {
                        let key = 0x4000 + ((round as usize % 64) << 4);
                        let v = (key as i32) * 3 + t;
                        c.put(key, 1, rule(v));
                    }
                })
            })
            .collect();
        let reader = std::thread::spawn(move || {
            for round in 0..400_000usize {
                let key = 0x4000 + ((round % 64) << 4);
                if let Some(Entry::Rule(r)) = c.get(key, 1) {
                    let base = (key as i32) * 3;
                    assert!(r.cfa_off == base || r.cfa_off == base + 1, "torn: {r:?}");
                    assert_eq!(r.cfa_fp, r.cfa_off % 2 == 0);
                }
            }
        });
        for w in writers {
            w.join().unwrap();
        }
        reader.join().unwrap();
    }
}
