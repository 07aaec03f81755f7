//! The live-pointer table: user pointer → (size with zygote bit, backtrace id).
//!
//! Built for millions of entries and many allocating threads: 64 independently locked shards,
//! each an open-addressing hash table (linear probing, backward-shift deletion, no tombstones)
//! in memory mapped straight from the kernel. Keys are stored mangled (XOR all-ones, as the
//! reference does) so that a conservative scanner reading our tables does not see references
//! that keep leaked blocks "reachable".

use crate::mutex::{Mutex, MutexGuard};
use crate::pages;
use core::ptr::NonNull;

const SHARD_BITS: u32 = 6;
const SHARDS: usize = 1 << SHARD_BITS;
const INITIAL_CAPACITY: usize = 256;

/// What the table remembers of one live allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Info {
    /// Requested size, with bit 31 set for allocations made in a zygote child.
    pub size: u32,
    /// 0 = capture off, 1 = attempted but nothing recorded, ≥ 2 = interned backtrace.
    pub backtrace_id: u32,
}

#[derive(Clone, Copy)]
#[repr(C)]
struct Slot {
    /// Mangled pointer; 0 marks an empty slot (it would be the pointer `usize::MAX`).
    key: usize,
    info: Info,
}

const EMPTY: usize = 0;

fn mangle(pointer: usize) -> usize {
    pointer ^ usize::MAX
}

/// Fibonacci hashing: one multiplication, whose high bits depend on every bit of the pointer.
/// The top `SHARD_BITS` pick the shard, the bits below them the home slot in the shard. Cheap
/// enough that backward-shift deletion can rehash every member of a probe run it walks.
fn hash(pointer: usize) -> u64 {
    (pointer as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// The home slot of hash `h` in a shard whose capacity is 2^(64 − `index_shift`): the hash bits
/// just below the shard bits. (A free function: `remove` uses it while it holds the slots.)
fn home_slot(h: u64, index_shift: u32) -> usize {
    ((h << SHARD_BITS) >> index_shift) as usize
}

struct Shard {
    slots: Option<NonNull<Slot>>,
    capacity: usize,
    /// 64 − log2(capacity): shifts a hash (shard bits removed) down to a slot index.
    index_shift: u32,
    len: usize,
}

// SAFETY: the slot memory is owned by the shard and only touched under its mutex.
unsafe impl Send for Shard {}

impl Shard {
    const fn new() -> Self {
        Shard {
            slots: None,
            capacity: 0,
            index_shift: 64,
            len: 0,
        }
    }

    fn slots(&self) -> &[Slot] {
        match self.slots {
            // SAFETY: `capacity` slots were mapped for this shard.
            Some(p) => unsafe { core::slice::from_raw_parts(p.as_ptr(), self.capacity) },
            None => &[],
        }
    }

    fn slots_mut(&mut self) -> &mut [Slot] {
        match self.slots {
            // SAFETY: as above, and `&mut self` gives exclusive access.
            Some(p) => unsafe { core::slice::from_raw_parts_mut(p.as_ptr(), self.capacity) },
            None => &mut [],
        }
    }

    fn home(&self, h: u64) -> usize {
        home_slot(h, self.index_shift)
    }

    fn find(&self, key: usize, h: u64) -> Option<usize> {
        if self.capacity == 0 {
            return None;
        }
        let mask = self.capacity - 1;
        let slots = self.slots();
        let mut i = self.home(h);
        loop {
            match slots[i].key {
                EMPTY => return None,
                k if k == key => return Some(i),
                _ => i = (i + 1) & mask,
            }
        }
    }

    /// Inserts or replaces. False only when memory for growing could not be mapped.
    fn insert(&mut self, key: usize, h: u64, info: Info) -> bool {
        if (self.len + 1) * 10 > self.capacity * 7 && !self.grow() {
            return false;
        }
        let mask = self.capacity - 1;
        let mut i = self.home(h);
        let slots = self.slots_mut();
        loop {
            if slots[i].key == EMPTY {
                slots[i] = Slot { key, info };
                self.len += 1;
                return true;
            }
            if slots[i].key == key {
                slots[i].info = info;
                return true;
            }
            i = (i + 1) & mask;
        }
    }

    fn remove(&mut self, key: usize, h: u64) -> Option<Info> {
        let mut hole = self.find(key, h)?;
        let mask = self.capacity - 1;
        let shift = self.index_shift;
        let slots = self.slots_mut();
        let info = slots[hole].info;
        // Backward-shift deletion: pull later members of the probe run into the hole so that
        // lookups never need tombstones.
        let mut i = hole;
        loop {
            i = (i + 1) & mask;
            let k = slots[i].key;
            if k == EMPTY {
                break;
            }
            let home = home_slot(hash(mangle(k)), shift);
            // Move slot i into the hole if its home is not in (hole, i] cyclically.
            let dist_home = i.wrapping_sub(home) & mask;
            let dist_hole = i.wrapping_sub(hole) & mask;
            if dist_home >= dist_hole {
                slots[hole] = slots[i];
                hole = i;
            }
        }
        slots[hole].key = EMPTY;
        self.len -= 1;
        Some(info)
    }

    fn grow(&mut self) -> bool {
        let new_capacity = if self.capacity == 0 {
            INITIAL_CAPACITY
        } else {
            self.capacity * 2
        };
        let Some(bytes) = new_capacity.checked_mul(size_of::<Slot>()) else {
            return false;
        };
        let Some(mem) = pages::map(bytes) else {
            return false;
        };
        let old_slots = self.slots;
        let old_capacity = self.capacity;
        self.slots = Some(mem.cast());
        self.capacity = new_capacity;
        self.index_shift = 64 - new_capacity.trailing_zeros();
        self.len = 0;
        if let Some(old) = old_slots {
            // SAFETY: the old table had `old_capacity` slots and is no longer referenced.
            let old_view = unsafe { core::slice::from_raw_parts(old.as_ptr(), old_capacity) };
            for slot in old_view.iter().filter(|s| s.key != EMPTY) {
                self.insert(slot.key, hash(mangle(slot.key)), slot.info);
            }
            // SAFETY: mapped by `grow` with exactly this size.
            unsafe { pages::unmap(old.cast(), old_capacity * size_of::<Slot>()) };
        }
        true
    }
}

#[repr(align(64))]
struct PaddedShard(Mutex<Shard>);

pub struct PointerTable {
    shards: [PaddedShard; SHARDS],
}

impl PointerTable {
    pub const fn new() -> Self {
        PointerTable {
            shards: [const { PaddedShard(Mutex::new(Shard::new())) }; SHARDS],
        }
    }

    fn shard(&self, h: u64) -> &Mutex<Shard> {
        &self.shards[(h >> (64 - SHARD_BITS)) as usize].0
    }

    /// Records a live allocation (replacing an existing record of the same pointer). Returns
    /// false if the table could not grow (out of address space).
    pub fn add(&self, pointer: usize, info: Info) -> bool {
        let h = hash(pointer);
        self.shard(h).lock().insert(mangle(pointer), h, info)
    }

    pub fn remove(&self, pointer: usize) -> Option<Info> {
        let key = mangle(pointer);
        let h = hash(pointer);
        self.shard(h).lock().remove(key, h)
    }

    pub fn get(&self, pointer: usize) -> Option<Info> {
        let key = mangle(pointer);
        let h = hash(pointer);
        let shard = self.shard(h).lock();
        shard.find(key, h).map(|i| shard.slots()[i].info)
    }

    /// Locks every shard (in a fixed order) for a consistent view of the whole table.
    pub fn lock_all(&self) -> AllLocked<'_> {
        AllLocked {
            guards: core::array::from_fn(|i| self.shards[i].0.lock()),
        }
    }

    /// Fork prepare / `malloc_disable`: hold every shard without guards.
    pub fn lock_all_raw(&self) {
        for s in &self.shards {
            s.0.lock_raw();
        }
    }

    /// Every live (pointer, info) while the caller already holds every shard (taken with
    /// `lock_all_raw`, e.g. between malloc_disable and malloc_enable on this thread).
    ///
    /// # Safety
    /// The calling thread must hold all shard locks.
    pub unsafe fn for_each_held(&self, mut f: impl FnMut(usize, Info)) {
        for s in &self.shards {
            // SAFETY: forwarded: the caller holds this shard's lock.
            let shard = unsafe { s.0.get_unlocked() };
            for slot in shard.slots().iter().filter(|s| s.key != EMPTY) {
                f(mangle(slot.key), slot.info);
            }
        }
    }

    /// Fork parent / child / `malloc_enable`.
    pub fn unlock_all_raw(&self) {
        for s in self.shards.iter().rev() {
            s.0.force_unlock();
        }
    }
}

impl Default for PointerTable {
    fn default() -> Self {
        Self::new()
    }
}

/// The whole table, locked.
pub struct AllLocked<'a> {
    guards: [MutexGuard<'a, Shard>; SHARDS],
}

impl AllLocked<'_> {
    pub fn len(&self) -> usize {
        self.guards.iter().map(|g| g.len).sum()
    }

    /// Every live (pointer, info), in table order.
    pub fn iter(&self) -> impl Iterator<Item = (usize, Info)> + '_ {
        self.guards
            .iter()
            .flat_map(|g| g.slots().iter())
            .filter(|s| s.key != EMPTY)
            .map(|s| (mangle(s.key), s.info))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn info(size: u32) -> Info {
        Info {
            size,
            backtrace_id: 0,
        }
    }

    #[test]
    fn add_get_remove_many() {
        let t = Box::new(PointerTable::new());
        for i in 1..200_000usize {
            assert!(t.add(i * 16, info(i as u32)));
        }
        assert_eq!(t.lock_all().len(), 199_999);
        for i in (1..200_000usize).step_by(2) {
            assert_eq!(t.remove(i * 16), Some(info(i as u32)));
        }
        for i in 1..200_000usize {
            let expected = if i % 2 == 1 {
                None
            } else {
                Some(info(i as u32))
            };
            assert_eq!(t.get(i * 16), expected, "pointer {}", i * 16);
        }
        assert_eq!(t.remove(16), None);
    }

    #[test]
    fn matches_a_model_under_random_operations() {
        let t = Box::new(PointerTable::new());
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
                    t.add(p, info((x >> 40) as u32));
                    model.insert(p, info((x >> 40) as u32));
                }
                _ => assert_eq!(t.remove(p), model.remove(&p)),
            }
        }
        let all = t.lock_all();
        let mut seen: Vec<_> = all.iter().collect();
        seen.sort_by_key(|e| e.0);
        let mut expected: Vec<_> = model.into_iter().collect();
        expected.sort_by_key(|e| e.0);
        assert_eq!(seen, expected);
    }

    /// Heap addresses come in strides (16-byte chunks, 4 KiB pages, 64 KiB mmaps): every
    /// stride must spread over all shards and keep probe runs short.
    #[test]
    fn strided_pointers_spread_over_shards_and_slots() {
        for stride in [16usize, 48, 4096, 65536] {
            let t = Box::new(PointerTable::new());
            let n = 64 * 1024;
            for i in 0..n {
                t.add(0x5555_0000_0000 + i * stride, info(1));
            }
            let all = t.lock_all();
            let per_shard: Vec<usize> = all.guards.iter().map(|g| g.len).collect();
            let max = *per_shard.iter().max().unwrap();
            assert!(
                max <= 2 * n / SHARDS,
                "stride {stride}: shard sizes {per_shard:?}"
            );
            // Longest run of occupied slots in any shard.
            let longest = all
                .guards
                .iter()
                .map(|g| {
                    let (mut best, mut run) = (0, 0);
                    for s in g.slots() {
                        run = if s.key == EMPTY { 0 } else { run + 1 };
                        best = best.max(run);
                    }
                    best
                })
                .max()
                .unwrap();
            assert!(longest < 64, "stride {stride}: probe run of {longest}");
        }
    }

    #[test]
    fn keys_are_stored_mangled() {
        let t = Box::new(PointerTable::new());
        t.add(0x1000, info(1));
        let shard = t.shard(hash(0x1000)).lock();
        assert!(shard.slots().iter().any(|s| s.key == !0x1000usize));
        assert!(!shard.slots().iter().any(|s| s.key == 0x1000));
    }
}
