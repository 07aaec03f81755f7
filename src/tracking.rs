//! Pointer tracking: the live-pointer table, the interned backtraces, and what is captured when
//! an allocation is recorded (spec §9.1, abi §7.3–§7.4).

use crate::backtrace::{self, BacktraceTable, Origin};
use crate::config::bits;
use crate::pointers::{Info, PointerTable};
use crate::signals::BACKTRACE_ENABLED;
use crate::state::State;
use core::mem::MaybeUninit;
use core::sync::atomic::Ordering;

pub static POINTERS: PointerTable = PointerTable::new();
pub static BACKTRACES: BacktraceTable = BacktraceTable::new();

/// Backtrace slot values below the interned ids.
pub const BT_OFF: u32 = 0;
pub const BT_EMPTY: u32 = 1;

const ZYGOTE_BIT: u32 = 1 << 31;

/// Decodes a stored size: (size, zygote child).
pub fn decode_size(stored: u32) -> (usize, bool) {
    ((stored & !ZYGOTE_BIT) as usize, stored & ZYGOTE_BIT != 0)
}

/// Captures and interns the allocation backtrace if capture is on now. Must run before any of
/// the library's locks is taken (the unwinder takes the dynamic loader's lock).
fn allocation_backtrace(state: &State, origin: &Origin, size: usize) -> u32 {
    if !state.has(bits::BACKTRACE) || !BACKTRACE_ENABLED.load(Ordering::Relaxed) {
        return BT_OFF;
    }
    capture_interned(state, origin, size, state.config.backtrace_frames)
}

/// Room for one captured stack, left uninitialised: zeroing all MAX_FRAMES slots on every
/// allocation cost as much as a warm walk.
pub struct FrameBuffer {
    storage: [MaybeUninit<usize>; backtrace::MAX_FRAMES],
    /// The first `len` slots are initialised frames.
    len: usize,
}

impl FrameBuffer {
    #[inline(always)]
    pub fn new() -> Self {
        // Built field by field: written as a struct literal, LLVM merged the uninitialised
        // array with `len` into one 2 KiB memset on every call.
        let mut buffer = MaybeUninit::<FrameBuffer>::uninit();
        // SAFETY: `len` is written through a raw pointer into the uninitialised struct; the
        // only other field is an array of MaybeUninit, valid uninitialised.
        unsafe {
            core::ptr::addr_of_mut!((*buffer.as_mut_ptr()).len).write(0);
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
        let c = &state.config;
        if state.has(bits::BACKTRACE_SPECIFIC_SIZES)
            && (size < c.backtrace_min_size_bytes || size > c.backtrace_max_size_bytes)
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
        self.len = backtrace::capture_from(buf, origin);
    }

    /// Exchanges the first `slot.len()` frames with `slot`: the buffer's `len` frames go into
    /// the slot and the slot's first `slot_len` frames come back (free_track's ring, where the
    /// evicted entry's frames leave as the new one's arrive).
    pub fn swap_with(&mut self, slot: &mut [usize], slot_len: usize) {
        // Bounded by both sides (a row as long as MAX_FRAMES at most): no index can panic.
        let n = self
            .len
            .max(slot_len)
            .min(slot.len())
            .min(self.storage.len());
        for (i, stored) in slot.iter_mut().enumerate().take(n) {
            let old = *stored;
            if i < self.len {
                // SAFETY: slots below `len` are initialised.
                *stored = unsafe { self.storage[i].assume_init() };
            }
            self.storage[i].write(old);
        }
        self.len = slot_len.min(n);
    }

    /// Replaces the contents with `frames`.
    pub fn copy_from(&mut self, frames: &[usize]) {
        let n = frames.len().min(backtrace::MAX_FRAMES);
        for (dst, &src) in self.storage.iter_mut().zip(&frames[..n]) {
            dst.write(src);
        }
        self.len = n;
    }
}

/// Captures up to `frames` frames subject to the size filter; interned id or BT_EMPTY. Out of
/// line so that its frame buffer is gone before the caller goes on: a 2 KiB frame left in
/// `track` would push the table insertion's frames (which hold the new pointer) into stack the
/// program may later leave dead but unscrubbed, where the unreachable scan finds them.
#[inline(never)]
fn capture_interned(state: &State, origin: &Origin, size: usize, frames: usize) -> u32 {
    let mut buffer = FrameBuffer::new();
    buffer.capture(state, origin, size, frames);
    if buffer.frames().is_empty() {
        return BT_EMPTY;
    }
    BACKTRACES.intern(buffer.frames()).unwrap_or(BT_EMPTY)
}

/// Records a live allocation of `size` bytes at `pointer`.
pub fn track(state: &State, origin: &Origin, pointer: usize, size: usize) {
    let backtrace_id = allocation_backtrace(state, origin, size);
    let mut stored = size.min(crate::alloc::MAX_SIZE) as u32;
    if state.zygote_child() {
        stored |= ZYGOTE_BIT;
    }
    if !POINTERS.add(
        pointer,
        Info {
            size: stored,
            backtrace_id,
        },
    ) {
        release_backtrace(backtrace_id);
    }
}

pub fn release_backtrace(id: u32) {
    if id > BT_EMPTY {
        BACKTRACES.release(id);
    }
}

pub fn is_live(pointer: usize) -> bool {
    POINTERS.get(pointer).is_some()
}
