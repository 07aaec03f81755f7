//! The live-pointer table: user pointer → (size with zygote bit, backtrace id).
//!
//! ## Model
//!
//! Built for millions of entries, many allocating threads, and bionic's backtrace signal: a
//! thread that another thread of the process unwinds (signal 33) is parked inside its signal
//! handler for as long as the unwind takes, wherever it was, and the unwinding thread allocates
//! meanwhile. So the hot path (add, remove, get) takes **no lock**: a parked thread can leave a
//! slot half-claimed, but never a lock that someone else waits for (docs/design.md, "The
//! signal-33 rule").
//!
//! 64 shards, each an open-addressing table of 4-slot buckets, one cache line each, in memory
//! mapped straight from the kernel. A slot is two words, a key and an info, each atomic. An
//! entry whose home bucket is full goes to the next bucket with room, and every bucket it
//! passes counts it in `overflow`: a lookup goes on to the next bucket only while that count is
//! non-zero, and a removal gives the counts back, so the table needs no tombstones.
//!
//! A key word is one of:
//! - `EMPTY` (0), `RESERVED` (an insert claimed the slot and is writing the info),
//! - a mangled pointer (XOR all-ones, as the reference stores them, so that a conservative
//!   scanner reading our tables does not see references that keep leaked blocks reachable);
//!   pointers are 8-aligned, so mangled keys end in binary 111,
//! - a *frozen* key (the mangled key with bit 0 cleared) or `FROZEN_FREE`: written by growth.
//!
//! An insert claims a slot by CAS (`EMPTY` → `RESERVED`), writes the info, then publishes the
//! key by CAS (`RESERVED` → key). A removal reads the info and clears the key by CAS.
//!
//! **Growth** is rare and runs under the shard's grow lock, taken with the backtrace signal
//! blocked (so a thread that waits for it waits for a thread that cannot be parked). The grower
//! freezes every slot of the old table by CAS, copies the frozen entries into a new table and
//! publishes it. A hot-path operation that meets a frozen slot knows a grower is at work and
//! waits for the new table (allowed: the grower cannot be parked); a CAS that loses against a
//! freeze retries on the new table. An insert that published before the freeze is copied.
//!
//! **Old tables** may still be read by threads that loaded the table pointer before it
//! changed. They are unmapped only once every thread that was inside a library call at the
//! time has left it: the `Quiescence` observer given to the table (the library's call gate)
//! says so; until then they wait on a list, and nobody waits for them.
//!
//! **Whole-table passes** (leak reports, dumps, collections) hold every grow lock, so the
//! tables they read stay current; entries added or removed meanwhile by other threads may or
//! may not be seen, exactly as if the pass had run a moment earlier or later.

mod table;

use crate::mutex::{Mutex, MutexGuard};
use core::ptr::NonNull;
use core::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use table::{Attempt, Table, is_key};

const SHARD_BITS: u32 = 6;
/// Shards of the table (passes that go one shard at a time: collections of backtrace records).
pub const SHARDS: usize = 1 << SHARD_BITS;
const WAYS: usize = 4;
/// Buckets of a shard's first table.
const INITIAL_BUCKETS: usize = 32;
/// Below this many buckets a shard grows fourfold, above it twofold. Each growth maps a table,
/// copies the shard and later unmaps the old one (system calls, page faults, a TLB shootdown);
/// a program that reaches tens of thousands of live blocks in its first milliseconds paid most
/// of its start-up slowdown in 256 such growths. Growing faster while the tables are small
/// halves their number for a few hundred kilobytes of slack at most (1024 buckets: 4,096
/// slots a shard, about 160,000 live blocks in all).
const FAST_GROWTH_BELOW: usize = 1024;
/// A shard grows when an insert would fill more than MAX_LOAD_NUM/MAX_LOAD_DEN of its slots.
const MAX_LOAD_NUM: usize = 5;
const MAX_LOAD_DEN: usize = 8;
/// While another thread holds the grow lock (a whole-table pass), inserts go on without growing
/// up to this fill; past it they wait for the lock.
const HARD_LOAD_NUM: usize = 7;
/// Retired tables a shard keeps before it stops growing (each growth retires one).
const RETIRED_MAX: usize = 48;

/// What the table remembers of one live allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Info {
    /// Requested size, with bit 31 set for allocations made in a zygote child.
    pub size: u32,
    /// 0 = capture off, 1 = attempted but nothing recorded, ≥ 2 = interned backtrace.
    pub backtrace_id: u32,
}

impl Info {
    fn pack(self) -> u64 {
        u64::from(self.size) | (u64::from(self.backtrace_id) << 32)
    }

    fn unpack(v: u64) -> Info {
        Info {
            size: v as u32,
            backtrace_id: (v >> 32) as u32,
        }
    }
}

fn mangle(pointer: usize) -> usize {
    pointer ^ usize::MAX
}

/// A pointer as the table stores it (mangled). Code that runs deep in the stack while adding an
/// entry is given only this, so that the dead stack it leaves behind holds no copy of the
/// pointer for a conservative scan to find.
#[derive(Clone, Copy)]
pub struct Key(usize);

impl Key {
    pub fn of(pointer: usize) -> Key {
        Key(mangle(pointer))
    }

    /// The mangling of keys, for a caller that keeps a pointer the same way outside the table
    /// (its own inverse).
    pub fn mangle(value: usize) -> usize {
        mangle(value)
    }

    /// Pointers that are not 8-aligned are never in the table (and their mangled form could
    /// collide with a frozen key).
    fn valid(self) -> bool {
        is_key(self.0)
    }
}

/// A key's hash: the shard (top `SHARD_BITS`) and the base of its home bucket come from the
/// 2 KiB chunk of address space the block is in, the low `CHUNK_SLOT_BITS` from where in the
/// chunk it is (one step per 32 bytes, the smallest spacing of two heap blocks in glibc and
/// bionic; `Table::home` adds them to the base). Blocks allocated one after another are
/// neighbours in memory, so their entries land in neighbouring buckets, whose cache lines a
/// run of inserts (or of removals) then finds warm or prefetched: with one random bucket per
/// block, a program that reaches 20,000 blocks in a few milliseconds spent a sixth of its time
/// waiting for the table's cache lines. No bucket gets more than one block of a chunk.
///
/// The chunk is hashed by two rounds of multiplicative hashing. One round (Fibonacci hashing)
/// spreads small strides perfectly but folds strides of 64 KiB and more (mmapped blocks) onto a
/// few buckets, since a product's high bits only depend on the bits below them; folding the
/// first product's high half down and multiplying again makes every stride look random.
fn hash(key: usize) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let x = ((key >> CHUNK_SHIFT) as u64).wrapping_mul(K);
    let chunk = (x ^ (x >> 32)).wrapping_mul(K);
    (chunk & !CHUNK_SLOT_MASK) | ((key >> SLOT_SHIFT) as u64 & CHUNK_SLOT_MASK)
}

/// 32-byte steps inside a chunk.
const SLOT_SHIFT: u32 = 5;
/// 2 KiB chunks: 64 steps, so a chunk's blocks spread over up to 64 buckets.
const CHUNK_SHIFT: u32 = 11;
const CHUNK_SLOT_MASK: u64 = (1 << (CHUNK_SHIFT - SLOT_SHIFT)) - 1;

/// Says when tables that threads may still be reading can be unmapped: `observe` ORs into
/// `seen` one bit for each place where no reader is inside now, and returns true once every
/// place has been seen empty.
pub type Quiescence = fn(seen: &mut u32) -> bool;

/// Never reclaims (tests, where readers are not counted by any gate).
#[cfg(test)]
pub fn never_quiescent(_: &mut u32) -> bool {
    false
}

#[derive(Clone, Copy)]
struct Retired {
    table: Option<NonNull<Table>>,
    seen: u32,
}

/// What the grow lock protects: tables retired but perhaps still read.
struct GrowState {
    retired: [Retired; RETIRED_MAX],
}

// SAFETY: the retired tables are owned by the shard and handled only under its grow lock.
unsafe impl Send for GrowState {}

#[repr(align(64))]
struct Shard {
    table: AtomicPtr<Table>,
    /// Entries, approximately: see `Count`.
    len: Count,
    grow: Mutex<GrowState>,
}

/// A shard's entry count, for the growth decision (and the sizing of whole-table copies) only.
/// Updated with a plain load and store, not an atomic add: every thread touches every shard, and
/// an atomic add on a line the other core just wrote stalls until the line comes over (alloc_mix
/// on two threads, leak_track, 4M calls: 0.49 s with the adds, 0.44 s without; docs/
/// performance.md). Two threads updating the same shard at once may lose an update, so the
/// count drifts a little; each growth sets it to the exact number it copied. Its own cache line,
/// so that its stores do not take away the line of `table`, which every call reads.
#[repr(align(64))]
struct Count(AtomicUsize);

impl Count {
    const fn new() -> Self {
        Count(AtomicUsize::new(0))
    }

    fn get(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }

    fn set(&self, n: usize) {
        self.0.store(n, Ordering::Relaxed);
    }

    fn up(&self) {
        self.set(self.get().saturating_add(1));
    }

    fn down(&self) {
        self.set(self.get().saturating_sub(1));
    }
}

pub struct LiveTable {
    shards: [Shard; SHARDS],
    quiescence: Quiescence,
}

/// Waits until `shard`'s table is no longer `seen` (a grower is at work: it holds the grow
/// lock with the backtrace signal blocked, so it will finish).
fn wait_for_new_table(shard: &Shard, seen: *mut Table) {
    let mut spins = 0u32;
    while shard.table.load(Ordering::SeqCst) == seen {
        spins += 1;
        if spins < 64 {
            core::hint::spin_loop();
        } else {
            // SAFETY: sched_yield has no preconditions.
            unsafe { libc::sched_yield() };
        }
    }
}

impl LiveTable {
    pub const fn new(quiescence: Quiescence) -> Self {
        LiveTable {
            shards: [const {
                Shard {
                    table: AtomicPtr::new(core::ptr::null_mut()),
                    len: Count::new(),
                    grow: Mutex::new(GrowState {
                        retired: [Retired {
                            table: None,
                            seen: 0,
                        }; RETIRED_MAX],
                    }),
                }
            }; SHARDS],
            quiescence,
        }
    }

    fn shard(&self, h: u64) -> &Shard {
        &self.shards[(h >> (64 - SHARD_BITS)) as usize]
    }

    #[cfg(test)]
    pub fn add(&self, pointer: usize, info: Info) -> bool {
        self.add_key(Key::of(pointer), info)
    }

    /// Records a live allocation. Returns false if the table could not grow (out of address
    /// space) and the entry is not recorded.
    pub fn add_key(&self, key: Key, info: Info) -> bool {
        if !key.valid() {
            return false;
        }
        let h = hash(key.0);
        let shard = self.shard(h);
        loop {
            let t = shard.table.load(Ordering::SeqCst);
            // SAFETY: a published table stays mapped while this call runs (see `Quiescence`).
            let Some(table) = (unsafe { t.as_ref() }) else {
                if !self.grow(shard, t, true) {
                    return false;
                }
                continue;
            };
            let len = shard.len.get() + 1;
            if len * MAX_LOAD_DEN > table.capacity() * MAX_LOAD_NUM {
                let must = len * MAX_LOAD_DEN > table.capacity() * HARD_LOAD_NUM;
                if !self.grow(shard, t, must) && must {
                    return false;
                }
                if shard.table.load(Ordering::SeqCst) != t {
                    continue;
                }
            }
            match table.insert(key.0, h, info.pack()) {
                Attempt::Done(()) => {
                    shard.len.up();
                    return true;
                }
                // A grower froze the table (growing again finds the new one under the lock and
                // returns), or the table was full while growth was held off.
                Attempt::Frozen => {
                    if shard.table.load(Ordering::SeqCst) == t && !self.grow(shard, t, true) {
                        return false;
                    }
                }
            }
        }
    }

    /// Starts loading the home bucket of `pointer` (docs/design.md, "Live-allocation table"):
    /// the caller adds or removes it after some other work (writing a header and guards,
    /// checking a header), and the bucket's cache miss, the larger part of tracking's cost on a
    /// heap bigger than the cache, overlaps that work instead of following it. Call inside a
    /// library call (the current table stays mapped meanwhile).
    #[inline(always)]
    pub fn prefetch(&self, pointer: usize) {
        let key = Key::of(pointer);
        if !key.valid() {
            return;
        }
        let h = hash(key.0);
        let t = self.shard(h).table.load(Ordering::Relaxed);
        // SAFETY: a published table stays mapped while this call runs (see `Quiescence`).
        if let Some(table) = unsafe { t.as_ref() } {
            crate::platform::prefetch(table.bucket_address(h));
        }
    }

    pub fn remove(&self, pointer: usize) -> Option<Info> {
        let (found, shard) =
            self.on_current_table(Key::of(pointer), |t, key, h| t.remove(key, h))?;
        if found.is_some() {
            shard.len.down();
        }
        found
    }

    pub fn get(&self, pointer: usize) -> Option<Info> {
        self.on_current_table(Key::of(pointer), |t, key, h| t.get(key, h))?
            .0
    }

    /// Replaces the info of a live entry that the caller owns (it added it and has not yet
    /// handed the pointer out). False when the entry is not there.
    pub fn set_info(&self, key: Key, info: Info) -> bool {
        self.on_current_table(key, |t, key, h| t.set_info(key, h, info.pack()))
            .is_some_and(|(found, _)| found)
    }

    /// Runs `op` on the shard's current table until no grower gets in its way (waiting for the
    /// grower, who cannot be parked); its result and the key's shard. `None` when the key
    /// cannot be in the table (misaligned pointer) or the shard has no table yet.
    fn on_current_table<T>(
        &self,
        key: Key,
        mut op: impl FnMut(&Table, usize, u64) -> Attempt<T>,
    ) -> Option<(T, &Shard)> {
        if !key.valid() {
            return None;
        }
        let h = hash(key.0);
        let shard = self.shard(h);
        loop {
            let t = shard.table.load(Ordering::SeqCst);
            // SAFETY: as in `add_key`.
            let table = unsafe { t.as_ref() }?;
            match op(table, key.0, h) {
                Attempt::Done(found) => return Some((found, shard)),
                Attempt::Frozen => wait_for_new_table(shard, t),
            }
        }
    }

    /// Replaces `seen` with a table four or two times its size (`FAST_GROWTH_BELOW`), or the
    /// first one. `wait`: take the grow lock even if another thread holds it; otherwise give up
    /// at once. True when the shard's table is no longer `seen` afterwards (grown by us or by
    /// someone else).
    #[cold]
    #[inline(never)]
    fn grow(&self, shard: &Shard, seen: *mut Table, wait: bool) -> bool {
        // Marked and with the backtrace signal blocked: a thread waiting for this lock (or for
        // the freeze to end) then never waits for a parked thread.
        let _slow = crate::sync::DisabledScope::enter();
        let guard = if wait {
            Some(shard.grow.lock())
        } else {
            shard.grow.try_lock()
        };
        let Some(mut state) = guard else {
            return false;
        };
        if shard.table.load(Ordering::SeqCst) != seen {
            return true;
        }
        let Some(slot) = state.retired.iter().position(|r| r.table.is_none()) else {
            self.reclaim(&mut state);
            return false;
        };
        // SAFETY: `seen` is the current table (checked under the lock), mapped.
        let old = unsafe { seen.as_ref() };
        let new_count = old.map_or(INITIAL_BUCKETS, |t| {
            let factor = if t.bucket_count < FAST_GROWTH_BELOW {
                4
            } else {
                2
            };
            t.bucket_count * factor
        });
        let Some(new) = Table::map(new_count) else {
            return false;
        };
        if let Some(old) = old {
            old.freeze_all();
            // SAFETY: `new` is ours alone until published below.
            let fresh = unsafe { new.as_ref() };
            let mut copied = 0;
            old.for_each_frozen(|key, info| {
                // Cannot be frozen or full: private, and at most half as full as `old`.
                let _ = fresh.insert(key, hash(key), info);
                copied += 1;
            });
            // Exact here: nothing can be added to or removed from a frozen table.
            shard.len.set(copied);
        }
        shard.table.store(new.as_ptr(), Ordering::SeqCst);
        if let Some(old) = NonNull::new(seen) {
            state.retired[slot] = Retired {
                table: Some(old),
                seen: 0,
            };
        }
        self.reclaim(&mut state);
        true
    }

    /// Unmaps the retired tables nobody can still be reading.
    fn reclaim(&self, state: &mut MutexGuard<'_, GrowState>) {
        for r in state.retired.iter_mut() {
            if let Some(t) = r.table
                && (self.quiescence)(&mut r.seen)
            {
                // SAFETY: retired (no longer published) and every reader since has left.
                unsafe { Table::unmap(t) };
                r.table = None;
            }
        }
    }

    /// Holds every shard's grow lock (in a fixed order) so that the tables a whole-table pass
    /// reads stay current. The caller should be marked (`DisabledScope`), so that the backtrace
    /// signal is blocked while it holds them.
    pub fn lock_all(&self) -> AllLocked<'_> {
        AllLocked {
            table: self,
            guards: core::array::from_fn(|i| self.shards[i].grow.lock()),
        }
    }

    /// Every live (pointer, info) of shard `k` (< SHARDS), holding that shard's grow lock so
    /// that its table stays current; returns how many were visited. A pass over the whole
    /// table a shard at a time, for callers that must not hold it all at once (collections of
    /// backtrace records). The caller should be marked, as for `lock_all`.
    pub fn for_each_in_shard(&self, k: usize, mut f: impl FnMut(usize, Info)) -> usize {
        let Some(s) = self.shards.get(k) else {
            return 0;
        };
        let _grow = s.grow.lock();
        let mut n = 0;
        // SAFETY: as in `add_key`; the grow lock keeps the table current.
        if let Some(t) = unsafe { s.table.load(Ordering::SeqCst).as_ref() } {
            t.for_each(|key, info| {
                n += 1;
                f(mangle(key), Info::unpack(info))
            });
        }
        n
    }

    /// Fork child: the threads that held grow locks are gone.
    pub fn reset_in_child(&self) {
        for s in &self.shards {
            s.grow.force_unlock();
        }
    }

    /// Every live (pointer, info), without holding anything: for a caller that excludes
    /// growth otherwise (the gate is closed: `malloc_disable`, finalize, a fork child).
    pub fn for_each_unlocked(&self, mut f: impl FnMut(usize, Info)) {
        for s in &self.shards {
            // SAFETY: as in `add_key`.
            if let Some(t) = unsafe { s.table.load(Ordering::SeqCst).as_ref() } {
                t.for_each(|k, info| f(mangle(k), Info::unpack(info)));
            }
        }
    }
}

/// The whole table with growth held off.
pub struct AllLocked<'a> {
    table: &'a LiveTable,
    #[allow(dead_code, reason = "held for their Drop")]
    guards: [MutexGuard<'a, GrowState>; SHARDS],
}

impl AllLocked<'_> {
    /// About how many entries there are, for sizing a copy (the shards' counts, see `Count`;
    /// others may come and go while the caller looks).
    pub fn approximate_len(&self) -> usize {
        self.table.shards.iter().map(|s| s.len.get()).sum()
    }

    /// Every live (pointer, info), in table order.
    pub fn for_each(&self, f: impl FnMut(usize, Info)) {
        self.table.for_each_unlocked(f);
    }
}

#[cfg(test)]
mod tests;
