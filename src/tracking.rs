//! Pointer tracking: the live-pointer table, the interned backtraces, and what is captured when
//! an allocation is recorded (docs/spec/allocation.md#allocation-backtraces). Where the live
//! blocks are kept when not in the table (the presence and size maps) is `maps`.

use crate::backtrace::{self, BacktraceTable, LiveIds, MemoHit, NOTES, Origin};
use crate::live_table::{Info, Key, LiveTable};
use crate::signals::BACKTRACE_ENABLED;
use crate::state::State;
use core::mem::MaybeUninit;
use core::sync::atomic::{AtomicBool, Ordering};

/// Marks backtrace ids that a module above this one keeps in use outside the live table (the
/// `error_backtraces` extension's held free_track blocks, src/error_context.rs).
pub type MarkInUse = fn(&mut dyn FnMut(u32));

/// Set once by initialize (src/lifecycle.rs) when a feature needs it, so that the live table's
/// collections know nothing of the modules above them.
static IN_USE_ELSEWHERE: crate::sync::Hook<MarkInUse> = crate::sync::Hook::new();

pub fn set_in_use_elsewhere(mark: MarkInUse) {
    IN_USE_ELSEWHERE.set(mark);
}

fn in_use_elsewhere() -> Option<MarkInUse> {
    IN_USE_ELSEWHERE.get()
}

/// Old tables are unmapped once every call that was inside the library when they were replaced
/// has left (see `live_table`'s module doc).
pub static LIVE_TABLE: LiveTable =
    LiveTable::new(|seen| crate::sync::GATE.observe_quiescence(seen));
pub static BACKTRACES: BacktraceTable = BacktraceTable::new();

/// Backtrace slot values below the interned ids.
pub const BT_OFF: u32 = 0;
pub const BT_EMPTY: u32 = 1;

const ZYGOTE_BIT: u32 = 1 << 31;

/// Decodes a stored size: (size, zygote child).
pub fn decode_size(stored: u32) -> (usize, bool) {
    ((stored & !ZYGOTE_BIT) as usize, stored & ZYGOTE_BIT != 0)
}

/// Room for one captured stack, left uninitialised: zeroing all MAX_FRAMES slots on every
/// allocation cost as much as a warm walk.
pub struct FrameBuffer {
    storage: [MaybeUninit<usize>; backtrace::MAX_FRAMES],
    /// The first `len` slots are initialised frames.
    len: usize,
    /// The memo version the capture's later frames were replayed from, if any.
    hit: Option<MemoHit>,
}

impl FrameBuffer {
    #[inline(always)]
    pub fn new() -> Self {
        // Built field by field: written as a struct literal, LLVM merged the uninitialised
        // array with `len` into one 2 KiB memset on every call.
        let mut buffer = MaybeUninit::<FrameBuffer>::uninit();
        // SAFETY: `len` and `hit` are written through raw pointers into the uninitialised
        // struct; the only other field is an array of MaybeUninit, valid uninitialised.
        unsafe {
            core::ptr::addr_of_mut!((*buffer.as_mut_ptr()).len).write(0);
            core::ptr::addr_of_mut!((*buffer.as_mut_ptr()).hit).write(None);
            buffer.assume_init()
        }
    }

    pub fn frames(&self) -> &[usize] {
        // SAFETY: the first `len` slots are initialised (the invariant of every writer).
        unsafe { core::slice::from_raw_parts(self.storage.as_ptr().cast::<usize>(), self.len) }
    }

    /// Captures up to `frames` frames of the current stack, subject to the size filter of
    /// `backtrace_min_size` / `backtrace_max_size`. Leaves the buffer empty when filtered out or
    /// when nothing was found.
    pub fn capture(&mut self, state: &State, origin: &Origin, size: usize, frames: usize) {
        self.len = 0;
        self.hit = None;
        if let Some((min, max)) = state.plan.capture_sizes
            && (size < min || size > max)
        {
            return;
        }
        let frames = frames.min(backtrace::MAX_FRAMES);
        // SAFETY: the first `frames` slots are zeroed before the slice over them is made, so it
        // only covers initialised integers.
        let buf = unsafe {
            core::ptr::write_bytes(self.storage.as_mut_ptr(), 0, frames);
            core::slice::from_raw_parts_mut(self.storage.as_mut_ptr().cast::<usize>(), frames)
        };
        (self.len, self.hit) = backtrace::capture_from(buf, origin);
    }

    /// Replaces the contents with `frames`.
    pub fn copy_from(&mut self, frames: &[usize]) {
        let n = frames.len().min(backtrace::MAX_FRAMES);
        for (dst, &src) in self.storage.iter_mut().zip(&frames[..n]) {
            dst.write(src);
        }
        self.len = n;
        self.hit = None;
    }
}

/// Records a live allocation of `size` bytes at `pointer`. Adds nothing (and says so once in
/// the log) when the table cannot grow.
pub fn track(state: &State, origin: &Origin, pointer: usize, size: usize) {
    // A zygote child's blocks carry their flag in the table (malloc_info's order needs it).
    let zygote = state.zygote_child();
    match live_blocks() {
        IN_PRESENCE if !zygote && PRESENCE.insert(pointer) => return,
        IN_SIZES
            if size <= SIZES_MAX && !zygote && SIZES.insert_value(pointer, size as u64 + 1) =>
        {
            return;
        }
        _ => {}
    }
    let mut stored = size.min(crate::header::MAX_SIZE) as u32;
    if zygote {
        stored |= ZYGOTE_BIT;
    }
    let mut entry = Entry::new(pointer, stored, live_blocks() == IN_PRESENCE_IDS && !zygote);
    if !state.plan.capture || !BACKTRACE_ENABLED.load(Ordering::Relaxed) {
        entry.add(BT_OFF);
        return;
    }
    track_with_backtrace(state, origin, entry, size);
    if BACKTRACES.collection_wanted() {
        collect_step();
    }
}

/// Where a tracked block's record goes: a live-table entry, or a presence-map bit with the
/// id in the block's header. Holds the pointer only mangled (`track_with_backtrace`'s doc).
#[derive(Clone, Copy)]
enum Entry {
    /// The key and the stored size (with the zygote flag).
    Table(Key, u32),
    Header {
        mangled: usize,
        stored: u32,
    },
}

impl Entry {
    /// The record of `pointer` with the stored size `stored`: a presence-map bit with the id in
    /// the header when `in_header`, else a table entry.
    fn new(pointer: usize, stored: u32, in_header: bool) -> Entry {
        if in_header {
            Entry::Header {
                mangled: Key::mangle(pointer),
                stored,
            }
        } else {
            Entry::Table(Key::of(pointer), stored)
        }
    }

    /// Records the block with `id`. A presence map that refuses the pointer sends it to the
    /// table (and the entry becomes a table entry for later `set`s).
    fn add(&mut self, id: u32) -> bool {
        if let Entry::Header { mangled, stored } = *self {
            let pointer = Key::mangle(mangled);
            // SAFETY: a block being allocated by this call: its header is ours and mapped.
            unsafe { id_slot(pointer).write_unaligned(id) };
            // Release inside: a walker that sees the bit sees the id.
            if PRESENCE.insert(pointer) {
                return true;
            }
            *self = Entry::Table(Key::of(pointer), stored);
        }
        let Entry::Table(key, size) = *self else {
            return false;
        };
        add(
            key,
            Info {
                size,
                backtrace_id: id,
            },
        )
    }

    /// Replaces the id of a block `add` recorded (still held by the calling thread).
    fn set(&self, id: u32) {
        match *self {
            Entry::Table(key, size) => {
                LIVE_TABLE.set_info(
                    key,
                    Info {
                        size,
                        backtrace_id: id,
                    },
                );
            }
            // SAFETY: as in `add`.
            Entry::Header { mangled, .. } => unsafe {
                id_slot(Key::mangle(mangled)).write_unaligned(id)
            },
        }
    }
}

fn add(key: Key, info: Info) -> bool {
    if LIVE_TABLE.add_key(key, info) {
        return true;
    }
    table_full();
    false
}

/// Set for good once an allocation could not be added to the live table (out of memory): from
/// then on a block the table does not know may still be one of ours, and is freed as one
/// instead of being reported (`verify`, `crossing::untracked_ours`).
static INCOMPLETE: AtomicBool = AtomicBool::new(false);

/// True once some allocation went untracked.
pub fn incomplete() -> bool {
    INCOMPLETE.load(Ordering::Relaxed)
}

#[cold]
#[inline(never)]
fn table_full() {
    // SeqCst: a thread that frees the untracked block after it was handed out sees the flag
    // (the pointer reached it through some synchronisation that orders this store first).
    if !INCOMPLETE.swap(true, Ordering::SeqCst) {
        crate::log::log_error!(
            "out of memory for the live allocation table: some allocations are not tracked"
        );
    }
}

/// Captures the allocation backtrace (subject to the size filter) and records the allocation
/// with its interned id (BT_EMPTY when nothing was captured). The capture runs before any of
/// the library's locks is taken (the unwinder takes the dynamic loader's lock). Out of line,
/// with its 2 KiB frame buffer, so that the caller's frame stays small; given the table's key,
/// not the pointer, as the table's insertion runs below that buffer, deeper than a program's
/// own stack use may ever clear again.
#[inline(never)]
fn track_with_backtrace(state: &State, origin: &Origin, entry: Entry, size: usize) {
    let mut buffer = FrameBuffer::new();
    buffer.capture(state, origin, size, state.config.backtrace_frames);
    let frames = buffer.frames();
    let intern = || {
        if frames.is_empty() {
            BT_EMPTY
        } else {
            BACKTRACES
                .intern_hashed(frames, BacktraceTable::hash(frames))
                .unwrap_or(BT_EMPTY)
        }
    };
    let Some(hit) = buffer.hit else {
        publish(entry, BACKTRACES.epoch(), intern);
        return;
    };
    // The later frames came from a memo: the id interned for the same stack may be noted on
    // it (backtrace/note.rs), valid while no collection has started since it was known in use.
    let prefix = frames.get(..hit.prefix_len()).unwrap_or(frames);
    let epoch = BACKTRACES.epoch();
    let noted = NOTES.get(&hit, prefix);
    if let Some(note) = noted
        && (note >> 32) as u32 == epoch
        && epoch & 1 == 0
    {
        let mut first = true;
        let id = note as u32;
        publish(entry, epoch, || {
            if core::mem::take(&mut first) {
                id
            } else {
                intern()
            }
        });
        return;
    }
    if let Some(id) = publish(entry, epoch, intern) {
        NOTES.set(&hit, prefix, (epoch as u64) << 32 | id as u64);
    }
}

// Collecting unused backtrace records (backtrace/table/collect.rs explains the model). A record
// is in use while an entry of the live table names it. Collections run a step at a time on
// allocating threads, and the hot path takes no lock, so a thread may store an id after the
// running collection passed that entry; each such thread compares the collection epoch before
// finding its id and after storing it, and, if a collection overlapped, makes sure its id
// survives (`publish`). Ids are never reused, so a stale id can only fail to resolve, never
// name another backtrace. Snapshots pin every record while they hold ids of blocks that may be
// freed meanwhile.

/// Adds `entry` with the id `intern` gives, and makes sure that id outlives any
/// collection that ran since `before` (the epoch when the id was last known to be in use): a
/// collection that overlapped may have missed the entry, so the id is kept for the running
/// collection or checked after it and, if freed, interned again. Never waits for a collection.
/// Returns the id when it was in use at epoch `before` with no collection since (even and
/// unchanged): the id can then be noted as in use at `before`.
fn publish(mut entry: Entry, mut before: u32, mut intern: impl FnMut() -> u32) -> Option<u32> {
    let mut id = intern();
    if !entry.add(id) {
        return None;
    }
    let first = before;
    loop {
        // SeqCst, as the collector's epoch changes: if the epoch is even and unchanged, any
        // collection starts after the entry is visible and its pass over the entry's shard
        // marks the id.
        let now = BACKTRACES.epoch();
        if now == before && now & 1 == 0 {
            return (now == first && id > BT_EMPTY).then_some(id);
        }
        if id <= BT_EMPTY || BACKTRACES.keep(id) {
            return None;
        }
        before = now;
        id = intern();
        entry.set(id);
    }
}

/// The live table as the collector sees it: shard by shard, each under its own lock.
struct LiveTableIds;

/// The live table's shards, then, when a feature above keeps ids elsewhere (`IN_USE_ELSEWHERE`),
/// one more "shard": those ids, marked last.
impl LiveIds for LiveTableIds {
    fn shards(&self) -> usize {
        crate::live_table::SHARDS + presence_parts() + usize::from(in_use_elsewhere().is_some())
    }

    fn for_each_id(&self, k: usize, f: &mut dyn FnMut(u32)) -> usize {
        if k < crate::live_table::SHARDS {
            return LIVE_TABLE.for_each_in_shard(k, |_, info| f(info.backtrace_id));
        }
        let k = k - crate::live_table::SHARDS;
        if k < presence_parts() {
            return for_each_id_in_part(k, f);
        }
        let mut n = 0;
        if let Some(mark_more) = in_use_elsewhere() {
            mark_more(&mut |id| {
                n += 1;
                f(id)
            });
        }
        n
    }

    fn cost_per_entry(&self, k: usize) -> usize {
        let presence = crate::live_table::SHARDS..crate::live_table::SHARDS + presence_parts();
        if presence.contains(&k) {
            PRESENCE_ENTRY_COST
        } else {
            1
        }
    }
}

#[cold]
#[inline(never)]
fn collect_step() {
    BACKTRACES.collect_step(&LiveTableIds);
}

/// Keeps every backtrace record alive while a snapshot of the live table (which holds ids of
/// blocks that may be freed meanwhile) is in use.
pub struct RecordPin(());

pub fn pin_records() -> RecordPin {
    BACKTRACES.pin();
    RecordPin(())
}

impl Drop for RecordPin {
    fn drop(&mut self) {
        BACKTRACES.unpin();
    }
}

/// Fork child: the other threads, their pins and any collection step are gone.
pub fn reset_in_child() {
    BACKTRACES.reset_in_child();
    LIVE_TABLE.reset_in_child();
}

/// A block's record, taken out of the live table by free, realloc or verification.
#[derive(Clone, Copy)]
pub struct Removed {
    info: Info,
    /// The collection epoch before the removal.
    epoch: u32,
    /// Where the block was: `IN_TABLE`, `IN_PRESENCE`, `IN_SIZES` or `IN_PRESENCE_IDS`.
    held_in: u8,
}

impl Removed {
    /// The block's allocation backtrace (an interned id, `BT_OFF` or `BT_EMPTY`).
    pub fn backtrace_id(&self) -> u32 {
        self.info.backtrace_id
    }
}

/// Starts loading the table line that tracking `pointer` (adding or removing it) will touch,
/// for a caller with other work to do first.
#[inline(always)]
pub fn prefetch(pointer: usize) {
    if live_blocks() == IN_TABLE {
        LIVE_TABLE.prefetch(pointer);
    }
}

/// Takes `pointer` out of the live table.
pub fn untrack(pointer: usize) -> Option<Removed> {
    let held_in = live_blocks();
    let in_map = |size| {
        Some(Removed {
            info: Info {
                size,
                backtrace_id: BT_OFF,
            },
            epoch: 0,
            held_in,
        })
    };
    match held_in {
        IN_PRESENCE if PRESENCE.remove(pointer) => return in_map(0),
        IN_SIZES => match SIZES.take(pointer) {
            0 => {}
            lane => return in_map(lane as u32 - 1),
        },
        _ => {}
    }
    let epoch = BACKTRACES.epoch();
    if held_in == IN_PRESENCE_IDS && PRESENCE.remove(pointer) {
        // The header's size too, so that the record can go back to the table if need be.
        // SAFETY: the bit was set: a live header-mode block of ours, which this call holds.
        let header = unsafe { header_at(pointer).read_unaligned() };
        return Some(Removed {
            info: Info {
                size: header.size.min(crate::header::MAX_SIZE) as u32,
                backtrace_id: read_id(pointer),
            },
            epoch,
            held_in,
        });
    }
    LIVE_TABLE.remove(pointer).map(|info| Removed {
        info,
        epoch,
        held_in: IN_TABLE,
    })
}

/// Puts a record taken by `untrack` back (the block stays as it was). Its backtrace record may
/// have been collected while it was out: then the allocation keeps its place in the table with
/// "nothing recorded" for a backtrace.
pub fn restore(pointer: usize, record: Removed) {
    // A map cannot refuse: it held this pointer a moment ago, its leaf stays mapped and its top
    // byte is the one the map learned.
    match record.held_in {
        IN_PRESENCE => {
            let held = PRESENCE.insert(pointer);
            debug_assert!(held);
            return;
        }
        IN_SIZES => {
            let held = SIZES.insert_value(pointer, record.info.size as u64 + 1);
            debug_assert!(held);
            return;
        }
        _ => {}
    }
    let entry = Entry::new(pointer, record.info.size, record.held_in == IN_PRESENCE_IDS);
    let mut id = record.info.backtrace_id;
    publish(entry, record.epoch, || {
        core::mem::replace(&mut id, BT_EMPTY)
    });
}

pub fn is_live(pointer: usize) -> bool {
    in_map(pointer) || LIVE_TABLE.get(pointer).is_some()
}

/// The allocation backtrace id of a live block; `None` when `pointer` is not in the table.
pub fn backtrace_of(pointer: usize) -> Option<u32> {
    if in_map(pointer) {
        if !ids_in_headers() {
            return Some(BT_OFF);
        }
        // The caller does not hold the block: another thread may free it meanwhile.
        let id = crate::platform::read_foreign_u32(id_slot(pointer) as usize);
        return Some(id.unwrap_or(BT_EMPTY));
    }
    LIVE_TABLE.get(pointer).map(|info| info.backtrace_id)
}

mod maps;

use maps::{
    IN_PRESENCE, IN_PRESENCE_IDS, IN_SIZES, IN_TABLE, PRESENCE_ENTRY_COST, SIZES_MAX,
    for_each_id_in_part, header_at, id_slot, in_map, live_blocks, presence_parts, read_id,
};
pub use maps::{
    PRESENCE, SCRATCH_BYTES, SIZES, for_each_present, for_each_sized, ids_in_headers,
    keep_live_blocks_in,
};

#[cfg(test)]
mod tests;
