//! Front and rear guards (spec §3.3): written at allocation, checked at free.

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

/// Checks both guards of a block being freed; each damaged guard is reported with every
/// mismatching byte. Freeing goes on either way.
pub fn check(state: &State, pointer: usize, size: usize) {
    let layout = &state.layout;
    if layout.front_guard_bytes > 0 {
        let start = pointer - layout.front_guard_bytes;
        // SAFETY: the front guard is inside our block.
        let guard =
            unsafe { core::slice::from_raw_parts(start as *const u8, layout.front_guard_bytes) };
        let first_index = -(layout.front_guard_bytes as isize);
        check_one(
            state,
            pointer,
            size,
            "FRONT",
            guard,
            first_index,
            FRONT_GUARD_BYTE,
        );
    }
    if layout.rear_guard_bytes > 0 {
        // SAFETY: the rear guard is inside our block, right after the current size.
        let guard = unsafe {
            core::slice::from_raw_parts((pointer + size) as *const u8, layout.rear_guard_bytes)
        };
        check_one(
            state,
            pointer,
            size,
            "REAR",
            guard,
            size as isize,
            REAR_GUARD_BYTE,
        );
    }
}

#[inline]
fn check_one(
    state: &State,
    pointer: usize,
    size: usize,
    which: &str,
    guard: &[u8],
    first_index: isize,
    expected: u8,
) {
    if !crate::bytes::all_equal(guard, expected) {
        report(state, pointer, size, which, guard, first_index, expected);
    }
}

/// Out of line: its log buffers would otherwise give every free a multi-kilobyte stack frame.
#[cold]
#[inline(never)]
fn report(
    state: &State,
    pointer: usize,
    size: usize,
    which: &str,
    guard: &[u8],
    first_index: isize,
    expected: u8,
) {
    failure::divider();
    log_error!(
        "+++ ALLOCATION 0x{:x} SIZE {} HAS A CORRUPTED {} GUARD",
        pointer,
        size,
        which
    );
    for (i, &b) in guard.iter().enumerate().filter(|(_, b)| **b != expected) {
        log_error!(
            "  allocation[{}] = 0x{:02x} (expected 0x{:02x})",
            first_index + i as isize,
            b,
            expected
        );
    }
    failure::log_failure_backtrace(state);
    failure::end_report(state);
}
