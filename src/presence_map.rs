//! The presence map: which user pointers are live, one bit per 16 bytes of address space.
//!
//! ## Model
//!
//! In header mode without backtraces or leak tracking (a guard, alone or with free_track, fill,
//! verify_pointers), tracking only has to answer "is this pointer a live block of ours?" before
//! the header behind it is read: the header holds everything else (size, usable size). A hash
//! table answers that with a 16-byte entry in a line chosen by hash, which for a heap larger than
//! the cache is a cache miss on every free and every allocation, and two locked instructions per
//! insertion. A bitmap of the address space answers it with one bit next to the bits of the
//! neighbouring blocks: the heap's 10,000 blocks of a few megabytes need a few kilobytes of
//! bitmap, which stay in the cache, and an insertion or a removal is one locked `or`/`and`.
//! (docs/design.md, "Presence map"; docs/spec/android-versions.md: the table is a means, any
//! structure with the same answers will do.)
//!
//! Addresses below 2^48 are covered: a root of 2^18 leaves, each 1 GiB of address space as
//! 2^26 bits (8 MiB of virtual memory mapped on first use, of which only the pages whose bits
//! are used ever become resident). Leaves are published by compare-and-swap and never unmapped,
//! so the map takes no lock and readers never wait: a thread parked by bionic's backtrace
//! signal (docs/design.md, "The signal-33 rule") holds nothing anyone waits for.
//!
//! Pointers the map cannot hold are refused, and the caller keeps them elsewhere: ones not
//! 16-aligned (a bit per 16 bytes would confuse a block with a pointer just past its start),
//! ones above 2^48, and ones whose top byte differs from the first pointer's (arm64 bionic
//! tags heap pointers in the top byte, the same tag for every block unless memory tagging
//! hands out random ones). A leaf that cannot be mapped also refuses.
//!
//! Each leaf also keeps a summary, one bit per page of its bitmap that has ever held a bit, so
//! that a walk over every live pointer (snapshots: malloc_iterate, unreachable scans) reads only
//! those pages.

use core::ptr::null_mut;
use core::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};

const GRANULE_SHIFT: u32 = 4;
const LEAF_SHIFT: u32 = 30;
const ADDRESS_BITS: u32 = 48;
const ROOT_ENTRIES: usize = 1 << (ADDRESS_BITS - LEAF_SHIFT);
const LEAF_WORDS: usize = 1 << (LEAF_SHIFT - GRANULE_SHIFT - 6);
/// Words of bitmap per summary bit: one page of them.
const WORDS_PER_PAGE: usize = 4096 / 8;
const SUMMARY_WORDS: usize = LEAF_WORDS / WORDS_PER_PAGE / 64;
/// `top_byte` before the first insertion (it holds the top byte plus one, so that an all-zero
/// map is a valid empty one).
const TOP_UNSET: usize = 0;

struct Leaf {
    summary: [AtomicU64; SUMMARY_WORDS],
    words: [AtomicU64; LEAF_WORDS],
}

pub struct PresenceMap {
    root: [AtomicPtr<Leaf>; ROOT_ENTRIES],
    /// One more than the top byte every pointer of the map carries (learned from the first
    /// insertion); `TOP_UNSET` before.
    top_byte: AtomicUsize,
}

/// Where a pointer's bit is.
#[derive(Clone, Copy)]
struct Place {
    leaf: usize,
    word: usize,
    bit: u64,
}

impl PresenceMap {
    pub const fn new() -> Self {
        PresenceMap {
            root: [const { AtomicPtr::new(null_mut()) }; ROOT_ENTRIES],
            top_byte: AtomicUsize::new(TOP_UNSET),
        }
    }

    /// The place of `pointer`'s bit, if the map can hold it (`top` being the top byte pointers
    /// of the map carry).
    #[inline(always)]
    fn place(pointer: usize, top: usize) -> Option<Place> {
        let address = pointer & ((1 << 56) - 1);
        if pointer & ((1 << GRANULE_SHIFT) - 1) != 0
            || address >> ADDRESS_BITS != 0
            || (pointer >> 56) + 1 != top
        {
            return None;
        }
        let granule = address >> GRANULE_SHIFT;
        let in_leaf = granule & ((1 << (LEAF_SHIFT - GRANULE_SHIFT)) - 1);
        Some(Place {
            leaf: address >> LEAF_SHIFT,
            word: in_leaf >> 6,
            bit: 1 << (in_leaf & 63),
        })
    }

    #[inline(always)]
    fn leaf(&self, index: usize) -> Option<&Leaf> {
        // SAFETY: published leaves are never unmapped.
        unsafe { self.root[index].load(Ordering::Acquire).as_ref() }
    }

    /// Marks `pointer` live. False if the map cannot hold it (see the module doc): the caller
    /// keeps it elsewhere.
    #[inline]
    pub fn insert(&self, pointer: usize) -> bool {
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
        leaf.words[place.word].fetch_or(place.bit, Ordering::Release);
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
        let top = (pointer >> 56) + 1;
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
    fn map_leaf(&self, index: usize) -> Option<&Leaf> {
        let fresh = crate::pages::map(size_of::<Leaf>())?.cast::<Leaf>();
        match self.root[index].compare_exchange(
            null_mut(),
            fresh.as_ptr(),
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => {}
            // SAFETY: our own mapping, never published.
            Err(_) => unsafe { crate::pages::unmap(fresh.cast::<u8>(), size_of::<Leaf>()) },
        }
        self.leaf(index)
    }

    /// Clears `pointer`'s bit; true if it was set (the block was live and is no longer).
    #[inline]
    pub fn remove(&self, pointer: usize) -> bool {
        let Some((leaf, place)) = self.find(pointer) else {
            return false;
        };
        leaf.words[place.word].fetch_and(!place.bit, Ordering::AcqRel) & place.bit != 0
    }

    #[inline]
    pub fn contains(&self, pointer: usize) -> bool {
        self.find(pointer).is_some_and(|(leaf, place)| {
            leaf.words[place.word].load(Ordering::Acquire) & place.bit != 0
        })
    }

    #[inline(always)]
    fn find(&self, pointer: usize) -> Option<(&Leaf, Place)> {
        let place = Self::place(pointer, self.top_byte.load(Ordering::Relaxed))?;
        Some((self.leaf(place.leaf)?, place))
    }

    /// Calls `f` with every pointer marked live, in address order. Pointers marked or cleared
    /// meanwhile by other threads may or may not be seen.
    pub fn for_each(&self, mut f: impl FnMut(usize)) {
        let top = self.top_byte.load(Ordering::Relaxed);
        if top == TOP_UNSET {
            return;
        }
        for index in 0..ROOT_ENTRIES {
            let Some(leaf) = self.leaf(index) else {
                continue;
            };
            for (s, summary) in leaf.summary.iter().enumerate() {
                let mut pages = summary.load(Ordering::Acquire);
                while pages != 0 {
                    let page = s * 64 + pages.trailing_zeros() as usize;
                    pages &= pages - 1;
                    for word in page * WORDS_PER_PAGE..(page + 1) * WORDS_PER_PAGE {
                        let mut bits = leaf.words[word].load(Ordering::Acquire);
                        while bits != 0 {
                            let granule = word * 64 + bits.trailing_zeros() as usize;
                            bits &= bits - 1;
                            let address = (index << LEAF_SHIFT) | (granule << GRANULE_SHIFT);
                            f(address | ((top - 1) << 56));
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
impl Drop for PresenceMap {
    fn drop(&mut self) {
        for entry in &self.root {
            if let Some(leaf) = core::ptr::NonNull::new(entry.load(Ordering::Acquire)) {
                // SAFETY: our mapping; nobody uses a dropped map.
                unsafe { crate::pages::unmap(leaf.cast::<u8>(), size_of::<Leaf>()) };
            }
        }
    }
}

#[cfg(test)]
mod tests;
