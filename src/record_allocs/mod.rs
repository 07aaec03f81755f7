//! record_allocs (docs/spec/abi.md#record_allocs-files): one entry per allocation call in a
//! preallocated ring, written out as text on SIGRTMAX-18 — inside the signal handler, as the
//! reference does (docs/spec/abi.md#writing) — and, with record_allocs_on_exit, at exit.
//!
//! Appending is lock-free (`buffer.rs`): a compare-and-swap on the shared ticket count before
//! the operation (so the file keeps the order in which calls started) and one release store of
//! the filled entry after it. The writer never waits for a call: entries still being filled when
//! it runs are left for the next write. Writes are serialised without waiting either
//! (`writer.rs`): a write requested while another runs is done by the running writer when it
//! finishes.

mod buffer;
mod format;
mod present;
mod thread;
mod writer;

use crate::config::bits;
use crate::state::State;
pub use buffer::Kind;
use buffer::{BUFFER, Ticket};
pub use writer::{on_signal, write_at_exit};

/// Sets up the entry ring and the thread-exit key. False on failure.
pub fn init(state_config: &crate::config::Config<'_>) -> bool {
    if !state_config.has(bits::RECORD_ALLOCS) {
        return true;
    }
    if !(BUFFER.init(state_config.record_allocs_num_entries) && thread::init()) {
        return false;
    }
    crate::monotonic_clock::init();
    true
}

/// Learns what the native allocator reads next to a block (present.rs), once, at initialize.
pub fn recognise_native(dispatch: &crate::dispatch::MallocDispatch) {
    present::recognise_native(dispatch);
}

/// Undoes [`init`], completely or partly done, for a `debug_initialize` that gives up.
pub fn release() {
    thread::release();
    BUFFER.release();
}

/// The monotonic clock in nanoseconds (entries' timestamps).
#[inline]
pub fn now_ns() -> u64 {
    crate::monotonic_clock::now_ns()
}

/// An entry being recorded: reserved before the operation, filled after it.
pub struct Pending {
    ticket: Option<Ticket>,
    pub start_ns: u64,
}

/// Reserves the next entry (none when recording is off or the ring is full) and notes the start
/// time.
#[inline(always)]
pub fn begin(state: &State) -> Option<Pending> {
    if !state.plan.record {
        return None;
    }
    begin_recording(state)
}

/// Out of line: every allocation call passes `begin`, only recording processes go further.
#[inline(never)]
fn begin_recording(_state: &State) -> Option<Pending> {
    thread::note_thread();
    let ticket = BUFFER.reserve();
    Some(Pending {
        ticket,
        start_ns: now_ns(),
    })
}

/// Present bytes of `pointer`'s block before a free or realloc (docs/spec/abi.md#present-bytes).
pub fn present_bytes(state: &State, pointer: usize) -> i64 {
    if pointer == 0 {
        return -1;
    }
    // The size lookup reads the header in front of the block (ours, or the native allocator's),
    // as the reference's does before it measures: see present.rs.
    let len = state.usable_size(pointer);
    let read = if state.layout.header {
        present::Read::before(state.layout.pointer_offset)
    } else {
        present::Read::native(pointer, len)
    };
    present::bytes(pointer, len, read)
}

/// What a finished call records (docs/spec/abi.md#what-each-call-records).
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
        let Some(ticket) = self.ticket else { return };
        let (start, end) = if done.untimed {
            (0, 0)
        } else {
            // Two anchors' extrapolations can differ by a nanosecond or two the wrong way.
            (self.start_ns, now_ns().max(self.start_ns))
        };
        BUFFER.fill(
            ticket,
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
        if let Some(ticket) = self.ticket {
            BUFFER.abandon(ticket);
        }
    }
}

/// Fork child: only the forking thread exists; entries other threads were filling never will be.
pub fn reset_in_child() {
    crate::monotonic_clock::reset_in_child();
    BUFFER.reset_in_child();
    writer::reset_in_child();
}
