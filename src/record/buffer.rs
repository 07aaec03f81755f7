//! The entry array: fixed capacity, mapped once at start-up (untouched pages cost nothing),
//! appended through an atomic index; a write closes the gate, so that calls arriving meanwhile
//! wait for it (and are recorded after it, spec §11.6), and waits for calls filling their entry.

use crate::log::log_info;
use crate::pages;
use crate::sync::{Gate, GateGuard};
use core::ptr::NonNull;
use core::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

/// Entry types, numbered as memory_trace::Entry's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    Malloc = 0,
    Calloc = 1,
    Memalign = 2,
    Realloc = 3,
    Free = 4,
    ThreadDone = 5,
}

impl Kind {
    pub fn from_u8(v: u8) -> Option<Kind> {
        Some(match v {
            0 => Kind::Malloc,
            1 => Kind::Calloc,
            2 => Kind::Memalign,
            3 => Kind::Realloc,
            4 => Kind::Free,
            5 => Kind::ThreadDone,
            _ => return None,
        })
    }
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Entry {
    pub tid: i32,
    /// `Kind as u8`; `UNFILLED` in memory until the call publishes the entry.
    pub kind: u8,
    pub ptr: u64,
    pub size: u64,
    /// old pointer (realloc), element count (calloc) or alignment (memalign).
    pub u: u64,
    pub present: i64,
    pub start_ns: u64,
    pub end_ns: u64,
}

/// Stored kinds are offset by one so that zeroed memory reads as "reserved, never filled".
const UNFILLED: u8 = 0;

pub struct Buffer {
    entries: AtomicPtr<Entry>,
    capacity: AtomicUsize,
    next: AtomicUsize,
    gate: Gate,
}

pub static BUFFER: Buffer = Buffer {
    entries: AtomicPtr::new(core::ptr::null_mut()),
    capacity: AtomicUsize::new(0),
    next: AtomicUsize::new(0),
    gate: Gate::new(),
};

/// A reserved entry; holding it keeps a write from starting until the entry is filled.
pub struct Slot {
    index: usize,
    _writing_waits: GateGuard,
}

impl Buffer {
    pub fn init(&'static self, capacity: usize) -> bool {
        let Some(bytes) = capacity.checked_mul(size_of::<Entry>()) else {
            return false;
        };
        let Some(p) = pages::map(bytes) else {
            return false;
        };
        self.entries.store(p.as_ptr().cast(), Ordering::Release);
        self.capacity.store(capacity, Ordering::Release);
        true
    }

    /// The next entry, or None once the array is full. While a write is in progress the call
    /// waits for it (spec §11.6: calls made during a write are recorded after it); the writing
    /// thread itself never gets here (it is marked, its allocations are not intercepted).
    #[inline]
    pub fn reserve(&'static self) -> Option<Slot> {
        let guard = self.gate.enter();
        let capacity = self.capacity.load(Ordering::Relaxed);
        // Past the end the index keeps growing harmlessly: usize does not wrap in practice.
        let index = self.next.fetch_add(1, Ordering::Relaxed);
        if index >= capacity {
            return None;
        }
        if index + 1 == capacity {
            log_info!("Maximum number of records added, all new operations will be dropped.");
        }
        Some(Slot {
            index,
            _writing_waits: guard,
        })
    }

    pub fn fill(&self, slot: Slot, mut entry: Entry) {
        entry.kind += 1;
        // SAFETY: `slot.index` < capacity was reserved by this thread alone; the mapping lives
        // for the process; a writer reads it only after the slot's gate guard is dropped.
        unsafe {
            self.entries
                .load(Ordering::Relaxed)
                .add(slot.index)
                .write(entry)
        };
    }

    pub fn release(&self, _slot: Slot) {}

    /// Closes the gate and waits for calls filling entries; returns the filled prefix.
    pub fn begin_write(&self) -> &[Entry] {
        self.gate.close();
        let n = self
            .next
            .load(Ordering::Acquire)
            .min(self.capacity.load(Ordering::Acquire));
        match NonNull::new(self.entries.load(Ordering::Acquire)) {
            // SAFETY: the first `n` entries were reserved; every reserving call has finished
            // (the gate is closed and drained), so nothing writes them now.
            Some(p) => unsafe { core::slice::from_raw_parts(p.as_ptr(), n) },
            None => &[],
        }
    }

    /// Ends a write: with `clear`, the entries are dropped (their pages given back) and the
    /// index starts over.
    pub fn end_write(&self, clear: bool) {
        if clear {
            let n = self.next.swap(0, Ordering::AcqRel);
            let n = n.min(self.capacity.load(Ordering::Acquire));
            let p = self.entries.load(Ordering::Acquire);
            if !p.is_null() && n > 0 {
                // SAFETY: zeroing the used prefix of our own mapping; no call is filling it
                // (the gate is still closed).
                unsafe { core::ptr::write_bytes(p, 0, n) };
            }
        }
        self.gate.open();
    }

    /// Fork child: only the forking thread exists. A write another thread had in progress
    /// will never end here, so the gate is reopened as well as drained.
    pub fn reset_in_child(&self) {
        self.gate.reset_in_child();
        self.gate.open();
    }
}

/// The entry's kind, or None for a reserved entry that was never filled.
pub fn kind_of(e: &Entry) -> Option<Kind> {
    if e.kind == UNFILLED {
        None
    } else {
        Kind::from_u8(e.kind - 1)
    }
}
