//! Signal-driven actions (docs/spec/options.md#signals). Handlers only flip atomic flags, and the
//! work happens on the next allocation call, where the library may take locks — except the record
//! write, which the handler does itself as the reference does (src/record_allocs/writer.rs). The table
//! below is the single place that says which option installs which signal, in the order the verbose
//! "Run:" lines appear.

use crate::config::{Config, bits};
use crate::fmt::Bytes;
use crate::log::{log_error, log_info};
use crate::platform;
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, AtomicU8, Ordering};

/// Whether allocation-time backtraces are being captured now (toggled by SIGRTMAX-19).
pub static BACKTRACE_ENABLED: AtomicBool = AtomicBool::new(false);
/// A heap dump was requested (SIGRTMAX-17).
pub static DUMP_PENDING: AtomicBool = AtomicBool::new(false);
/// An unreachable-memory check was requested (SIGRTMAX-16).
pub static UNREACHABLE_CHECK_PENDING: AtomicBool = AtomicBool::new(false);
/// Allocator statistics were requested (SIGRTMAX-15).
pub static STATS_PENDING: AtomicBool = AtomicBool::new(false);

struct SignalAction {
    wanted: fn(&Config) -> bool,
    signal: fn(&Config) -> i32,
    handler: extern "C" fn(i32, *mut libc::siginfo_t, *mut core::ffi::c_void),
    /// `<action>` of the verbose line `%s: Run: 'kill -%d %d' to <action>.`
    action: &'static str,
    /// What the failure message says could not be set up.
    what: &'static str,
}

const SIGNAL_ACTIONS: [SignalAction; 5] = [
    SignalAction {
        wanted: |c| c.backtrace_enable_on_signal,
        signal: |c| c.backtrace_signal,
        handler: toggle_backtrace,
        action: "enable backtracing",
        what: "backtrace signal enable function",
    },
    SignalAction {
        wanted: |c| c.has(bits::BACKTRACE),
        signal: |c| c.backtrace_dump_signal,
        handler: request_dump,
        action: "dump the backtrace",
        what: "backtrace dump signal function",
    },
    SignalAction {
        wanted: |c| c.has(bits::RECORD_ALLOCS),
        signal: |c| c.record_allocs_signal,
        handler: request_record_dump,
        action: "dump the allocation records",
        what: "record dump signal function",
    },
    SignalAction {
        wanted: |c| c.has(bits::LOG_ALLOCATOR_STATS_ON_SIGNAL),
        signal: |c| c.log_allocator_stats_signal,
        handler: request_stats,
        action: "log allocator stats",
        what: "log allocator stats signal function",
    },
    SignalAction {
        wanted: |c| c.has(bits::CHECK_UNREACHABLE_ON_SIGNAL),
        signal: |c| c.check_unreachable_signal,
        handler: request_unreachable_check,
        action: "check for unreachable memory",
        what: "check unreachable signal function",
    },
];

/// Which of `SIGNAL_ACTIONS` are installed (bit i: action i), and the actions they replaced,
/// for [`uninstall`]. Written only by the initialising thread (the lifecycle lets one call in).
static INSTALLED: AtomicU8 = AtomicU8::new(0);
struct Previous(UnsafeCell<[Option<(i32, libc::sigaction)>; SIGNAL_ACTIONS.len()]>);
// SAFETY: only the single initialising call (src/lifecycle.rs) reads or writes it.
unsafe impl Sync for Previous {}
static PREVIOUS: Previous = Previous(UnsafeCell::new([None; SIGNAL_ACTIONS.len()]));

/// Installs the handlers the options ask for, logging the verbose lines. On failure logs
/// `Unable to set up <what>: <strerror>` and returns false (the handlers installed before it
/// stay until [`uninstall`]).
pub fn install(config: &Config) -> bool {
    for (i, action) in SIGNAL_ACTIONS.iter().enumerate() {
        if !(action.wanted)(config) {
            continue;
        }
        let signal = (action.signal)(config);
        if let Err(errno) = install_handler(i, signal, action.handler) {
            log_error!(
                "Unable to set up {}: {}",
                action.what,
                crate::errors::strerror(errno)
            );
            return false;
        }
        if config.has(bits::VERBOSE) {
            log_info!(
                "{}: Run: 'kill -{} {}' to {}.",
                Bytes(platform::progname()),
                signal,
                platform::getpid(),
                action.action
            );
        }
    }
    true
}

/// Undoes [`install`] for a `debug_initialize` that gives up later: every handler it installed
/// is replaced by the action it replaced, and the backtrace toggle is off again.
pub fn uninstall() {
    let installed = INSTALLED.swap(0, Ordering::AcqRel);
    // SAFETY: the initialising call is the only one that touches PREVIOUS (see its type).
    let previous = unsafe { &mut *PREVIOUS.0.get() };
    for (i, slot) in previous.iter_mut().enumerate() {
        if let Some((signal, old)) = slot.take().filter(|_| installed & (1 << i) != 0) {
            // SAFETY: `old` is the action sigaction returned for this signal.
            unsafe { libc::sigaction(signal, &old, core::ptr::null_mut()) };
        }
    }
    BACKTRACE_ENABLED.store(false, Ordering::SeqCst);
}

fn install_handler(
    index: usize,
    signal: i32,
    handler: extern "C" fn(i32, *mut libc::siginfo_t, *mut core::ffi::c_void),
) -> Result<(), i32> {
    // SAFETY: an all-zero sigaction is a valid starting value (empty mask, no flags).
    let mut sa: libc::sigaction = unsafe { core::mem::zeroed() };
    sa.sa_sigaction = handler as usize;
    sa.sa_flags = libc::SA_RESTART | libc::SA_SIGINFO | libc::SA_ONSTACK;
    // SAFETY: as above; sigaction fills it in on success.
    let mut old: libc::sigaction = unsafe { core::mem::zeroed() };
    // SAFETY: `sa` is fully initialised and `old` is a valid out-parameter.
    if unsafe { libc::sigaction(signal, &sa, &mut old) } != 0 {
        return Err(platform::errno());
    }
    // SAFETY: the initialising call is the only one that touches PREVIOUS (see its type).
    unsafe { (*PREVIOUS.0.get())[index] = Some((signal, old)) };
    INSTALLED.fetch_or(1 << index, Ordering::AcqRel);
    Ok(())
}

extern "C" fn toggle_backtrace(_: i32, _: *mut libc::siginfo_t, _: *mut core::ffi::c_void) {
    BACKTRACE_ENABLED.fetch_xor(true, Ordering::SeqCst);
}

extern "C" fn request_dump(_: i32, _: *mut libc::siginfo_t, _: *mut core::ffi::c_void) {
    DUMP_PENDING.store(true, Ordering::SeqCst);
}

extern "C" fn request_record_dump(_: i32, _: *mut libc::siginfo_t, _: *mut core::ffi::c_void) {
    crate::record_allocs::on_signal();
}

extern "C" fn request_stats(_: i32, _: *mut libc::siginfo_t, _: *mut core::ffi::c_void) {
    STATS_PENDING.store(true, Ordering::SeqCst);
}

extern "C" fn request_unreachable_check(
    _: i32,
    _: *mut libc::siginfo_t,
    _: *mut core::ffi::c_void,
) {
    UNREACHABLE_CHECK_PENDING.store(true, Ordering::SeqCst);
}
