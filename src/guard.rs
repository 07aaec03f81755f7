//! Front and rear guards (docs/spec/errors.md#guard-corruption): written at allocation, checked at
//! free.

use crate::config::{FRONT_GUARD_BYTE, REAR_GUARD_BYTE};
use crate::failure;
use crate::header::Layout;
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

impl Guard<'_> {
    /// The front guard of the block at `pointer`.
    ///
    /// # Safety
    /// `pointer` is a header-mode block of `layout`, so its front guard is mapped and ours.
    #[inline(always)]
    unsafe fn front(layout: &Layout, pointer: usize) -> Self {
        let start = pointer - layout.front_guard_bytes;
        Guard {
            which: "FRONT",
            // SAFETY: the front guard is inside the block (the caller's promise).
            bytes: unsafe {
                core::slice::from_raw_parts(start as *const u8, layout.front_guard_bytes)
            },
            first_index: -(layout.front_guard_bytes as isize),
            expected: FRONT_GUARD_BYTE,
        }
    }

    /// The rear guard of the block at `pointer` holding `size` bytes.
    ///
    /// # Safety
    /// As for `front`; the rear guard follows the `size` user bytes.
    #[inline(always)]
    unsafe fn rear(layout: &Layout, pointer: usize, size: usize) -> Self {
        Guard {
            which: "REAR",
            // SAFETY: the rear guard is inside the block, right after the current size.
            bytes: unsafe {
                core::slice::from_raw_parts((pointer + size) as *const u8, layout.rear_guard_bytes)
            },
            first_index: size as isize,
            expected: REAR_GUARD_BYTE,
        }
    }

    #[inline(always)]
    fn intact(&self) -> bool {
        crate::bytes::all_equal(self.bytes, self.expected)
    }

    /// Every damaged byte: its index relative to the user pointer, and what it holds.
    fn mismatches(&self) -> impl Iterator<Item = (isize, u8)> + '_ {
        self.bytes
            .iter()
            .enumerate()
            .filter(|(_, b)| **b != self.expected)
            .map(|(i, &b)| (self.first_index + i as isize, b))
    }
}

/// Checks both guards of a block being freed; each damaged guard is reported with every
/// mismatching byte. Freeing goes on either way. `alloc_backtrace` is the block's allocation
/// backtrace id, for the `error_backtraces` extension (src/error_context.rs).
pub fn check(state: &State, pointer: usize, size: usize, alloc_backtrace: u32) {
    let layout = &state.layout;
    if layout.front_guard_bytes > 0 {
        // SAFETY: a verified header-mode block of this layout.
        check_one(
            state,
            pointer,
            size,
            &unsafe { Guard::front(layout, pointer) },
            alloc_backtrace,
        );
    }
    if layout.rear_guard_bytes > 0 {
        // SAFETY: as above, holding `size` bytes.
        check_one(
            state,
            pointer,
            size,
            &unsafe { Guard::rear(layout, pointer, size) },
            alloc_backtrace,
        );
    }
}

#[inline]
fn check_one(state: &State, pointer: usize, size: usize, guard: &Guard<'_>, alloc_backtrace: u32) {
    if !guard.intact() {
        report(state, pointer, size, guard, alloc_backtrace);
    }
}

/// Out of line: its log buffers would otherwise give every free a multi-kilobyte stack frame.
#[cold]
#[inline(never)]
fn report(state: &State, pointer: usize, size: usize, guard: &Guard<'_>, alloc_backtrace: u32) {
    let _foreign = crate::sync::DisabledScope::enter();
    failure::in_report_at_failure(|failure_frames| {
        failure::divider();
        log_error!(
            "+++ ALLOCATION 0x{:x} SIZE {} HAS A CORRUPTED {} GUARD",
            pointer,
            size,
            guard.which
        );
        for (index, b) in guard.mismatches() {
            log_error!(
                "  allocation[{}] = 0x{:02x} (expected 0x{:02x})",
                index,
                b,
                guard.expected
            );
        }
        failure::log_failure_backtrace(state, failure_frames);
        failure::end_report_of(state, pointer, alloc_backtrace);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A block of `size` user bytes with both guards written as allocation writes them, inside
    /// a buffer with a margin of 0x55 on both sides.
    fn block(layout: &Layout, size: usize) -> (Vec<u8>, usize) {
        let margin = 64;
        let mut memory =
            vec![
                0x55u8;
                margin + layout.front_guard_bytes + size + layout.rear_guard_bytes + margin
            ];
        let pointer = memory.as_mut_ptr() as usize + margin + layout.front_guard_bytes;
        write_front(pointer, layout.front_guard_bytes);
        write_rear(pointer, size, layout.rear_guard_bytes);
        (memory, pointer)
    }

    #[test]
    fn guards_are_written_exactly_around_the_user_bytes() {
        let layout = crate::state::for_tests("front_guard=16 rear_guard=8").layout;
        let (memory, pointer) = block(&layout, 10);
        let start = pointer - memory.as_ptr() as usize;
        assert!(memory[..start - 16].iter().all(|&b| b == 0x55));
        assert!(
            memory[start - 16..start]
                .iter()
                .all(|&b| b == FRONT_GUARD_BYTE)
        );
        assert!(memory[start..start + 10].iter().all(|&b| b == 0x55));
        assert!(
            memory[start + 10..start + 18]
                .iter()
                .all(|&b| b == REAR_GUARD_BYTE)
        );
        assert!(memory[start + 18..].iter().all(|&b| b == 0x55));
        // SAFETY: both guards lie inside `memory`.
        let (front, rear) = unsafe {
            (
                Guard::front(&layout, pointer),
                Guard::rear(&layout, pointer, 10),
            )
        };
        assert!(front.intact() && rear.intact());
    }

    #[test]
    fn damaged_bytes_are_named_relative_to_the_user_pointer() {
        let layout = crate::state::for_tests("guard=16").layout;
        let (memory, pointer) = block(&layout, 5);
        let _ = memory;
        // SAFETY: inside `memory`: the front guard's last byte and the rear guard's second.
        unsafe {
            *((pointer - 1) as *mut u8) = 0x00;
            *((pointer - 16) as *mut u8) = 0x11;
            *((pointer + 5 + 1) as *mut u8) = 0x22;
        }
        // SAFETY: both guards lie inside `memory`.
        let (front, rear) = unsafe {
            (
                Guard::front(&layout, pointer),
                Guard::rear(&layout, pointer, 5),
            )
        };
        assert!(!front.intact() && !rear.intact());
        assert_eq!(
            front.mismatches().collect::<Vec<_>>(),
            [(-16, 0x11), (-1, 0x00)]
        );
        assert_eq!(rear.mismatches().collect::<Vec<_>>(), [(6, 0x22)]);
        assert_eq!((front.which, rear.which), ("FRONT", "REAR"));
    }

    #[test]
    fn the_rear_guard_follows_the_current_size() {
        let layout = crate::state::for_tests("rear_guard=8").layout;
        assert_eq!(layout.front_guard_bytes, 0);
        let (memory, pointer) = block(&layout, 3);
        let _ = memory;
        // SAFETY: inside `memory`.
        let rear = unsafe { Guard::rear(&layout, pointer, 3) };
        assert!(rear.intact());
        // Measured against a size one byte longer, the guard starts one byte later and its last
        // byte is the margin's.
        // SAFETY: inside `memory` (the margin follows the guard).
        let shifted = unsafe { Guard::rear(&layout, pointer, 4) };
        assert_eq!(shifted.mismatches().collect::<Vec<_>>(), [(11, 0x55)]);
    }
}
