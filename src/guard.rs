//! Front and rear guards (docs/spec/errors.md#guard-corruption): written at allocation, checked at
//! free.

use crate::config::{FRONT_GUARD_BYTE, REAR_GUARD_BYTE};
use crate::failure;
use crate::log::log_error;
use crate::state::State;

pub fn write_front(pointer: usize, bytes: usize) {
    // SAFETY: the front guard lies between the header and the user pointer, inside the block.
    unsafe { core::ptr::write_bytes((pointer - bytes) as *mut u8, FRONT_GUARD_BYTE, bytes) };
}

pub fn write_rear(pointer: usize, size: usize, bytes: usize) {
    // SAFETY: the rear guard follows the user data, inside the block (extra_bytes covers it).
    unsafe { core::ptr::write_bytes((pointer + size) as *mut u8, REAR_GUARD_BYTE, bytes) };
}

/// One guard of a block: which, its bytes, the index of its first byte relative to the user
/// pointer, and the byte it must hold.
struct Guard<'a> {
    which: &'static str,
    bytes: &'a [u8],
    first_index: isize,
    expected: u8,
}

/// Checks both guards of a block being freed; each damaged guard is reported with every
/// mismatching byte. Freeing goes on either way. `alloc_backtrace` is the block's allocation
/// backtrace id, for the `error_backtraces` extension (src/error_context.rs).
pub fn check(state: &State, pointer: usize, size: usize, alloc_backtrace: u32) {
    let layout = &state.layout;
    if layout.front_guard_bytes > 0 {
        let start = pointer - layout.front_guard_bytes;
        // SAFETY: the front guard is inside our block.
        let bytes =
            unsafe { core::slice::from_raw_parts(start as *const u8, layout.front_guard_bytes) };
        let guard = Guard {
            which: "FRONT",
            bytes,
            first_index: -(layout.front_guard_bytes as isize),
            expected: FRONT_GUARD_BYTE,
        };
        check_one(state, pointer, size, &guard, alloc_backtrace);
    }
    if layout.rear_guard_bytes > 0 {
        // SAFETY: the rear guard is inside our block, right after the current size.
        let bytes = unsafe {
            core::slice::from_raw_parts((pointer + size) as *const u8, layout.rear_guard_bytes)
        };
        let guard = Guard {
            which: "REAR",
            bytes,
            first_index: size as isize,
            expected: REAR_GUARD_BYTE,
        };
        check_one(state, pointer, size, &guard, alloc_backtrace);
    }
}

#[inline]
fn check_one(state: &State, pointer: usize, size: usize, guard: &Guard<'_>, alloc_backtrace: u32) {
    if !crate::bytes::all_equal(guard.bytes, guard.expected) {
        report(state, pointer, size, guard, alloc_backtrace);
    }
}

/// Out of line: its log buffers would otherwise give every free a multi-kilobyte stack frame.
#[cold]
#[inline(never)]
fn report(state: &State, pointer: usize, size: usize, guard: &Guard<'_>, alloc_backtrace: u32) {
    let _foreign = crate::sync::DisabledScope::enter();
    failure::divider();
    log_error!(
        "+++ ALLOCATION 0x{:x} SIZE {} HAS A CORRUPTED {} GUARD",
        pointer,
        size,
        guard.which
    );
    for (i, &b) in guard
        .bytes
        .iter()
        .enumerate()
        .filter(|(_, b)| **b != guard.expected)
    {
        log_error!(
            "  allocation[{}] = 0x{:02x} (expected 0x{:02x})",
            guard.first_index + i as isize,
            b,
            guard.expected
        );
    }
    failure::log_failure_backtrace(state);
    failure::end_report_of(state, pointer, alloc_backtrace);
}
