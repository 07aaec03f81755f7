//! Pointer verification for free, realloc and malloc_usable_size
//! (docs/spec/errors.md#pointer-verification).
//!
//! Unlike the reference, a pointer is looked up in the live table before anything behind it is
//! read, and the header of an unknown pointer is read with `process_vm_readv`, which fails
//! cleanly on unmapped memory: however wild the pointer, the check itself never faults.

use crate::crossing;
use crate::failure;
use crate::header::{DEBUG_FREE_TAG, DEBUG_TAG};
use crate::log::log_error;
use crate::state::State;
use crate::tracking;

#[cfg_attr(test, derive(Debug, PartialEq))]
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
    failure::in_report_at_failure(|failure_frames| {
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
        if state.plan.hold_freed
            && crate::free_track::free_backtrace_of(pointer, &mut free_frames)
            && !free_frames.frames().is_empty()
        {
            log_error!("Backtrace of original free:");
            failure::log_backtrace_or_failure(state, free_frames.frames());
        }
        failure::log_failure_backtrace(state, failure_frames);
        let allocation = crate::error_context::allocation_of(state, pointer);
        failure::end_report_with(state, pointer, allocation);
    });
}

/// What [`check_and_untrack`] decided about a block being freed or reallocated.
pub enum Release {
    /// The pointer is bad and has been reported: the call must not go on (the block, if it is
    /// one, stays allocated and tracked).
    Refused,
    /// The pointer may be released; nothing tracks allocations, so there was no record to take.
    Allowed,
    /// The pointer may be released and has left the live table: its record, to put back if the
    /// call ends up keeping the block.
    Untracked(tracking::Removed),
}

impl Release {
    /// The record taken out of the live table, if any.
    pub fn record(self) -> Option<tracking::Removed> {
        match self {
            Release::Untracked(record) => Some(record),
            Release::Refused | Release::Allowed => None,
        }
    }
}

/// `check` for free: a live tracked pointer also leaves the table, in the same lookup (one
/// shard lock and probe per free instead of two). `Refused` also for a native block handed to a
/// marked thread, which `entry::crossing` hands back; `Allowed` also for an untracked block of
/// ours once the table could not grow.
#[inline(always)]
pub fn check_and_untrack(state: &State, pointer: usize, function: &str) -> Release {
    if !state.plan.track {
        return if check(state, pointer, function) {
            Release::Allowed
        } else {
            Release::Refused
        };
    }
    untrack_checked(state, pointer, function)
}

#[inline(never)]
fn untrack_checked(state: &State, pointer: usize, function: &str) -> Release {
    let taken = tracking::untrack(pointer);
    if let Some(record) = taken
        && !state.layout.header
    {
        // A tracked block without a header has nothing more to check (`classify`'s first
        // answer): the common free of leak_track, backtrace and verify_pointers.
        return Release::Untracked(record);
    }
    match (classify(state, pointer, taken.is_some()), taken) {
        (None, Some(record)) => Release::Untracked(record),
        (None, None) => Release::Allowed,
        (Some(problem), taken) => {
            // Left exactly as found: the block stays allocated and tracked.
            if let Some(record) = taken {
                tracking::restore(pointer, record);
            }
            report(state, pointer, function, problem);
            Release::Refused
        }
    }
}

/// Inline: with nothing tracked and no header (fill, record_allocs, verbose) there is nothing
/// to check, and every caller returns at once instead of calling a function whose prologue
/// saves every register.
#[inline(always)]
fn find_problem(state: &State, pointer: usize) -> Option<Problem> {
    let tracking = state.plan.track;
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
        crate::platform::read_foreign_u32(header as usize)
    };
    match tag {
        Some(DEBUG_TAG) if live => None,
        Some(DEBUG_FREE_TAG) => Some(Problem::UsedAfterFree),
        Some(tag) if tag != DEBUG_TAG => Some(Problem::InvalidTag(tag)),
        _ => Some(Problem::Unknown),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::header::Header;

    /// A block laid out as header mode lays it out, over test memory: the user pointer, and
    /// the memory that holds the header in front of it.
    struct Block {
        memory: Vec<u64>,
        pointer: usize,
    }

    impl Block {
        fn new(state: &State, tag: u32) -> Block {
            let mut memory = vec![0u64; 64];
            let pointer = memory.as_mut_ptr() as usize + state.layout.pointer_offset;
            // SAFETY: the header lies inside `memory`, in front of the user pointer.
            unsafe {
                core::ptr::addr_of_mut!((*state.layout.header_of(pointer)).tag).write_unaligned(tag)
            };
            Block { memory, pointer }
        }
    }

    #[test]
    fn without_headers_only_the_live_table_decides() {
        let state = crate::state::for_tests("leak_track");
        assert!(!state.layout.header);
        assert_eq!(classify(state, 0x1000, true), None);
        assert_eq!(classify(state, 0x1000, false), Some(Problem::Unknown));
    }

    #[test]
    fn with_headers_the_tag_names_the_problem() {
        let state = crate::state::for_tests("guard");
        assert!(state.layout.header);
        assert!(size_of::<Header>() <= state.layout.pointer_offset);
        let live = Block::new(state, DEBUG_TAG);
        assert_eq!(classify(state, live.pointer, true), None);
        // Our tag on a block the table does not hold: not ours to free.
        assert_eq!(classify(state, live.pointer, false), Some(Problem::Unknown));
        let freed = Block::new(state, DEBUG_FREE_TAG);
        assert_eq!(
            classify(state, freed.pointer, false),
            Some(Problem::UsedAfterFree)
        );
        let foreign = Block::new(state, 0x1234_5678);
        assert_eq!(
            classify(state, foreign.pointer, false),
            Some(Problem::InvalidTag(0x1234_5678))
        );
        assert!(live.memory.len() + freed.memory.len() + foreign.memory.len() > 0);
    }

    #[test]
    fn a_wild_pointer_is_classified_without_a_fault() {
        let state = crate::state::for_tests("guard");
        // SAFETY: a fresh inaccessible mapping, kept for the whole test: unmapped and given back
        // at once, its addresses could be mapped again by another test thread meanwhile.
        let unreadable = unsafe {
            let p = libc::mmap(
                core::ptr::null_mut(),
                4096,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            p as usize
        };
        assert_eq!(crate::platform::read_foreign_u32(unreadable), None);
        assert_eq!(
            classify(state, unreadable + 2048, false),
            Some(Problem::Unknown)
        );
        let value = 0xdead_beef_u32;
        assert_eq!(
            crate::platform::read_foreign_u32(&value as *const u32 as usize),
            Some(value)
        );
        // SAFETY: the mapping made above, no longer used.
        unsafe { libc::munmap(unreadable as *mut libc::c_void, 4096) };
    }

    #[test]
    fn release_names_each_outcome() {
        // Nothing tracked, no header: nothing to check.
        let plain = crate::state::for_tests("");
        assert!(matches!(
            check_and_untrack(plain, 0x1000, "free"),
            Release::Allowed
        ));

        let tracked = crate::state::for_tests("leak_track");
        let block = Box::new([0u8; 32]);
        let pointer = block.as_ptr() as usize;
        tracking::track(tracked, &crate::backtrace::Origin::here(), pointer, 32);
        let Release::Untracked(record) = check_and_untrack(tracked, pointer, "free") else {
            panic!("a live block leaves the table");
        };
        assert!(!tracking::is_live(pointer));
        // Gone from the table: a second free is refused and changes nothing.
        assert!(matches!(
            check_and_untrack(tracked, pointer, "free"),
            Release::Refused
        ));
        assert!(!tracking::is_live(pointer));
        tracking::restore(pointer, record);
        assert!(tracking::is_live(pointer));
        assert!(Release::Untracked(record).record().is_some());
        assert!(tracking::untrack(pointer).is_some());
    }
}
