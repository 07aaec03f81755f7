//! Pointer verification for free, realloc and malloc_usable_size
//! (docs/spec/errors.md#pointer-verification).
//!
//! Unlike the reference, a pointer is looked up in the live table before anything behind it is
//! read, and the header of an unknown pointer is read with `process_vm_readv`, which fails
//! cleanly on unmapped memory: however wild the pointer, the check itself never faults.

use crate::config::bits;
use crate::entry::crossing;
use crate::failure;
use crate::header::{DEBUG_FREE_TAG, DEBUG_TAG};
use crate::log::log_error;
use crate::state::State;
use crate::tracking;

enum Problem {
    UsedAfterFree,
    InvalidTag(u32),
    Unknown,
    /// Not a problem to report: the native allocator made the block for a thread marked inside
    /// the library (`entry::crossing`); the caller hands it back to the native allocator.
    Native,
}

/// True if `pointer` may be operated on; otherwise the error has been reported (and the
/// process aborted under abort_on_error). `function` is `free`, `realloc` or
/// `malloc_usable_size`.
#[inline]
pub fn check(state: &State, pointer: usize, function: &str) -> bool {
    match find_problem(state, pointer) {
        None => true,
        Some(Problem::Native) => false,
        Some(problem) => {
            report(state, pointer, function, problem);
            false
        }
    }
}

/// Out of line: its log buffers would otherwise give every free a multi-kilobyte stack frame.
#[cold]
#[inline(never)]
fn report(state: &State, pointer: usize, function: &str, problem: Problem) {
    if let Problem::Native = problem {
        return;
    }
    let _foreign = crate::sync::DisabledScope::enter();
    failure::divider();
    match problem {
        Problem::Native => {}
        Problem::UsedAfterFree => {
            log_error!(
                "+++ ALLOCATION 0x{:x} USED AFTER FREE ({})",
                pointer,
                function
            )
        }
        Problem::InvalidTag(tag) => {
            log_error!(
                "+++ ALLOCATION 0x{:x} HAS INVALID TAG {:x} ({})",
                pointer,
                tag,
                function
            )
        }
        Problem::Unknown => log_error!(
            "+++ ALLOCATION 0x{:x} UNKNOWN POINTER ({})",
            pointer,
            function
        ),
    }
    let mut free_frames = crate::tracking::FrameBuffer::new();
    if state.has(bits::FREE_TRACK)
        && crate::free_track::free_backtrace_of(pointer, &mut free_frames)
        && !free_frames.frames().is_empty()
    {
        log_error!("Backtrace of original free:");
        failure::log_backtrace_or_failure(state, free_frames.frames());
    }
    failure::log_failure_backtrace(state);
    let alloc_backtrace = crate::error_context::allocation_of(state, pointer);
    failure::end_report_of(state, pointer, alloc_backtrace);
}

/// `check` for free: a live tracked pointer also leaves the table, in the same lookup (one
/// shard lock and probe per free instead of two). `None`: reported (or a native block, which
/// `entry::crossing` hands back), the call must not go on; `Some(record)`: go on, with the
/// table's record of the block (`None` when nothing tracks it: tracking off, or an untracked
/// block of ours once the table could not grow).
#[inline(always)]
pub fn check_and_untrack(
    state: &State,
    pointer: usize,
    function: &str,
) -> Option<Option<tracking::Removed>> {
    if !state.has(bits::TRACK_ALLOCS) {
        return check(state, pointer, function).then_some(None);
    }
    untrack_checked(state, pointer, function)
}

#[inline(never)]
fn untrack_checked(
    state: &State,
    pointer: usize,
    function: &str,
) -> Option<Option<tracking::Removed>> {
    let taken = tracking::untrack(pointer);
    match classify(state, pointer, taken.is_some()) {
        None => Some(taken),
        Some(problem) => {
            // Left exactly as found: the block stays allocated and tracked.
            if let Some(record) = taken {
                tracking::restore(pointer, record);
            }
            report(state, pointer, function, problem);
            None
        }
    }
}

/// Inline: with nothing tracked and no header (fill, record_allocs, verbose) there is nothing
/// to check, and every caller returns at once instead of calling a function whose prologue
/// saves every register.
#[inline(always)]
fn find_problem(state: &State, pointer: usize) -> Option<Problem> {
    let tracking = state.has(bits::TRACK_ALLOCS);
    if !state.layout.header && !tracking {
        return None;
    }
    classify_unknown(state, pointer, tracking)
}

#[inline(never)]
fn classify_unknown(state: &State, pointer: usize, tracking: bool) -> Option<Problem> {
    classify(state, pointer, tracking && tracking::is_live(pointer))
}

/// What is wrong with `pointer`, given whether the live table holds it. A pointer the table does
/// not know is looked up among the native allocator's blocks handed to marked threads, and may
/// be an untracked block of ours (issue 20, points 1 and 7: neither is reported).
fn classify(state: &State, pointer: usize, live: bool) -> Option<Problem> {
    if !live {
        if crossing::is_native(pointer) {
            return Some(Problem::Native);
        }
        if crossing::untracked_ours(state, pointer) {
            return None;
        }
    }
    if !state.layout.header {
        return if live { None } else { Some(Problem::Unknown) };
    }
    let header = state.layout.header_of(pointer);
    let tag = if live {
        // SAFETY: a live allocation of ours: its header is mapped and ours.
        Some(unsafe { core::ptr::addr_of!((*header).tag).read_unaligned() })
    } else {
        read_foreign_u32(header as usize)
    };
    match tag {
        Some(DEBUG_TAG) if live => None,
        Some(DEBUG_FREE_TAG) => Some(Problem::UsedAfterFree),
        Some(tag) if tag != DEBUG_TAG => Some(Problem::InvalidTag(tag)),
        _ => Some(Problem::Unknown),
    }
}

/// Reads 4 bytes at an address that may not be mapped, without faulting.
pub(crate) fn read_foreign_u32(address: usize) -> Option<u32> {
    let mut value = 0u32;
    let local = libc::iovec {
        iov_base: (&mut value as *mut u32).cast(),
        iov_len: 4,
    };
    let remote = libc::iovec {
        iov_base: address as *mut libc::c_void,
        iov_len: 4,
    };
    // SAFETY: the kernel copies from our own address space and reports EFAULT instead of
    // faulting; `local` points at a live u32. A failed read is an answer here, not the caller's
    // error: errno stays as it was.
    let n = crate::platform::keeping_errno(|| unsafe {
        libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0)
    });
    (n == 4).then_some(value)
}
