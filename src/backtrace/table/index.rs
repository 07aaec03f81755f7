//! The hash indexes of the backtrace store (see table.rs): open-addressing tables of (key,
//! record) with linear probing and backward-shift deletion, one by frame hash and one by id per
//! shard, changed only under the shard's lock. The frames index is also read without the lock
//! (`probe` only loads, and its old mappings stay mapped), which is how an existing frame
//! vector is found on the hot path. Also the store's memory accounting (`map_counted`) and the
//! frame-vector hash.

use super::{MAX_BYTES, Stored};
use crate::pages;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};

static MAPPED: AtomicUsize = AtomicUsize::new(0);

pub(super) fn map_counted(bytes: usize) -> Option<NonNull<u8>> {
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
pub(super) unsafe fn unmap_counted(p: NonNull<u8>, bytes: usize) {
    // SAFETY: forwarded.
    unsafe { pages::unmap(p, bytes) };
    MAPPED.fetch_sub(bytes, Ordering::Relaxed);
}

/// One slot of an index: a key (frame hash or id) and its record, null when empty.
#[repr(C)]
pub(super) struct Slot {
    pub(super) key: AtomicU64,
    pub(super) rec: AtomicPtr<Stored>,
}

/// Bytes before the slots in an index mapping: the capacity, then padding.
const INDEX_HEADER: usize = 16;

/// The slots of an index mapping (empty for null). Mappings of the frames index are never
/// unmapped, so a reader without the lock may hold an old one.
///
/// # Safety
/// `map` is null or an index mapping that is still mapped.
pub(super) unsafe fn slots_of<'a>(map: *mut usize) -> &'a [Slot] {
    if map.is_null() {
        return &[];
    }
    // SAFETY: the mapping starts with its capacity, written before it was published, and
    // holds that many slots after the header.
    unsafe {
        let cap = *map;
        core::slice::from_raw_parts(map.cast::<u8>().add(INDEX_HEADER).cast::<Slot>(), cap)
    }
}

/// Where `key`'s probe run starts in an index of `cap` slots (a power of two).
fn home(key: u64, cap: usize) -> usize {
    (mix(key) as usize) & (cap - 1)
}

/// Probes `slots` for `key` until `f` accepts a record; safe to run without the lock (it only
/// loads), bounded by the capacity.
pub(super) fn probe(
    slots: &[Slot],
    key: u64,
    mut f: impl FnMut(*mut Stored) -> bool,
) -> Option<*mut Stored> {
    let cap = slots.len();
    if cap == 0 {
        return None;
    }
    let mut i = home(key, cap);
    for _ in 0..cap {
        let r = slots[i].rec.load(Ordering::Acquire);
        if r.is_null() {
            return None;
        }
        if slots[i].key.load(Ordering::Relaxed) == key && f(r) {
            return Some(r);
        }
        i = (i + 1) & (cap - 1);
    }
    None
}

/// Puts (key, rec) in the first empty slot of its probe run (the caller made room).
fn place(slots: &[Slot], key: u64, rec: *mut Stored) {
    let mask = slots.len() - 1;
    let mut i = home(key, slots.len());
    while !slots[i].rec.load(Ordering::Relaxed).is_null() {
        i = (i + 1) & mask;
    }
    slots[i].key.store(key, Ordering::Relaxed);
    // Release: a reader that sees the record sees its key and contents.
    slots[i].rec.store(rec, Ordering::Release);
}

/// Open-addressing table of (key, record) with linear probing and backward-shift deletion,
/// changed only under its shard's lock. Keys may repeat (frame hashes collide).
pub(super) struct Index {
    /// The current mapping (see `slots_of`).
    pub(super) map: *mut usize,
    pub(super) cap: usize,
    len: usize,
    /// Old mappings stay mapped: readers without the lock may still be probing them.
    keep_old_maps: bool,
}

impl Index {
    pub(super) const fn new(keep_old_maps: bool) -> Self {
        Index {
            map: core::ptr::null_mut(),
            cap: 0,
            len: 0,
            keep_old_maps,
        }
    }

    pub(super) fn slots(&self) -> &[Slot] {
        // SAFETY: the current mapping is mapped.
        unsafe { slots_of(self.map) }
    }

    /// Calls `f` for each record stored under `key` until it returns true.
    pub(super) fn find(&self, key: u64, f: impl FnMut(*mut Stored) -> bool) -> Option<*mut Stored> {
        probe(self.slots(), key, f)
    }

    pub(super) fn insert(&mut self, key: u64, rec: *mut Stored) -> bool {
        if (self.len + 1) * 2 > self.cap && !self.grow() {
            return false;
        }
        place(self.slots(), key, rec);
        self.len += 1;
        true
    }

    pub(super) fn remove(&mut self, key: u64, rec: *mut Stored) {
        if self.cap == 0 {
            return;
        }
        let mask = self.cap - 1;
        let mut i = home(key, self.cap);
        let slots = self.slots();
        loop {
            let r = slots[i].rec.load(Ordering::Relaxed);
            if r.is_null() {
                return;
            }
            if r == rec {
                break;
            }
            i = (i + 1) & mask;
        }
        self.remove_at(i);
    }

    /// Empties occupied slot `i`, pulling later members of its probe run into the hole
    /// (backward shift). An entry may move from after `i` to `i`, or (wrapping round) from
    /// the start of the array to its end. Readers without the lock may miss entries meanwhile:
    /// the shard's version tells them.
    pub(super) fn remove_at(&mut self, i: usize) {
        let mask = self.cap - 1;
        let slots = self.slots();
        let mut hole = i;
        let mut j = (i + 1) & mask;
        loop {
            let r = slots[j].rec.load(Ordering::Relaxed);
            if r.is_null() {
                break;
            }
            let k = slots[j].key.load(Ordering::Relaxed);
            let h = home(k, self.cap);
            // Move j into the hole if its home is not in (hole, j] cyclically.
            let dist_home = j.wrapping_sub(h) & mask;
            let dist_hole = j.wrapping_sub(hole) & mask;
            if dist_home >= dist_hole {
                slots[hole].key.store(k, Ordering::Relaxed);
                slots[hole].rec.store(r, Ordering::Release);
                hole = j;
            }
            j = (j + 1) & mask;
        }
        slots[hole]
            .rec
            .store(core::ptr::null_mut(), Ordering::Release);
        slots[hole].key.store(0, Ordering::Relaxed);
        self.len -= 1;
    }

    fn map_bytes(cap: usize) -> usize {
        INDEX_HEADER + cap * size_of::<Slot>()
    }

    fn grow(&mut self) -> bool {
        let new_cap = if self.cap == 0 { 1024 } else { self.cap * 2 };
        let Some(p) = map_counted(Self::map_bytes(new_cap)) else {
            return false;
        };
        let new_map = p.as_ptr().cast::<usize>();
        // SAFETY: a fresh mapping of at least INDEX_HEADER bytes, not yet shared.
        unsafe { *new_map = new_cap };
        let (old_map, old_cap) = (self.map, self.cap);
        // SAFETY: the new mapping was just initialised; the old one is still mapped.
        let (slots, old_slots) = unsafe { (slots_of(new_map), slots_of(old_map)) };
        for old in old_slots {
            let r = old.rec.load(Ordering::Relaxed);
            if !r.is_null() {
                place(slots, old.key.load(Ordering::Relaxed), r);
            }
        }
        self.map = new_map;
        self.cap = new_cap;
        if !old_map.is_null() && !self.keep_old_maps {
            // SAFETY: the old mapping came from map_counted with these bytes, and only lock
            // holders (us) ever read it.
            unsafe {
                unmap_counted(
                    NonNull::new_unchecked(old_map.cast()),
                    Self::map_bytes(old_cap),
                )
            };
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
pub(super) fn hash_frames(frames: &[usize]) -> u64 {
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
