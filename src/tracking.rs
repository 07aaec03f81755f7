//! Pointer tracking: the live-pointer table, the interned backtraces, and what is captured when
//! an allocation is recorded (spec §9.1, abi §7.3–§7.4).

use crate::backtrace::{self, BacktraceTable};
use crate::config::bits;
use crate::pointers::{Info, PointerTable};
use crate::signals::BACKTRACE_ENABLED;
use crate::state::State;
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
fn allocation_backtrace(state: &State, size: usize) -> u32 {
    if !state.has(bits::BACKTRACE) || !BACKTRACE_ENABLED.load(Ordering::Relaxed) {
        return BT_OFF;
    }
    capture_interned(state, size, state.config.backtrace_frames)
}

/// Captures up to `frames` frames subject to the size filter; interned id or BT_EMPTY.
pub fn capture_interned(state: &State, size: usize, frames: usize) -> u32 {
    let c = &state.config;
    if state.has(bits::BACKTRACE_SPECIFIC_SIZES)
        && (size < c.backtrace_min_size_bytes || size > c.backtrace_max_size_bytes)
    {
        return BT_EMPTY;
    }
    // Zeroing all MAX_FRAMES slots on every allocation cost as much as a warm walk: initialise
    // only the `frames` the walk may write.
    let frames = frames.min(backtrace::MAX_FRAMES);
    let mut storage = [core::mem::MaybeUninit::<usize>::uninit(); backtrace::MAX_FRAMES];
    // SAFETY: the first `frames` elements are written with zeros before the slice over them is
    // made, so it only covers initialised integers.
    let buf = unsafe {
        core::ptr::write_bytes(storage.as_mut_ptr(), 0, frames);
        core::slice::from_raw_parts_mut(storage.as_mut_ptr().cast::<usize>(), frames)
    };
    let n = backtrace::capture(buf);
    if n == 0 {
        return BT_EMPTY;
    }
    BACKTRACES.intern(&buf[..n]).unwrap_or(BT_EMPTY)
}

/// Records a live allocation of `size` bytes at `pointer`.
pub fn track(state: &State, pointer: usize, size: usize) {
    let backtrace_id = allocation_backtrace(state, size);
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
