//! Deduplicated backtrace records (docs/spec/allocation.md#allocation-backtraces): one record per
//! distinct frame vector, shared by every allocation with that vector, identified by an id that is
//! never reused.
//!
//! Records carry no reference count. Counting cost every allocation and every free a lock and a
//! write to a record that all threads allocating from the same place share (10–15% of a
//! `backtrace` run, more on two threads). Instead the records nobody refers to are collected
//! in batches: once the table holds twice as many records as survived the last collection
//! (and at least one new record per `ENTRIES_SCANNED_PER_RECORD` entries that collection visited),
//! `collect` is handed every id still in use (the live table's) and frees the rest. The
//! caller guarantees that no id is in flight outside what it hands over (see `tracking`).
//!
//! Finding an existing vector takes no lock (`find_published`): a seqlock read against the
//! shard's version, which a collection makes odd while it frees records. A read that a
//! collection got in the way of falls back to the shard's lock. Every lock of the table is held
//! marked and with bionic's backtrace signal blocked (`sync::DisabledScope`), so the hot path,
//! which finds existing vectors without it, never waits for a parked thread.
//!
//! The table is split into shards by the hash of the frame vector; each shard has its own lock,
//! its own records and its own two indexes (frames → record, id → record). An id names its
//! shard (`id = 2 + seq * SHARDS + shard`), so a lookup by id touches one shard and one lock
//! only. All memory comes from mmap (records in size classes with free lists, indexes as
//! open-addressing tables that double when half full) and is bounded by `MAX_BYTES`.

use crate::mutex::Mutex;
use crate::pages;
use core::ptr::NonNull;
use core::sync::atomic::{
    AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence,
};

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
/// No collection below this many records: small tables are not worth a pass over the live
/// table.
const MIN_COLLECT_AT: usize = 4096;
/// A collection visits every entry of the live table, so the next one waits for at least one
/// new record per this many entries it visited: the work of collecting stays proportional to
/// the records made, whatever the size of the heap (without it, a million live blocks and a
/// stream of new call paths cost a 1M-entry pass every 4096 records: about 4 µs per allocation in
/// benches/pauses.c). The dead records this lets wait (a record and its two index slots, about
/// 220 bytes with 12 frames) cost about 15 bytes per live entry.
const ENTRIES_SCANNED_PER_RECORD: usize = 16;
/// Slots of the cache of ids a collection marked lately (ids are never 0, the empty slot).
const RECENTLY_MARKED: usize = 256;

/// A record: read without a lock by `BacktraceTable::find_published` (id, len and frames, hence
/// atomics), everything else under its shard's lock.
#[repr(C)]
struct Record {
    id: AtomicU32,
    len: AtomicU32,
    /// Set while a collection finds the record in use.
    marked: bool,
    hash: u64,
    /// Free-list link while free.
    next_free: *mut Record,
    // followed by `capacity` frames (AtomicUsize)
}

const HEADER: usize = core::mem::size_of::<Record>();

impl Record {
    fn frames_ptr(this: *mut Record) -> *mut AtomicUsize {
        // SAFETY: the frames follow the header inside the same slot.
        unsafe { this.cast::<u8>().add(HEADER).cast() }
    }

    /// # Safety
    /// `this` must be a live record and the caller must hold its shard's lock (frames are only
    /// written under it).
    unsafe fn frames<'a>(this: *mut Record) -> &'a [usize] {
        // SAFETY: a live record has `len` initialised frames; AtomicUsize has usize's layout,
        // and no store can race with this view under the lock.
        unsafe {
            let len = (*this).len.load(Ordering::Relaxed) as usize;
            core::slice::from_raw_parts(Self::frames_ptr(this).cast::<usize>(), len)
        }
    }

    /// Whether the record holds `frames`, read without the lock: the answer is only to be
    /// trusted if the shard's version did not change meanwhile.
    ///
    /// # Safety
    /// `this` must be a record slot (live or free: slots are never unmapped) of a size class
    /// whose every record had at most as many frames as the class holds.
    unsafe fn holds(this: *mut Record, frames: &[usize]) -> bool {
        // SAFETY: any len ever stored in this slot fits its class, so once it equals
        // frames.len() the reads below stay inside the slot.
        unsafe {
            if (*this).len.load(Ordering::Relaxed) as usize != frames.len() {
                return false;
            }
            let stored = Self::frames_ptr(this);
            frames
                .iter()
                .enumerate()
                .all(|(i, &f)| (*stored.add(i)).load(Ordering::Relaxed) == f)
        }
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

/// One slot of an index: a key (frame hash or id) and its record, null when empty.
#[repr(C)]
struct Slot {
    key: AtomicU64,
    rec: AtomicPtr<Record>,
}

/// Bytes before the slots in an index mapping: the capacity, then padding.
const INDEX_HEADER: usize = 16;

/// The slots of an index mapping (empty for null). Mappings of the frames index are never
/// unmapped, so a reader without the lock may hold an old one.
///
/// # Safety
/// `map` is null or an index mapping that is still mapped.
unsafe fn slots_of<'a>(map: *mut usize) -> &'a [Slot] {
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
fn probe(slots: &[Slot], key: u64, mut f: impl FnMut(*mut Record) -> bool) -> Option<*mut Record> {
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
fn place(slots: &[Slot], key: u64, rec: *mut Record) {
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
struct Index {
    /// The current mapping (see `slots_of`).
    map: *mut usize,
    cap: usize,
    len: usize,
    /// Old mappings stay mapped: readers without the lock may still be probing them.
    keep_old_maps: bool,
}

impl Index {
    const fn new(keep_old_maps: bool) -> Self {
        Index {
            map: core::ptr::null_mut(),
            cap: 0,
            len: 0,
            keep_old_maps,
        }
    }

    fn slots(&self) -> &[Slot] {
        // SAFETY: the current mapping is mapped.
        unsafe { slots_of(self.map) }
    }

    /// Calls `f` for each record stored under `key` until it returns true.
    fn find(&self, key: u64, f: impl FnMut(*mut Record) -> bool) -> Option<*mut Record> {
        probe(self.slots(), key, f)
    }

    fn insert(&mut self, key: u64, rec: *mut Record) -> bool {
        if (self.len + 1) * 2 > self.cap && !self.grow() {
            return false;
        }
        place(self.slots(), key, rec);
        self.len += 1;
        true
    }

    fn remove(&mut self, key: u64, rec: *mut Record) {
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
    fn remove_at(&mut self, i: usize) {
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
            by_frames: Index::new(true),
            by_id: Index::new(false),
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
            if let Some(class) = Self::class_of((*r).len.load(Ordering::Relaxed) as usize) {
                (*r).next_free = self.free[class];
                self.free[class] = r;
            }
        }
    }

    fn find_id(&self, id: u32) -> Option<*mut Record> {
        // SAFETY: index members are live records.
        self.by_id.find(id as u64, |r| unsafe {
            (*r).id.load(Ordering::Relaxed) == id
        })
    }

    /// Frees every unmarked record and clears the marks of the rest; returns how many remain.
    /// `version` is odd meanwhile (readers without the lock check it).
    fn sweep(&mut self, version: &AtomicU64) -> usize {
        let v = version.load(Ordering::Relaxed);
        version.store(v + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        let mut i = 0;
        while i < self.by_id.cap {
            let r = self.by_id.slots()[i].rec.load(Ordering::Relaxed);
            // SAFETY: index members are live records, under the shard lock.
            if r.is_null() || unsafe { (*r).marked } {
                i += 1;
                continue;
            }
            // SAFETY: as above.
            let hash = unsafe { (*r).hash };
            self.by_frames.remove(hash, r);
            self.by_id.remove_at(i);
            self.free_record(r);
            self.live -= 1;
            // Slot i may now hold a later member of its run: look at it again. (A survivor
            // from the start of the array may be seen twice, hence marks are cleared apart.)
        }
        version.store(v + 2, Ordering::Release);
        for slot in self.by_id.slots() {
            let r = slot.rec.load(Ordering::Relaxed);
            if !r.is_null() {
                // SAFETY: as above.
                unsafe { (*r).marked = false };
            }
        }
        self.live
    }
}

/// What readers without the lock see of a shard.
#[repr(align(64))]
struct Published {
    /// The frames index's current mapping (see `slots_of`).
    frames_map: AtomicPtr<usize>,
    /// Odd while a collection frees records of the shard; changes with every collection.
    version: AtomicU64,
}

pub struct BacktraceTable {
    shards: [Mutex<Shard>; SHARDS],
    published: [Published; SHARDS],
    /// Records in all shards (written when one is made or collected).
    records: AtomicUsize,
    /// A collection is due once `records` passes this.
    collect_at: AtomicUsize,
    collection_wanted: AtomicBool,
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
            published: [const {
                Published {
                    frames_map: AtomicPtr::new(core::ptr::null_mut()),
                    version: AtomicU64::new(0),
                }
            }; SHARDS],
            records: AtomicUsize::new(0),
            collect_at: AtomicUsize::new(MIN_COLLECT_AT),
            collection_wanted: AtomicBool::new(false),
        }
    }

    /// The hash `intern` files a frame vector under (computed apart so that callers can do it
    /// before taking their own locks).
    pub fn hash(frames: &[usize]) -> u64 {
        hash_frames(frames)
    }

    /// The id of this frame vector, or None when out of memory or ids. The id stays valid as
    /// long as a collection finds it in use; so the caller must store it where `collect`'s
    /// caller looks before a collection can start.
    #[cfg(test)]
    pub fn intern(&self, frames: &[usize]) -> Option<u32> {
        self.intern_hashed(frames, hash_frames(frames))
    }

    /// `intern` with the frames' `hash` from `BacktraceTable::hash`.
    pub fn intern_hashed(&self, frames: &[usize], hash: u64) -> Option<u32> {
        let class = Shard::class_of(frames.len())?;
        if frames.is_empty() {
            return None;
        }
        let s = (hash >> 60) as usize % SHARDS;
        if let Some(id) = self.find_published(s, hash, frames) {
            return Some(id);
        }
        // A new vector (rare once a program runs): its lock is held marked and with the
        // backtrace signal blocked, so threads that wait for it never wait for a parked thread.
        let _slow = crate::sync::DisabledScope::enter();
        let mut shard = self.shards[s].lock();
        if let Some(r) = shard.by_frames.find(hash, |r| {
            // SAFETY: the index holds only live records, and the shard lock held here keeps
            // them from being collected while their frames are compared.
            unsafe { Record::frames(r) == frames }
        }) {
            // SAFETY: live record, under the shard lock.
            return Some(unsafe { (*r).id.load(Ordering::Relaxed) });
        }
        let seq = shard.next_seq;
        let id = (seq as u64 * SHARDS as u64 + s as u64 + FIRST_ID as u64)
            .try_into()
            .ok()?;
        let r = shard.alloc(class)?;
        // A reader without the lock may still be comparing this slot's old contents (it was
        // freed by a collection): the fence orders that collection's version change before
        // the stores below, so a reader that sees any of them sees the new version too.
        fence(Ordering::Release);
        // SAFETY: r is a slot with room for CLASSES[class] >= frames.len() frames; id, len
        // and frames are stored atomically (see `Record::holds`), the rest is ours under the
        // lock.
        unsafe {
            (*r).id.store(id, Ordering::Relaxed);
            (*r).len.store(frames.len() as u32, Ordering::Relaxed);
            core::ptr::addr_of_mut!((*r).marked).write(false);
            core::ptr::addr_of_mut!((*r).hash).write(hash);
            core::ptr::addr_of_mut!((*r).next_free).write(core::ptr::null_mut());
            let stored = Record::frames_ptr(r);
            for (i, &f) in frames.iter().enumerate() {
                (*stored.add(i)).store(f, Ordering::Relaxed);
            }
        }
        // The frames index last: once a reader without the lock finds the record there, it is
        // complete and has its id.
        if !shard.by_id.insert(id as u64, r) {
            shard.free_record(r);
            return None;
        }
        if !shard.by_frames.insert(hash, r) {
            shard.by_id.remove(id as u64, r);
            shard.free_record(r);
            return None;
        }
        self.published[s]
            .frames_map
            .store(shard.by_frames.map, Ordering::Release);
        shard.next_seq = seq + 1;
        shard.live += 1;
        drop(shard);
        let records = self.records.fetch_add(1, Ordering::Relaxed) + 1;
        if records > self.collect_at.load(Ordering::Relaxed) {
            self.collection_wanted.store(true, Ordering::Relaxed);
        }
        Some(id)
    }

    /// The id of `frames` if shard `s` holds it, found without the lock (a seqlock read:
    /// `None` also when a collection got in the way; the caller then looks under the lock).
    fn find_published(&self, s: usize, hash: u64, frames: &[usize]) -> Option<u32> {
        let published = &self.published[s];
        let version = published.version.load(Ordering::Acquire);
        if version & 1 != 0 {
            return None;
        }
        let map = published.frames_map.load(Ordering::Acquire);
        // SAFETY: frames-index mappings are never unmapped; records are slots of mappings that
        // are never unmapped either, filled within their class (`Record::holds`).
        let id = unsafe {
            let r = probe(slots_of(map), hash, |r| Record::holds(r, frames))?;
            (*r).id.load(Ordering::Relaxed)
        };
        fence(Ordering::Acquire);
        // Unchanged: no collection freed (let alone reused) the record while it was compared.
        (published.version.load(Ordering::Relaxed) == version).then_some(id)
    }

    /// True once enough records were made since the last collection (a relaxed load of a line
    /// that is written about once per new record).
    #[inline]
    pub fn collection_wanted(&self) -> bool {
        self.collection_wanted.load(Ordering::Relaxed)
    }

    /// Frees every record whose id `mark_in_use` does not pass to the function it is given,
    /// and sets the next collection at twice the survivors, or later when the pass was long:
    /// `scanned` is the number of entries `mark_in_use` visits. The caller must hold off
    /// everything that could store an id it does not report (the live table's locks, for the
    /// live table).
    pub fn collect(&self, scanned: usize, mark_in_use: impl FnOnce(&mut dyn FnMut(u32))) {
        let _slow = crate::sync::DisabledScope::enter();
        let mut shards: [_; SHARDS] = core::array::from_fn(|i| self.shards[i].lock());
        // Ids marked lately, by their low bits: most live blocks come from a few hot call paths,
        // and a repeat then costs a compare instead of an index lookup in a cold record table.
        // Marking twice is harmless, so a collision only costs the lookup.
        let mut recent = [0u32; RECENTLY_MARKED];
        mark_in_use(&mut |id| {
            let seen = &mut recent[id as usize % RECENTLY_MARKED];
            if *seen == id {
                return;
            }
            *seen = id;
            let Some(s) = shard_of_id(id) else { return };
            if let Some(r) = shards[s].find_id(id) {
                // SAFETY: live record, under its shard's lock.
                unsafe { (*r).marked = true };
            }
        });
        let survivors: usize = shards
            .iter_mut()
            .zip(&self.published)
            .map(|(s, p)| s.sweep(&p.version))
            .sum();
        self.records.store(survivors, Ordering::Relaxed);
        self.set_next_collection(
            survivors
                .saturating_mul(2)
                .max(survivors.saturating_add(scanned / ENTRIES_SCANNED_PER_RECORD)),
        );
    }

    /// Sets the next collection at twice `records` (when a collection could not run now).
    pub fn postpone_collection(&self, records: usize) {
        self.set_next_collection(records.saturating_mul(2));
    }

    fn set_next_collection(&self, records: usize) {
        self.collect_at
            .store(records.max(MIN_COLLECT_AT), Ordering::Relaxed);
        self.collection_wanted.store(false, Ordering::Relaxed);
    }

    /// Records currently held (including those a collection would free).
    pub fn records(&self) -> usize {
        self.records.load(Ordering::Relaxed)
    }

    /// Whether `id` names a record (it may have been collected since it was read).
    pub fn contains(&self, id: u32) -> bool {
        let Some(s) = shard_of_id(id) else {
            return false;
        };
        let _slow = crate::sync::DisabledScope::enter();
        self.shards[s].lock().find_id(id).is_some()
    }

    /// Calls `f` with the frames of `id` (under the shard lock: `f` must not use the table).
    pub fn with_frames<R>(&self, id: u32, f: impl FnOnce(&[usize]) -> R) -> Option<R> {
        let s = shard_of_id(id)?;
        let _slow = crate::sync::DisabledScope::enter();
        let shard = self.shards[s].lock();
        let r = shard.find_id(id)?;
        // SAFETY: live record, under the shard lock.
        Some(f(unsafe { Record::frames(r) }))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Collects, keeping exactly `keep`.
    fn collect_keeping(t: &BacktraceTable, keep: &[u32]) {
        t.collect(keep.len(), |mark| keep.iter().for_each(|&id| mark(id)));
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
        t.collect(scanned, |mark| ids.iter().for_each(|&id| mark(id)));
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
}
