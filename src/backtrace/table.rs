//! Deduplicated backtrace records (abi §7.4): one record per distinct frame vector, shared by
//! every allocation and free-track entry with that vector, reference counted, identified by an
//! id that is never reused.
//!
//! The table is split into shards by the hash of the frame vector; each shard has its own lock,
//! its own records and its own two indexes (frames → record, id → record). An id names its
//! shard (`id = 2 + seq * SHARDS + shard`), so `retain`/`release` by id touch one shard and one
//! lock only. All memory comes from mmap (records in size classes with free lists, indexes as
//! open-addressing tables that double when half full) and is bounded by `MAX_BYTES`.

use crate::mutex::Mutex;
use crate::pages;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicUsize, Ordering};

const SHARDS: usize = 16;
/// Upper bound on the memory the whole table may map.
const MAX_BYTES: usize = if cfg!(target_pointer_width = "64") {
    1 << 30
} else {
    128 << 20
};
const CHUNK: usize = 256 * 1024;
/// Frame-count capacities of the record size classes.
const CLASSES: [usize; 9] = [1, 2, 4, 8, 16, 32, 64, 128, 256];

#[repr(C)]
struct Record {
    id: u32,
    len: u32,
    count: u64,
    hash: u64,
    /// Free-list link while free.
    next_free: *mut Record,
    // followed by `capacity` usize frames
}

const HEADER: usize = core::mem::size_of::<Record>();

impl Record {
    fn frames_ptr(this: *mut Record) -> *mut usize {
        // SAFETY: the frames follow the header inside the same slot.
        unsafe { this.cast::<u8>().add(HEADER).cast() }
    }
    /// # Safety
    /// `this` must be a live record.
    unsafe fn frames<'a>(this: *mut Record) -> &'a [usize] {
        // SAFETY: a live record has `len` initialised frames.
        unsafe { core::slice::from_raw_parts(Self::frames_ptr(this), (*this).len as usize) }
    }
}

static MAPPED: AtomicUsize = AtomicUsize::new(0);

fn map_counted(bytes: usize) -> Option<NonNull<u8>> {
    if MAPPED.fetch_add(bytes, Ordering::Relaxed) + bytes > MAX_BYTES {
        MAPPED.fetch_sub(bytes, Ordering::Relaxed);
        return None;
    }
    let p = pages::map(bytes);
    if p.is_none() {
        MAPPED.fetch_sub(bytes, Ordering::Relaxed);
    }
    p
}

/// # Safety
/// `p` must come from `map_counted(bytes)`.
unsafe fn unmap_counted(p: NonNull<u8>, bytes: usize) {
    // SAFETY: forwarded.
    unsafe { pages::unmap(p, bytes) };
    MAPPED.fetch_sub(bytes, Ordering::Relaxed);
}

/// Open-addressing table of (key, record) with linear probing and backward-shift deletion.
/// Keys may repeat (frame hashes collide); a slot is empty when its record is null.
struct Index {
    slots: *mut (u64, *mut Record),
    cap: usize,
    len: usize,
}

impl Index {
    const fn new() -> Self {
        Index {
            slots: core::ptr::null_mut(),
            cap: 0,
            len: 0,
        }
    }

    fn slots(&self) -> &[(u64, *mut Record)] {
        if self.slots.is_null() {
            return &[];
        }
        // SAFETY: `cap` slots mapped by `grow`, owned by this index (accessed under its shard lock).
        unsafe { core::slice::from_raw_parts(self.slots, self.cap) }
    }

    fn slots_mut(&mut self) -> &mut [(u64, *mut Record)] {
        if self.slots.is_null() {
            return &mut [];
        }
        // SAFETY: as above; &mut self gives exclusive access.
        unsafe { core::slice::from_raw_parts_mut(self.slots, self.cap) }
    }

    fn home(&self, key: u64) -> usize {
        (mix(key) as usize) & (self.cap - 1)
    }

    /// Calls `f` for each record stored under `key` until it returns true.
    fn find(&self, key: u64, mut f: impl FnMut(*mut Record) -> bool) -> Option<*mut Record> {
        if self.cap == 0 {
            return None;
        }
        let slots = self.slots();
        let mut i = self.home(key);
        loop {
            let (k, r) = slots[i];
            if r.is_null() {
                return None;
            }
            if k == key && f(r) {
                return Some(r);
            }
            i = (i + 1) & (self.cap - 1);
        }
    }

    fn insert(&mut self, key: u64, rec: *mut Record) -> bool {
        if (self.len + 1) * 2 > self.cap && !self.grow() {
            return false;
        }
        let cap = self.cap;
        let mut i = self.home(key);
        let slots = self.slots_mut();
        while !slots[i].1.is_null() {
            i = (i + 1) & (cap - 1);
        }
        slots[i] = (key, rec);
        self.len += 1;
        true
    }

    fn remove(&mut self, key: u64, rec: *mut Record) {
        if self.cap == 0 {
            return;
        }
        let mask = self.cap - 1;
        let mut i = self.home(key);
        let slots = self.slots_mut();
        loop {
            let (_, r) = slots[i];
            if r.is_null() {
                return;
            }
            if r == rec {
                break;
            }
            i = (i + 1) & mask;
        }
        // Backward-shift: pull later members of the probe run into the hole.
        let mut hole = i;
        let mut j = (i + 1) & mask;
        loop {
            let (k, r) = slots[j];
            if r.is_null() {
                break;
            }
            let h = (mix(k) as usize) & mask;
            // Move j into the hole if its home is not in (hole, j] cyclically.
            let dist_home = j.wrapping_sub(h) & mask;
            let dist_hole = j.wrapping_sub(hole) & mask;
            if dist_home >= dist_hole {
                slots[hole] = slots[j];
                hole = j;
            }
            j = (j + 1) & mask;
        }
        slots[hole] = (0, core::ptr::null_mut());
        self.len -= 1;
    }

    fn grow(&mut self) -> bool {
        let new_cap = if self.cap == 0 { 1024 } else { self.cap * 2 };
        let bytes = new_cap * core::mem::size_of::<(u64, *mut Record)>();
        let Some(p) = map_counted(bytes) else {
            return false;
        };
        let old = (self.slots, self.cap);
        self.slots = p.as_ptr().cast();
        self.cap = new_cap;
        self.len = 0;
        if !old.0.is_null() {
            // SAFETY: the old table had `old.1` slots.
            let old_slots = unsafe { core::slice::from_raw_parts(old.0, old.1) };
            for &(k, r) in old_slots {
                if !r.is_null() {
                    let mut i = self.home(k);
                    let slots = self.slots_mut();
                    while !slots[i].1.is_null() {
                        i = (i + 1) & (new_cap - 1);
                    }
                    slots[i] = (k, r);
                    self.len += 1;
                }
            }
            let old_bytes = old.1 * core::mem::size_of::<(u64, *mut Record)>();
            // SAFETY: the old table was mapped by map_counted with these bytes.
            unsafe { unmap_counted(NonNull::new_unchecked(old.0.cast()), old_bytes) };
        }
        true
    }
}

#[inline]
fn mix(k: u64) -> u64 {
    let k = (k ^ (k >> 33)).wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^ (k >> 29)
}

/// Two lanes (even and odd frames) so that the multiply-rotate chain, one step per frame and
/// paid on every interned capture, is half as long.
fn hash_frames(frames: &[usize]) -> u64 {
    let step = |h: u64, f: usize| {
        (h ^ f as u64)
            .wrapping_mul(0x0000_0100_0000_01b3)
            .rotate_left(29)
    };
    let mut even: u64 = 0xcbf2_9ce4_8422_2325 ^ frames.len() as u64;
    let mut odd: u64 = 0x8422_2325_cbf2_9ce4;
    let mut pairs = frames.chunks_exact(2);
    for pair in &mut pairs {
        even = step(even, pair[0]);
        odd = step(odd, pair[1]);
    }
    if let [last] = pairs.remainder() {
        even = step(even, *last);
    }
    mix(even ^ mix(odd))
}

struct Shard {
    by_frames: Index,
    by_id: Index,
    free: [*mut Record; CLASSES.len()],
    bump: *mut u8,
    bump_left: usize,
    next_seq: u32,
    live: usize,
}

// SAFETY: the raw pointers are owned by the shard and only used under its mutex.
unsafe impl Send for Shard {}

impl Shard {
    const fn new() -> Self {
        Shard {
            by_frames: Index::new(),
            by_id: Index::new(),
            free: [core::ptr::null_mut(); CLASSES.len()],
            bump: core::ptr::null_mut(),
            bump_left: 0,
            next_seq: 0,
            live: 0,
        }
    }

    fn class_of(len: usize) -> Option<usize> {
        CLASSES.iter().position(|&c| c >= len)
    }

    fn alloc(&mut self, class: usize) -> Option<*mut Record> {
        let head = self.free[class];
        if !head.is_null() {
            // SAFETY: free-list members are slots of this class owned by this shard.
            self.free[class] = unsafe { (*head).next_free };
            return Some(head);
        }
        let size = HEADER + CLASSES[class] * core::mem::size_of::<usize>();
        if self.bump_left < size {
            // The tail of the old chunk is abandoned (at most one slot's worth).
            let p = map_counted(CHUNK)?;
            self.bump = p.as_ptr();
            self.bump_left = CHUNK;
        }
        let r = self.bump.cast::<Record>();
        // SAFETY: `size` bytes remain in the current chunk.
        self.bump = unsafe { self.bump.add(size) };
        self.bump_left -= size;
        Some(r)
    }

    fn free_record(&mut self, r: *mut Record) {
        // SAFETY: r is a live record of this shard, about to become free.
        unsafe {
            if let Some(class) = Self::class_of((*r).len as usize) {
                (*r).next_free = self.free[class];
                self.free[class] = r;
            }
        }
    }

    fn find_id(&self, id: u32) -> Option<*mut Record> {
        // SAFETY: index members are live records.
        self.by_id.find(id as u64, |r| unsafe { (*r).id == id })
    }
}

pub struct BacktraceTable {
    shards: [Mutex<Shard>; SHARDS],
}

/// Ids 0 and 1 are the "capture off" and "nothing recorded" slot values.
const FIRST_ID: u32 = 2;

fn shard_of_id(id: u32) -> Option<usize> {
    id.checked_sub(FIRST_ID).map(|x| x as usize % SHARDS)
}

impl Default for BacktraceTable {
    fn default() -> Self {
        Self::new()
    }
}

impl BacktraceTable {
    pub const fn new() -> Self {
        BacktraceTable {
            shards: [const { Mutex::new(Shard::new()) }; SHARDS],
        }
    }

    /// The id of this frame vector (its count incremented), or None when out of memory or ids.
    pub fn intern(&self, frames: &[usize]) -> Option<u32> {
        let class = Shard::class_of(frames.len())?;
        if frames.is_empty() {
            return None;
        }
        let hash = hash_frames(frames);
        let s = (hash >> 60) as usize % SHARDS;
        let mut shard = self.shards[s].lock();
        // SAFETY: index members are live records.
        if let Some(r) = shard
            .by_frames
            .find(hash, |r| unsafe { Record::frames(r) == frames })
        {
            // SAFETY: live record, under the shard lock.
            unsafe { (*r).count += 1 };
            // SAFETY: as above.
            return Some(unsafe { (*r).id });
        }
        let seq = shard.next_seq;
        let id = (seq as u64 * SHARDS as u64 + s as u64 + FIRST_ID as u64)
            .try_into()
            .ok()?;
        let r = shard.alloc(class)?;
        // SAFETY: r is a fresh slot with room for CLASSES[class] >= frames.len() frames.
        unsafe {
            r.write(Record {
                id,
                len: frames.len() as u32,
                count: 1,
                hash,
                next_free: core::ptr::null_mut(),
            });
            core::ptr::copy_nonoverlapping(frames.as_ptr(), Record::frames_ptr(r), frames.len());
        }
        if !shard.by_frames.insert(hash, r) {
            shard.free_record(r);
            return None;
        }
        if !shard.by_id.insert(id as u64, r) {
            shard.by_frames.remove(hash, r);
            shard.free_record(r);
            return None;
        }
        shard.next_seq = seq + 1;
        shard.live += 1;
        Some(id)
    }

    /// One more reference to `id` (realloc re-recording the same backtrace).
    #[cfg_attr(not(test), allow(dead_code, reason = "used by the unit tests"))]
    pub fn retain(&self, id: u32) {
        let Some(s) = shard_of_id(id) else { return };
        let shard = self.shards[s].lock();
        match shard.find_id(id) {
            // SAFETY: live record, under the shard lock.
            Some(r) => unsafe { (*r).count += 1 },
            None => missing(id),
        }
    }

    /// One reference fewer; the record is freed at zero.
    pub fn release(&self, id: u32) {
        let Some(s) = shard_of_id(id) else {
            missing(id);
            return;
        };
        let mut shard = self.shards[s].lock();
        let Some(r) = shard.find_id(id) else {
            drop(shard);
            missing(id);
            return;
        };
        // SAFETY: live record, under the shard lock.
        unsafe {
            (*r).count -= 1;
            if (*r).count == 0 {
                let hash = (*r).hash;
                shard.by_frames.remove(hash, r);
                shard.by_id.remove(id as u64, r);
                shard.free_record(r);
                shard.live -= 1;
            }
        }
    }

    /// Calls `f` with the frames of `id` (under the shard lock: `f` must not use the table).
    pub fn with_frames<R>(&self, id: u32, f: impl FnOnce(&[usize]) -> R) -> Option<R> {
        let s = shard_of_id(id)?;
        let shard = self.shards[s].lock();
        let r = shard.find_id(id)?;
        // SAFETY: live record, under the shard lock.
        Some(f(unsafe { Record::frames(r) }))
    }

    /// Reference count of `id` (0 if unknown).
    #[cfg_attr(not(test), allow(dead_code, reason = "used by the unit tests"))]
    pub fn count(&self, id: u32) -> u64 {
        let Some(s) = shard_of_id(id) else { return 0 };
        let shard = self.shards[s].lock();
        // SAFETY: live record, under the shard lock.
        shard.find_id(id).map_or(0, |r| unsafe { (*r).count })
    }

    /// Number of distinct live records.
    #[cfg_attr(not(test), allow(dead_code, reason = "used by the unit tests"))]
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().live).sum()
    }

    /// Takes every shard lock (fork prepare, malloc_disable).
    pub fn lock_raw(&self) {
        for s in &self.shards {
            s.lock_raw();
        }
    }

    /// Releases what `lock_raw` took (fork parent/child, malloc_enable).
    pub fn unlock_raw(&self) {
        for s in self.shards.iter().rev() {
            s.force_unlock();
        }
    }
}

#[cold]
fn missing(id: u32) {
    crate::log::log_error!("hash_index {} does not have matching frame data.", id);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intern_dedups_and_counts() {
        let t = Box::new(BacktraceTable::new());
        let a = t.intern(&[1, 2, 3]).unwrap();
        let b = t.intern(&[1, 2, 3]).unwrap();
        let c = t.intern(&[1, 2]).unwrap();
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert!(a >= 2 && c >= 2);
        assert_eq!(t.count(a), 2);
        t.retain(a);
        assert_eq!(t.count(a), 3);
        assert_eq!(t.with_frames(a, |f| f.to_vec()), Some(vec![1, 2, 3]));
        t.release(a);
        t.release(a);
        assert_eq!(t.count(a), 1);
        t.release(a);
        assert_eq!(t.count(a), 0);
        assert_eq!(t.with_frames(a, |f| f.len()), None);
        assert_eq!(t.len(), 1);
        // Re-interning after the record died gives a new id: ids are never reused.
        let d = t.intern(&[1, 2, 3]).unwrap();
        assert_ne!(d, a);
        assert!(t.intern(&[]).is_none());
        assert!(t.intern(&[0; 257]).is_none());
        assert!(t.intern(&[7; 256]).is_some());
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
        t.release(0);
        t.release(12345);
        t.retain(99);
        assert_eq!(t.with_frames(5, |_| ()), None);
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
        for (id, frames) in ids.iter().step_by(2) {
            assert_eq!(t.with_frames(*id, |f| f == &frames[..]), Some(true));
            t.release(*id);
        }
        assert_eq!(t.len(), 25_000);
        for (id, frames) in ids.iter().skip(1).step_by(2) {
            assert_eq!(t.with_frames(*id, |f| f == &frames[..]), Some(true));
        }
        for i in 0..25_000usize {
            let id = t.intern(&[i, 99, 98]).unwrap();
            assert!(seen.insert(id), "id reused");
        }
    }

    #[test]
    fn many_threads_interning() {
        let t: &'static BacktraceTable = Box::leak(Box::new(BacktraceTable::new()));
        let threads: Vec<_> = (0..8usize)
            .map(|th| {
                std::thread::spawn(move || {
                    let mut mine = vec![];
                    for i in 0..20_000usize {
                        // Half shared among threads, half private.
                        let frames = if i % 2 == 0 {
                            vec![i % 100, 1, 2]
                        } else {
                            vec![th, i, 3, 4]
                        };
                        let id = t.intern(&frames).unwrap();
                        assert_eq!(t.with_frames(id, |f| f == &frames[..]), Some(true));
                        mine.push(id);
                    }
                    for id in mine {
                        t.release(id);
                    }
                })
            })
            .collect();
        for th in threads {
            th.join().unwrap();
        }
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn lock_raw_then_unlock() {
        let t = Box::new(BacktraceTable::new());
        let id = t.intern(&[5]).unwrap();
        t.lock_raw();
        t.unlock_raw();
        assert_eq!(t.count(id), 1);
    }
}
