//! The frame of every error report (docs/spec/errors.md#pointer-verification to
//! docs/spec/errors.md#free_track-reports): divider, message, details, a backtrace,
//! divider, then `abort()` under `abort_on_error`.

use crate::backtrace;
use crate::config::bits;
use crate::log::{DIVIDER, log_error};
use crate::state::State;

/// The block an error report is about, as far as it is known: where it starts (the reported
/// pointer itself, or the live block it points into), its size when the pointer points inside
/// it (0 otherwise), and its allocation backtrace id (or `tracking::BT_OFF`/`BT_EMPTY`).
#[derive(Clone, Copy)]
pub struct Allocation {
    pub block: usize,
    pub size: usize,
    pub backtrace: u32,
}

/// Lines an extension adds after a report's closing divider (the `error_backtraces` extension's
/// allocation backtrace, src/error_context.rs), given the reported pointer.
pub type Epilogue = fn(&State, usize, Allocation);

/// Set once by initialize (src/lifecycle.rs) when the extension is on, so that reports know
/// nothing of the modules above them.
static EPILOGUE: crate::sync::Hook<Epilogue> = crate::sync::Hook::new();

pub fn set_epilogue(epilogue: Epilogue) {
    EPILOGUE.set(epilogue);
}

fn epilogue() -> Option<Epilogue> {
    EPILOGUE.get()
}

pub fn divider() {
    log_error!("{}", DIVIDER);
}

/// `Backtrace at time of failure:` and the frames [`in_report_at_failure`] took.
pub fn log_failure_backtrace(state: &State, frames: &[usize]) {
    log_error!("Backtrace at time of failure:");
    log_backtrace_or_failure(state, frames);
}

/// Runs an error report's lines on the report stack (docs/design.md, "Reports run on a stack of
/// their own"): error reports come from inside the program's allocation calls, on any thread,
/// and their log records and symbolization need more stack than a small thread has.
pub fn in_report(report: impl FnOnce()) {
    crate::report_stack::run(report);
}

/// [`in_report`] for a report that logs the backtrace at the time of failure: the current
/// stack (up to 256 frames) is captured first, on the caller's own stack (from the report stack
/// a walk would not reach the program's frames), and handed to `report`.
pub fn in_report_at_failure(report: impl FnOnce(&[usize])) {
    let mut frames = [0usize; backtrace::MAX_FRAMES];
    let n = {
        let _reserve = crate::pages::ReportScope::enter();
        backtrace::capture(&mut frames)
    };
    crate::report_stack::run(|| report(&frames[..n]));
}

/// Logs captured frames in the configured format, or the reference's failure line.
pub fn log_backtrace_or_failure(state: &State, frames: &[usize]) {
    let _reserve = crate::pages::ReportScope::enter();
    if frames.is_empty() {
        log_error!("  Backtrace failed to get any frames.");
    } else if state.has(bits::BACKTRACE_FULL) {
        backtrace::log_frames_full(frames);
    } else {
        backtrace::log_frames(frames);
    }
}

/// Logs an interned backtrace (allocation or free time).
pub fn log_interned_backtrace(state: &State, id: u32) {
    let printed = crate::tracking::BACKTRACES
        .with_frames(id, |frames| log_backtrace_or_failure(state, frames));
    if printed.is_none() {
        log_error!("  hash_index {} does not have matching frame data.", id);
    }
}

/// Ends an error report about the block at `pointer`, whose allocation backtrace is
/// `alloc_backtrace` (an interned id, or `tracking::BT_OFF`/`BT_EMPTY`): closing divider, the
/// `error_backtraces` extension's lines (src/error_context.rs), then abort if the options say
/// so.
pub fn end_report_of(state: &State, pointer: usize, alloc_backtrace: u32) {
    let allocation = Allocation {
        block: pointer,
        size: 0,
        backtrace: alloc_backtrace,
    };
    end_report_with(state, pointer, allocation);
}

/// `end_report_of` for a report that knows more of the block (verification: a pointer may
/// point inside a live block).
pub fn end_report_with(state: &State, pointer: usize, allocation: Allocation) {
    divider();
    if let Some(epilogue) = epilogue() {
        epilogue(state, pointer, allocation);
    }
    crate::error_marker::error_reported(state);
    abort_if_configured(state);
}

pub fn abort_if_configured(state: &State) {
    if state.has(bits::ABORT_ON_ERROR) {
        // SAFETY: abort has no preconditions.
        unsafe { libc::abort() };
    }
}
