//! `libc_malloc_debug.so`: bionic's malloc debug, rewritten in Rust.
//!
//! libc `dlopen`s this library, resolves the `debug_*` symbols and calls
//! `debug_initialize(dispatch, zygote_child, options)`; from then on every allocation of the
//! process comes through [`exports`]. The library lives *inside* malloc, so the shipped build is
//! `no_std`, never allocates through the exported malloc and never unwinds (see
//! docs/design.md#allocation-safety). Unit tests build the same modules with std.
#![cfg_attr(not(test), no_std)]
// Every `unsafe` block says why it is sound (the rules of docs/design.md, "Allocation safety").
#![deny(clippy::undocumented_unsafe_blocks)]

mod alloc;
mod backtrace;
mod bytes;
pub mod config;
mod crossing;
mod deferred;
mod dispatch;
mod entry;
mod error_context;
mod error_marker;
mod errors;
mod exports;
mod failure;
mod fmt;
mod free_queue;
mod free_track;
mod guard;
mod header;
mod iterate;
mod leaks;
mod lifecycle;
mod live_table;
mod log;
mod log_file;
mod monotonic_clock;
mod mutex;
mod original_stderr;
mod output;
mod pages;
mod plan;
mod platform;
mod presence_map;
mod record_allocs;
mod report;
mod report_stack;
mod signals;
mod snapshot;
mod spare_blocks;
mod state;
mod suppress;
mod symbolize;
mod sync;
mod tracking;
mod unreachable;
mod verify;

/// A panic inside malloc cannot be unwound or reported through anything that allocates: write a
/// fixed message with `write(2)` and abort.
#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    platform::abort_with_message("malloc_debug: internal error (panic); aborting");
}

// The prebuilt `core` may keep a reference to `rust_eh_personality` even with panic=abort; it is
// never called. Defined in assembly so that it can be hidden (a `#[no_mangle]` Rust function
// would be exported from the cdylib).
#[cfg(not(test))]
macro_rules! hidden_personality {
    ($trap:literal) => {
        core::arch::global_asm!(
            ".globl rust_eh_personality",
            ".hidden rust_eh_personality",
            ".type rust_eh_personality, %function",
            "rust_eh_personality:",
            $trap,
        );
    };
}
#[cfg(all(not(test), any(target_arch = "x86_64", target_arch = "x86")))]
hidden_personality!("ud2");
#[cfg(all(not(test), target_arch = "aarch64"))]
hidden_personality!("brk #0");
#[cfg(all(not(test), target_arch = "arm"))]
hidden_personality!("udf #0");
