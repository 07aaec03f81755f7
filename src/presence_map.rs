//! The presence map: which user pointers are live, one lane per 16 bytes of address space; a
//! lane is one bit ("live") or, in the size map, 16 bits (the block's size plus one).
//!
//! ## Model
//!
//! Without backtraces, tracking only has to answer "is this pointer a live block of ours?"
//! before the memory behind it is read, and keep each block's requested size for the reports
//! (malloc_info, leak reports, the unreachable check). With a header the header holds the size,
//! and one bit per block is enough; without, the size map keeps it in the block's lane. A hash
//! table answers with a 16-byte entry in a line chosen by hash, which for a heap larger than the
//! cache is a cache miss on every free and every allocation, and two locked instructions per
//! insertion. A map of the address space answers with a lane next to the lanes of the
//! neighbouring blocks: the heap's 10,000 blocks of a few megabytes need a few kilobytes of bits
//! or a few hundred of lanes, which stay in the cache, and an insertion or a removal is one
//! locked `or`/`and`. (docs/design.md, "Presence map"; docs/spec/android-versions.md: the table
//! is a means, any structure with the same answers will do.)
//!
//! Addresses below 2^48 are covered: a root of 2^18 leaves, each 1 GiB of address space as
//! 2^26 lanes (8 MiB of virtual memory for bits, 128 MiB for 16-bit lanes, mapped on first use,
//! of which only the pages whose lanes are used ever become resident). Leaves are published by
//! compare-and-swap and never unmapped, so the map takes no lock and readers never wait: a
//! thread parked by bionic's backtrace signal (docs/design.md, "The signal-33 rule") holds
//! nothing anyone waits for.
//!
//! Pointers the map cannot hold are refused, and the caller keeps them elsewhere: ones not
//! 16-aligned (a lane per 16 bytes would confuse a block with a pointer just past its start),
//! ones above 2^48, and ones whose top byte differs from the first pointer's (arm64 bionic
//! tags heap pointers in the top byte, the same tag for every block unless memory tagging
//! hands out random ones). A leaf that cannot be mapped also refuses.
//!
//! Each leaf also keeps a summary, one bit per page of its lanes that has ever held a lane, so
//! that a walk over every live pointer (snapshots: malloc_iterate, unreachable scans) reads only
//! those pages.

use core::ptr::null_mut;
use core::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};

const GRANULE_SHIFT: u32 = 4;
const LEAF_SHIFT: u32 = 30;
/// 48 bits of address on LP64 (the top byte is a tag, see `top_of`); all 32 on ILP32.
const ADDRESS_BITS: u32 = if usize::BITS > 48 { 48 } else { usize::BITS };
/// Where a pointer's tag byte starts (arm64's top-byte tags); ILP32 pointers have none.
#[cfg(target_pointer_width = "64")]
const TOP_SHIFT: u32 = 56;

/// A pointer's tag byte (0 on ILP32).
#[inline(always)]
fn top_of(pointer: usize) -> usize {
    #[cfg(target_pointer_width = "64")]
    return pointer >> TOP_SHIFT;
    #[cfg(not(target_pointer_width = "64"))]
    return {
        let _ = pointer;
        0
    };
}

/// A pointer without its tag byte.
#[inline(always)]
fn untagged(pointer: usize) -> usize {
    #[cfg(target_pointer_width = "64")]
    return pointer & ((1 << TOP_SHIFT) - 1);
    #[cfg(not(target_pointer_width = "64"))]
    return pointer;
}

/// An untagged address with tag byte `top` put back.
#[inline(always)]
fn tagged(address: usize, top: usize) -> usize {
    #[cfg(target_pointer_width = "64")]
    return address | (top << TOP_SHIFT);
    #[cfg(not(target_pointer_width = "64"))]
    return {
        let _ = top;
        address
    };
}
const ROOT_ENTRIES: usize = 1 << (ADDRESS_BITS - LEAF_SHIFT);
const GRANULES_PER_LEAF: usize = 1 << (LEAF_SHIFT - GRANULE_SHIFT);
/// Words of lanes per summary bit: one page of them.
const WORDS_PER_PAGE: usize = 4096 / 8;
/// `top_byte` before the first insertion (it holds the top byte plus one, so that an all-zero
/// map is a valid empty one).
const TOP_UNSET: usize = 0;

/// A map with a value of `LANE_BITS` bits per granule instead of one bit: the sizes of the
/// blocks of a process without headers (docs/design.md, "Presence map").
pub type SizeMap = PresenceMap<16>;

/// The live pointers, each with a value of `LANE_BITS` bits (its lane; zero: not live). With
/// one bit the value is only "live".
pub struct PresenceMap<const LANE_BITS: u32 = 1> {
    /// Leaves: `SUMMARY_WORDS` words of summary, then `LEAF_WORDS` words of lanes.
    root: [AtomicPtr<AtomicU64>; ROOT_ENTRIES],
    /// One more than the top byte every pointer of the map carries (learned from the first
    /// insertion); `TOP_UNSET` before.
    top_byte: AtomicUsize,
}

/// Where a pointer's lane is.
#[derive(Clone, Copy)]
struct Place {
    leaf: usize,
    word: usize,
    shift: u32,
}

/// One leaf's summary and lanes.
#[derive(Clone, Copy)]
struct Leaf<'a, const LANE_BITS: u32> {
    summary: &'a [AtomicU64],
    words: &'a [AtomicU64],
}

impl<const LANE_BITS: u32> PresenceMap<LANE_BITS> {
    const LANES_PER_WORD: usize = 64 / LANE_BITS as usize;
    const LEAF_WORDS: usize = GRANULES_PER_LEAF / Self::LANES_PER_WORD;
    const SUMMARY_WORDS: usize = Self::LEAF_WORDS / WORDS_PER_PAGE / 64;
    const LEAF_BYTES: usize = (Self::SUMMARY_WORDS + Self::LEAF_WORDS) * 8;
    const LANE_MASK: u64 = u64::MAX >> (64 - LANE_BITS);
    /// The largest value a lane holds.
    pub const MAX_VALUE: u64 = Self::LANE_MASK;

    pub const fn new() -> Self {
        assert!(LANE_BITS.is_power_of_two() && LANE_BITS <= 32);
        PresenceMap {
            root: [const { AtomicPtr::new(null_mut()) }; ROOT_ENTRIES],
            top_byte: AtomicUsize::new(TOP_UNSET),
        }
    }

    /// The place of `pointer`'s lane, if the map can hold it (`top` being the top byte pointers
    /// of the map carry).
    #[inline(always)]
    fn place(pointer: usize, top: usize) -> Option<Place> {
        let address = untagged(pointer);
        if pointer & ((1 << GRANULE_SHIFT) - 1) != 0
            || (ADDRESS_BITS < usize::BITS && address >> (ADDRESS_BITS % usize::BITS) != 0)
            || top_of(pointer) + 1 != top
        {
            return None;
        }
        let in_leaf = (address >> GRANULE_SHIFT) & (GRANULES_PER_LEAF - 1);
        Some(Place {
            leaf: address >> LEAF_SHIFT,
            word: in_leaf / Self::LANES_PER_WORD,
            shift: (in_leaf % Self::LANES_PER_WORD) as u32 * LANE_BITS,
        })
    }

    #[inline(always)]
    fn leaf(&self, index: usize) -> Option<Leaf<'_, LANE_BITS>> {
        let base = self.root[index].load(Ordering::Acquire);
        if base.is_null() {
            return None;
        }
        // SAFETY: a published leaf is a zero-initialised mapping of LEAF_BYTES (all-zero bytes
        // are valid atomics), never unmapped while the map is in use.
        unsafe {
            Some(Leaf {
                summary: core::slice::from_raw_parts(base, Self::SUMMARY_WORDS),
                words: core::slice::from_raw_parts(base.add(Self::SUMMARY_WORDS), Self::LEAF_WORDS),
            })
        }
    }

    /// Marks `pointer` live. False if the map cannot hold it (see the module doc): the caller
    /// keeps it elsewhere.
    #[inline]
    pub fn insert(&self, pointer: usize) -> bool {
        self.insert_value(pointer, 1)
    }

    /// Marks `pointer` live with `value` (1..=MAX_VALUE) in its lane. False if the map cannot
    /// hold it.
    #[inline]
    pub fn insert_value(&self, pointer: usize, value: u64) -> bool {
        debug_assert!(value != 0 && value <= Self::MAX_VALUE);
        let mut top = self.top_byte.load(Ordering::Relaxed);
        if top == TOP_UNSET {
            top = self.learn_top_byte(pointer);
        }
        let Some(place) = Self::place(pointer, top) else {
            return false;
        };
        let leaf = match self.leaf(place.leaf) {
            Some(leaf) => leaf,
            None => match self.map_leaf(place.leaf) {
                Some(leaf) => leaf,
                None => return false,
            },
        };
        // Release: a walker that sees the lane sees what the caller wrote before (the header).
        leaf.words[place.word].fetch_or(value << place.shift, Ordering::Release);
        let page = place.word / WORDS_PER_PAGE;
        let summary = &leaf.summary[page / 64];
        let page_bit = 1 << (page % 64);
        if summary.load(Ordering::Relaxed) & page_bit == 0 {
            summary.fetch_or(page_bit, Ordering::Release);
        }
        true
    }

    #[cold]
    fn learn_top_byte(&self, pointer: usize) -> usize {
        let top = top_of(pointer) + 1;
        match self
            .top_byte
            .compare_exchange(TOP_UNSET, top, Ordering::Relaxed, Ordering::Relaxed)
        {
            Ok(_) => top,
            Err(learned) => learned,
        }
    }

    #[cold]
    #[inline(never)]
    fn map_leaf(&self, index: usize) -> Option<Leaf<'_, LANE_BITS>> {
        let fresh = crate::pages::map(Self::LEAF_BYTES)?.cast::<AtomicU64>();
        match self.root[index].compare_exchange(
            null_mut(),
            fresh.as_ptr(),
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => {}
            // SAFETY: our own mapping, never published.
            Err(_) => unsafe { crate::pages::unmap(fresh.cast::<u8>(), Self::LEAF_BYTES) },
        }
        self.leaf(index)
    }

    /// Clears `pointer`'s lane; true if it was set (the block was live and is no longer).
    #[inline]
    pub fn remove(&self, pointer: usize) -> bool {
        self.take(pointer) != 0
    }

    /// Clears `pointer`'s lane and returns what it held (0: the pointer was not live).
    #[inline]
    pub fn take(&self, pointer: usize) -> u64 {
        let Some((leaf, place)) = self.find(pointer) else {
            return 0;
        };
        let lane = Self::LANE_MASK << place.shift;
        (leaf.words[place.word].fetch_and(!lane, Ordering::AcqRel) & lane) >> place.shift
    }

    #[inline]
    pub fn contains(&self, pointer: usize) -> bool {
        self.value(pointer) != 0
    }

    /// What `pointer`'s lane holds (0: not live).
    #[inline]
    pub fn value(&self, pointer: usize) -> u64 {
        self.find(pointer).map_or(0, |(leaf, place)| {
            (leaf.words[place.word].load(Ordering::Acquire) >> place.shift) & Self::LANE_MASK
        })
    }

    #[inline(always)]
    fn find(&self, pointer: usize) -> Option<(Leaf<'_, LANE_BITS>, Place)> {
        let place = Self::place(pointer, self.top_byte.load(Ordering::Relaxed))?;
        Some((self.leaf(place.leaf)?, place))
    }

    /// Calls `f` with every pointer marked live, in address order. Pointers marked or cleared
    /// meanwhile by other threads may or may not be seen.
    pub fn for_each(&self, mut f: impl FnMut(usize)) {
        self.for_each_value(|pointer, _| f(pointer));
    }

    /// `for_each` with each pointer's value.
    pub fn for_each_value(&self, f: impl FnMut(usize, u64)) {
        self.walk(0, 1, f);
    }

    /// `for_each` over one of `parts` parts of the map (the pages of lanes whose number is
    /// `part` modulo `parts`), so that a long walk can be done a part at a time.
    pub fn for_each_in_part(&self, part: usize, parts: usize, mut f: impl FnMut(usize)) {
        self.walk(part, parts, |pointer, _| f(pointer));
    }

    fn walk(&self, part: usize, parts: usize, mut f: impl FnMut(usize, u64)) {
        let top = self.top_byte.load(Ordering::Relaxed);
        if top == TOP_UNSET {
            return;
        }
        let pages_per_leaf = Self::SUMMARY_WORDS * 64;
        for index in 0..ROOT_ENTRIES {
            let Some(leaf) = self.leaf(index) else {
                continue;
            };
            for (s, summary) in leaf.summary.iter().enumerate() {
                let mut pages = summary.load(Ordering::Acquire);
                while pages != 0 {
                    let page = s * 64 + pages.trailing_zeros() as usize;
                    pages &= pages - 1;
                    if (index * pages_per_leaf + page) % parts != part {
                        continue;
                    }
                    for word in page * WORDS_PER_PAGE..(page + 1) * WORDS_PER_PAGE {
                        let mut lanes = leaf.words[word].load(Ordering::Acquire);
                        while lanes != 0 {
                            let lane = lanes.trailing_zeros() / LANE_BITS;
                            let shift = lane * LANE_BITS;
                            let value = (lanes >> shift) & Self::LANE_MASK;
                            lanes &= !(Self::LANE_MASK << shift);
                            let granule = word * Self::LANES_PER_WORD + lane as usize;
                            let address = (index << LEAF_SHIFT) | (granule << GRANULE_SHIFT);
                            f(tagged(address, top - 1), value);
                        }
                    }
                }
            }
        }
    }

    /// How many pointers are marked live (a whole walk).
    #[cfg(test)]
    pub fn count(&self) -> usize {
        let mut n = 0;
        self.for_each(|_| n += 1);
        n
    }
}

/// For tests: the leaves of a map that is dropped (static maps live for the process).
#[cfg(test)]
impl<const LANE_BITS: u32> Drop for PresenceMap<LANE_BITS> {
    fn drop(&mut self) {
        for entry in &self.root {
            if let Some(leaf) = core::ptr::NonNull::new(entry.load(Ordering::Acquire)) {
                // SAFETY: our mapping; nobody uses a dropped map.
                unsafe { crate::pages::unmap(leaf.cast::<u8>(), Self::LEAF_BYTES) };
            }
        }
    }
}

#[cfg(test)]
mod tests;
