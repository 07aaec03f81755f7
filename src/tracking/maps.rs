//! Where tracking keeps the live blocks when not in the live table: the presence map (bits,
//! with the size and backtrace id in the block's header) and the size map (16-bit lanes),
//! chosen once at initialize (docs/design.md, "Presence map"), and how collections read the
//! backtrace ids out of the headers.

use crate::header::{Header, Layout};
use crate::plan::{LiveBlocks, Plan};
use crate::presence_map::{PresenceMap, SizeMap};
use core::sync::atomic::{AtomicPtr, AtomicU8, AtomicUsize, Ordering};

/// Where the live blocks are kept when not in the live table (`Plan::live_blocks`,
/// docs/design.md "Presence map"): bits of `PRESENCE` with a header, 16-bit lanes of `SIZES`
/// (the size plus one) without. Blocks a map refuses (sizes above `SIZES_MAX`, pointers it
/// cannot hold) and blocks allocated in a zygote child (malloc_info orders them apart) go to
/// the live table, so every lookup that misses the map asks the table too.
pub static PRESENCE: PresenceMap = PresenceMap::new();
pub static SIZES: SizeMap = SizeMap::new();
pub(super) const SIZES_MAX: usize = SizeMap::MAX_VALUE as usize - 1;

pub(super) const IN_TABLE: u8 = 0;
pub(super) const IN_PRESENCE: u8 = 1;
pub(super) const IN_SIZES: u8 = 2;
/// `IN_PRESENCE` with each block's allocation backtrace id in its header (`header::ID_SLOT`).
pub(super) const IN_PRESENCE_IDS: u8 = 3;
static LIVE_BLOCKS: AtomicU8 = AtomicU8::new(IN_TABLE);
/// Under `IN_PRESENCE_IDS`: how far before a user pointer its header is (the layout's
/// `pointer_offset`).
static HEADER_BACK: AtomicUsize = AtomicUsize::new(0);

/// Called once by initialize with the plan's choice. The presence map's blocks are read
/// through `process_vm_readv` by snapshots and collections; where a seccomp filter refuses it,
/// the table serves instead.
pub fn keep_live_blocks_in(plan: &Plan, layout: &Layout) {
    let code = match plan.live_blocks {
        LiveBlocks::Presence if !crate::platform::can_read_foreign() => IN_TABLE,
        LiveBlocks::Presence if plan.capture => {
            HEADER_BACK.store(layout.pointer_offset, Ordering::Relaxed);
            IN_PRESENCE_IDS
        }
        LiveBlocks::Table => IN_TABLE,
        LiveBlocks::Presence => IN_PRESENCE,
        LiveBlocks::Sizes => IN_SIZES,
    };
    LIVE_BLOCKS.store(code, Ordering::Relaxed);
}

/// Whether the presence map's blocks carry their backtrace id in their header.
pub fn ids_in_headers() -> bool {
    live_blocks() == IN_PRESENCE_IDS
}

/// The header of a presence-map block under `IN_PRESENCE_IDS`.
#[inline(always)]
pub(super) fn header_at(pointer: usize) -> *mut Header {
    pointer.wrapping_sub(HEADER_BACK.load(Ordering::Relaxed)) as *mut Header
}

/// The id slot of a presence-map block under `IN_PRESENCE_IDS`.
#[inline(always)]
pub(super) fn id_slot(pointer: usize) -> *mut u32 {
    (header_at(pointer) as usize).wrapping_add(crate::header::ID_SLOT.unwrap_or(0)) as *mut u32
}

/// Reads the id of a block the caller knows is live and ours (it holds the block).
#[inline(always)]
pub(super) fn read_id(pointer: usize) -> u32 {
    // SAFETY: the header of a live header-mode block is ours and mapped; the slot is padding
    // only this module writes.
    unsafe { id_slot(pointer).read_unaligned() }
}

#[inline(always)]
pub(super) fn live_blocks() -> u8 {
    LIVE_BLOCKS.load(Ordering::Relaxed)
}

/// The presence map is marked in this many parts, at least one per step: a million live
/// blocks make parts of about 4,000, each about half a millisecond.
const PRESENCE_PARTS: usize = 256;
/// A presence-map entry costs about four table entries to mark (its id is read through the
/// kernel), so a step marks a quarter as many.
pub(super) const PRESENCE_ENTRY_COST: usize = 4;

pub(super) fn presence_parts() -> usize {
    if ids_in_headers() { PRESENCE_PARTS } else { 0 }
}

/// The ids in the headers of one part of the presence map's blocks. A block may be freed, its
/// memory even unmapped, while its slot is read: the slots are read through
/// `process_vm_readv`, neighbours together, and one that cannot be read is left out (its block
/// was freed a moment before). An id read from a block freed and reused meanwhile marks
/// some other record, or none: marking too much is harmless, and a block allocated after the
/// part was passed keeps its id alive itself (`publish`).
pub(super) fn for_each_id_in_part(part: usize, f: &mut dyn FnMut(u32)) -> usize {
    ids_in_part(part, mark_scratch(), f)
}

/// `for_each_id_in_part` with the buffer neighbouring slots are read through, if it could be
/// mapped. Without it (out of memory) every slot is read on its own: slower, but no live
/// block's record is left unmarked, which would let a collection free it.
fn ids_in_part(part: usize, scratch: Option<&mut [u8]>, f: &mut dyn FnMut(u32)) -> usize {
    const BATCH: usize = 256;
    let scratch = scratch.unwrap_or_default();
    let mut slots = [0usize; BATCH];
    let mut filled = 0;
    let mut count = 0;
    let mut flush = |slots: &[usize], f: &mut dyn FnMut(u32)| {
        let mut ids = [None; BATCH];
        let ids = &mut ids[..slots.len()];
        crate::platform::read_foreign_records::<4>(slots, ids, &mut *scratch);
        for id in ids.iter().flatten() {
            f(u32::from_ne_bytes(*id));
        }
    };
    PRESENCE.for_each_in_part(part, PRESENCE_PARTS, |pointer| {
        slots[filled] = id_slot(pointer) as usize;
        filled += 1;
        count += 1;
        if filled == BATCH {
            flush(&slots, f);
            filled = 0;
        }
    });
    flush(&slots[..filled], f);
    count
}

/// The buffer reads of headers go through (`platform::read_foreign_records`): 16 pages.
pub const SCRATCH_BYTES: usize = 64 * 1024;

/// The marking steps' buffer, mapped by the first and kept: a fresh one per part cost its page
/// faults every time (256 parts a collection).
static MARK_SCRATCH: AtomicPtr<u8> = AtomicPtr::new(core::ptr::null_mut());

/// The marking steps' buffer. Only marking steps use it, and they run one at a time (under the
/// collector's lock, src/backtrace/table/collect.rs).
fn mark_scratch() -> Option<&'static mut [u8]> {
    let mut memory = MARK_SCRATCH.load(Ordering::Acquire);
    if memory.is_null() {
        memory = crate::pages::map(SCRATCH_BYTES)?.as_ptr();
        MARK_SCRATCH.store(memory, Ordering::Release);
    }
    // SAFETY: a mapping of SCRATCH_BYTES never unmapped, used by one marking step at a time.
    Some(unsafe { core::slice::from_raw_parts_mut(memory, SCRATCH_BYTES) })
}

pub(super) fn in_map(pointer: usize) -> bool {
    match live_blocks() {
        IN_PRESENCE | IN_PRESENCE_IDS => PRESENCE.contains(pointer),
        IN_SIZES => SIZES.contains(pointer),
        _ => false,
    }
}

/// Calls `f` with every live block the presence map holds (none unless it is in use).
pub fn for_each_present(f: impl FnMut(usize)) {
    if matches!(live_blocks(), IN_PRESENCE | IN_PRESENCE_IDS) {
        PRESENCE.for_each(f);
    }
}

/// Calls `f` with every live block the size map holds and its size (none unless it is in use).
pub fn for_each_sized(mut f: impl FnMut(usize, usize)) {
    if live_blocks() == IN_SIZES {
        SIZES.for_each_value(|pointer, lane| f(pointer, lane as usize - 1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Blocks whose id slots lie in `memory`, ids 1..=n, in the (otherwise unused in unit
    /// tests) presence map.
    fn blocks_with_ids(memory: &mut [u64], n: usize) -> Vec<usize> {
        let base = memory.as_mut_ptr() as usize;
        let blocks: Vec<usize> = (0..n).map(|i| base + 64 * i).collect();
        for (i, &pointer) in blocks.iter().enumerate() {
            assert!(PRESENCE.insert(pointer));
            // SAFETY: the slot lies inside `memory` (64 bytes per block, slot before 64).
            unsafe { id_slot(pointer).write_unaligned(i as u32 + 1) };
        }
        blocks
    }

    fn ids_marked(scratch: Option<&mut [u8]>) -> Vec<u32> {
        let mut scratch = scratch;
        let mut ids = Vec::new();
        for part in 0..PRESENCE_PARTS {
            ids_in_part(part, scratch.as_deref_mut(), &mut |id| ids.push(id));
        }
        ids.sort_unstable();
        ids
    }

    #[test]
    #[cfg(target_pointer_width = "64")]
    fn every_id_is_marked_with_or_without_the_buffer() {
        assert_eq!(
            HEADER_BACK.load(Ordering::Relaxed) + crate::header::ID_SLOT.unwrap(),
            28
        );
        let mut memory = vec![0u64; 8 * 3000];
        let blocks = blocks_with_ids(&mut memory, 3000);
        let want: Vec<u32> = (1..=3000).collect();
        let mut buffer = vec![0u8; SCRATCH_BYTES];
        assert_eq!(ids_marked(Some(&mut buffer)), want);
        assert_eq!(
            ids_marked(None),
            want,
            "no buffer (out of memory): slot by slot"
        );
        for pointer in blocks {
            assert!(PRESENCE.remove(pointer));
        }
    }
}
