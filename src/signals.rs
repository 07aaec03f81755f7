//! Signal-driven actions (docs/spec/options.md#signals). Handlers only flip atomic flags, and the
//! work happens on the next allocation call, where the library may take locks — except the record
//! write, which the handler does itself as the reference does (src/record/writer.rs). The table
//! below is the single place that says which option installs which signal, in the order the verbose
//! "Run:" lines appear.

use crate::config::{Config, bits};
use crate::fmt::Bytes;
use crate::log::{log_error, log_info};
use crate::platform;
use core::sync::atomic::{AtomicBool, Ordering};

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

/// Installs the handlers the options ask for, logging the verbose lines. On failure logs
/// `Unable to set up <what>: <strerror>` and returns false.
pub fn install(config: &Config) -> bool {
    for action in SIGNAL_ACTIONS.iter().filter(|a| (a.wanted)(config)) {
        let signal = (action.signal)(config);
        if let Err(errno) = install_handler(signal, action.handler) {
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

fn install_handler(
    signal: i32,
    handler: extern "C" fn(i32, *mut libc::siginfo_t, *mut core::ffi::c_void),
) -> Result<(), i32> {
    // SAFETY: an all-zero sigaction is a valid starting value (empty mask, no flags).
    let mut sa: libc::sigaction = unsafe { core::mem::zeroed() };
    sa.sa_sigaction = handler as usize;
    sa.sa_flags = libc::SA_RESTART | libc::SA_SIGINFO | libc::SA_ONSTACK;
    // SAFETY: `sa` is fully initialised; the old action is not needed.
    if unsafe { libc::sigaction(signal, &sa, core::ptr::null_mut()) } != 0 {
        return Err(platform::errno());
    }
    Ok(())
}

extern "C" fn toggle_backtrace(_: i32, _: *mut libc::siginfo_t, _: *mut core::ffi::c_void) {
    BACKTRACE_ENABLED.fetch_xor(true, Ordering::SeqCst);
}

extern "C" fn request_dump(_: i32, _: *mut libc::siginfo_t, _: *mut core::ffi::c_void) {
    DUMP_PENDING.store(true, Ordering::SeqCst);
}

extern "C" fn request_record_dump(_: i32, _: *mut libc::siginfo_t, _: *mut core::ffi::c_void) {
    crate::record::on_signal();
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
