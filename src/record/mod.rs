//! record_allocs (spec §7): one entry per allocation call in a preallocated array, written out
//! as text on SIGRTMAX-18 and, with record_allocs_on_exit, at exit.
//!
//! Appending costs one `fetch_add` on the shared index plus a pass through a sharded gate (no
//! lock shared by all threads): a call reserves its slot before the operation (so the file keeps
//! the order in which calls started) and publishes the filled entry afterwards.
//!
//! The signal handler only sets a flag; the file is written at the next recorded call, before it
//! reserves its own entry. Writing in
//! the handler, as the reference does, would format and write while the interrupted thread may be
//! half-way through filling an entry (or holding the index), and the handler cannot wait for it.

mod buffer;
mod format;
mod present;
mod thread;

use crate::config::bits;
use crate::signals::RECORD_DUMP_PENDING;
use crate::state::State;
pub use buffer::Kind;
use buffer::{BUFFER, Slot};
use core::sync::atomic::Ordering;

/// Sets up the entry array, the thread-exit key and /proc/self/pagemap. False on failure.
pub fn init(state_config: &crate::config::Config<'_>) -> bool {
    if !state_config.has(bits::RECORD_ALLOCS) {
        return true;
    }
    BUFFER.init(state_config.record_allocs_num_entries) && thread::init() && {
        present::init();
        true
    }
}

/// The monotonic clock in nanoseconds (entries' timestamps).
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-parameter.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// An entry being recorded: reserved before the operation, filled after it.
pub struct Pending {
    slot: Option<Slot>,
    pub start_ns: u64,
}

/// Reserves the next entry (none when recording is off or the array is full; a call arriving
/// during a write waits for it) and notes the start time.
#[inline(always)]
pub fn begin(state: &State) -> Option<Pending> {
    if !state.has(bits::RECORD_ALLOCS) {
        return None;
    }
    begin_recording(state)
}

/// Out of line: every allocation call passes `begin`, only recording processes go further.
#[inline(never)]
fn begin_recording(state: &State) -> Option<Pending> {
    // The write waits for every reserved entry to be filled, so it runs here, before this call
    // reserves one.
    if RECORD_DUMP_PENDING.load(Ordering::Relaxed)
        && RECORD_DUMP_PENDING.swap(false, Ordering::AcqRel)
    {
        // Inside an allocation call that succeeds: errno stays the caller's.
        crate::platform::keeping_errno(|| write_on_signal(state));
    }
    thread::note_thread();
    let slot = BUFFER.reserve();
    Some(Pending {
        slot,
        start_ns: now_ns(),
    })
}

/// Present bytes of `pointer`'s block before a free or realloc (spec §7.4).
pub fn present_bytes(state: &State, pointer: usize) -> i64 {
    if pointer == 0 {
        return -1;
    }
    present::bytes(pointer, crate::alloc::usable_size(state, pointer))
}

/// What a finished call records (spec §7.2).
pub struct Done {
    pub kind: Kind,
    pub ptr: usize,
    pub size: usize,
    pub u: u64,
    pub present: i64,
    /// Leave the timestamps at 0 (the call failed before reaching the allocator).
    pub untimed: bool,
}

impl Pending {
    pub fn finish(self, done: Done) {
        let Some(slot) = self.slot else { return };
        let (start, end) = if done.untimed {
            (0, 0)
        } else {
            (self.start_ns, now_ns())
        };
        BUFFER.fill(
            slot,
            buffer::Entry {
                tid: thread::tid(),
                kind: done.kind as u8,
                ptr: done.ptr as u64,
                size: done.size as u64,
                u: done.u,
                present: done.present,
                start_ns: start,
                end_ns: end,
            },
        );
    }

    /// Leaves the reserved entry unfilled (skipped when writing, as the reference's UNKNOWN).
    pub fn abandon(self) {
        if let Some(slot) = self.slot {
            BUFFER.release(slot);
        }
    }
}

/// SIGRTMAX-18, at the next malloc/free: the entries to the record file.
#[cold]
#[inline(never)]
pub fn write_on_signal(state: &State) {
    let _foreign = crate::sync::DisabledScope::enter();
    format::write_file(state, state.config.record_allocs_file, false);
}

/// At exit with record_allocs_on_exit: `<record file>.<pid>`.
pub fn write_at_exit(state: &State) {
    format::write_file(state, state.config.record_allocs_file, true);
}

/// Fork child: only the forking thread exists; in-flight counts of others are gone.
pub fn reset_in_child() {
    BUFFER.reset_in_child();
    present::reopen_in_child();
}
