//! Backtraces: capture and deduplicated storage (docs/spec/allocation.md#allocation-backtraces),
//! and the entry points that log them (docs/spec/errors.md#backtraces-in-reports) or describe
//! their frames for heap dumps (`bt_info`, docs/spec/abi.md#heap-dump) through the symbolizer
//! (src/symbolize/).
//!
//! Capture runs inside malloc, before any of the library's locks: it never allocates and takes
//! no lock except the dynamic loader's (inside `dl_iterate_phdr`, once per capture and once per
//! cache miss). The walk itself (walk.rs) uses per-return-address unwind rules cached in a
//! lock-free table (cache.rs) computed from `.eh_frame` with gimli on a miss (cfi.rs); stacks
//! the cache cannot express go through the `unwinding` crate's `_Unwind_Backtrace`; aarch64
//! Android walks frame records first. Symbolization (maps, ELF symbol tables, demangling:
//! src/symbolize/, a module of its own that knows nothing of capture) happens only when logging
//! or dumping.

/// Declares the modules of the cached walk (and the `unwinding` fallback in `walk`). x86_64,
/// aarch64 and i686 use all of them; 32-bit arm, which walks its EHABI tables (exidx.rs), uses
/// a few parts and compiles the rest unused.
macro_rules! cached_walk_modules {
    ($($name:ident),*) => {$(
        #[cfg_attr(
            not(any(target_arch = "x86_64", target_arch = "aarch64", target_arch = "x86")),
            allow(dead_code, unused_imports)
        )]
        mod $name;
    )*};
}
cached_walk_modules!(arch, cache, cfi, memo, note, rule, walk);
#[cfg(any(target_arch = "arm", test))]
mod exidx;
pub(crate) mod quarantine;
#[cfg(all(
    any(target_arch = "aarch64", target_arch = "arm"),
    target_os = "android"
))]
mod stack;
mod table;

#[cfg(test)]
mod tests;

pub use crate::symbolize::Session as SymbolSession;
pub use note::{MemoHit, NOTES};
pub use table::{BacktraceTable, LiveIds};

use crate::platform::Priority;
use crate::symbolize::format::{self, Resolver};
use core::sync::atomic::Ordering;

/// Most frames any capture stores (error reports).
pub const MAX_FRAMES: usize = 256;

/// Called once from `debug_initialize`: learns this library's code range (its frames are never
/// recorded) and the modules loaded so far, registers the fork handlers of the loader
/// quarantine (quarantine.rs) and, on arm Android, learns the main thread's stack bounds.
pub fn startup() {
    cfi::record_permanent_modules();
    quarantine::register();
    if let Some((start, end)) = cfi::module_code_range(capture as *const () as usize) {
        walk::OWN_START.store(start, Ordering::Relaxed);
        walk::OWN_END.store(end, Ordering::Relaxed);
    }
    #[cfg(all(target_arch = "aarch64", target_os = "android"))]
    stack::init(arch::snapshot().sp);
    #[cfg(all(target_arch = "arm", target_os = "android"))]
    {
        let here = 0u8;
        stack::init(core::hint::black_box(&here) as *const u8 as usize);
    }
}

/// Stack walks in flight outside an entered call (error reports' failure backtraces may run
/// where the call gate is not held: finalize's checks, the deferred work). Fork prepare closes
/// it after the call gate, so that no walk — and so no holder of the dynamic loader's lock — is
/// in progress at the moment of fork. The allocation path's walks (`capture_from`) do not pass
/// it: they run inside an entered call, whose gate count fork prepare drains first.
pub static CAPTURES: crate::sync::Gate = crate::sync::Gate::new();

/// Where an allocation call's stack walk may start: the registers of the exported entry point
/// (debug_malloc and the rest), read as it is entered. The frames between that function and
/// the capture are all the library's own and never recorded; starting at the entry point's
/// frame saves walking through them (three or four rule lookups of a 16-frame capture's 20).
///
/// Taken with [`Origin::here`] inlined into the entry point, and used only while that function
/// is still running on the same thread (its frame, and so the snapshot's stack slots, live on).
#[derive(Clone, Copy)]
pub struct Origin {
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64", target_arch = "x86"))]
    regs: arch::Regs,
}

impl Origin {
    #[inline(always)]
    pub fn here() -> Origin {
        Origin {
            #[cfg(any(target_arch = "x86_64", target_arch = "aarch64", target_arch = "x86"))]
            regs: arch::snapshot(),
        }
    }
}

/// Captures up to `frames.len()` return addresses of the calling thread, innermost first,
/// absolute, each moved into its call instruction when >= 4096, skipping every frame inside
/// this library. Returns how many were stored. Never allocates.
#[inline(never)]
pub fn capture(frames: &mut [usize]) -> usize {
    let _in_flight = CAPTURES.enter();
    capture_at(frames, Origin::here()).0
}

/// `capture` starting from `origin`'s frame (an entry point still running on this thread)
/// instead of the caller's own. An origin is taken by an entered call (`entry::Entered`), which
/// holds the call gate until it returns, so this walk needs no count of its own in `CAPTURES`:
/// that count's two locked instructions were a fifth of node's captures (docs/performance.md,
/// "Leak reports, 2026-11-26 fourth session").
/// Also returns the memo version the capture's later frames were replayed from, if any: a
/// caller can then keep what it derives from the frames in a note on it (note.rs).
#[inline(never)]
pub fn capture_from(frames: &mut [usize], origin: &Origin) -> (usize, Option<MemoHit>) {
    capture_at(frames, *origin)
}

/// The body of both captures; inlined into each so that the full walk's fallback sees the
/// frame layout it expects (see `full_walk`).
#[inline(always)]
fn capture_at(frames: &mut [usize], origin: Origin) -> (usize, Option<MemoHit>) {
    if frames.is_empty() {
        return (0, None);
    }
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64", target_arch = "x86"))]
    {
        let regs = origin.regs;
        #[cfg(all(target_arch = "aarch64", target_os = "android"))]
        if let Some(n) = walk::frame_pointer_walk(frames, regs) {
            return (n, None);
        }
        match walk::cached_walk(frames, regs) {
            walk::Walk::Done(n) => return (n, None),
            walk::Walk::Replayed(n, hit) => return (n, Some(hit)),
            walk::Walk::Unsupported => {}
        }
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64", target_arch = "x86")))]
    let _ = origin;
    // Not a tail call: full_walk drops exactly two frames, its own and the capturing
    // function's; the library's frames above those are dropped as its own.
    (core::hint::black_box(other_walk(frames)), None)
}

/// The walk for what the cached one does not cover: the `unwinding` crate's, or 32-bit arm's
/// EHABI walk (exidx.rs).
#[inline(always)]
fn other_walk(frames: &mut [usize]) -> usize {
    #[cfg(target_arch = "arm")]
    let n = exidx::walk(frames);
    #[cfg(not(target_arch = "arm"))]
    let n = walk::full_walk(frames);
    n
}

/// The fast-path block (docs/spec/errors.md#fast-format): ERROR records, normally one (a block
/// longer than a log record is split at line boundaries).
pub fn log_frames(frames: &[usize]) {
    crate::symbolize::with_symbolizer(|res| {
        res.prepare(frames);
        // A report's batch takes the lines as they are resolved (host exit reports);
        // otherwise the block is formatted into records.
        let batched = crate::log::write_lines_batched(Priority::Error, &mut |line| {
            for (i, &pc) in frames.iter().enumerate() {
                res.fast_line_parts(i, pc, line);
            }
        });
        if !batched {
            format::fast_block(frames, res, &mut |rec| {
                crate::log::write_record(Priority::Error, TAG, rec)
            });
        }
    });
}

/// Announces a backtrace a report will log (see `Resolver::prepare`).
pub fn announce(frames: &[usize]) {
    crate::symbolize::with_symbolizer(|res| res.prepare(frames));
}

/// Whether frame lines are annotated by `malloc-debug run`'s server (then announcing a
/// report's backtraces first saves round trips).
pub fn annotating() -> bool {
    crate::symbolize::annotating()
}

/// The `backtrace_full` format (docs/spec/errors.md#full-format): one ERROR record per frame.
pub fn log_frames_full(frames: &[usize]) {
    crate::symbolize::with_symbolizer(|res| {
        res.prepare(frames);
        format::full_block(frames, res, &mut |rec| {
            crate::log::write_record(Priority::Error, TAG, rec)
        })
    });
}

const TAG: &str = "malloc_debug";

/// One frame as a heap dump's `bt_info` (docs/spec/abi.md#heap-dump) needs it.
#[derive(Clone, Copy, Debug, Default)]
pub struct FrameDescription<'a> {
    /// Map name; empty when no map contains the pc or the map is anonymous.
    pub map_name: &'a [u8],
    /// pc relative to its ELF file; the absolute pc when no map contains it (libunwindstack's
    /// value for a frame without a map).
    pub rel_pc: u64,
    /// The map's start address (0 without a map); bt_info does not print it, tests check it.
    #[cfg_attr(not(test), allow(dead_code, reason = "read by tests only"))]
    pub map_start: u64,
    /// Demangled (or raw) function name; empty when unknown.
    pub function: &'a [u8],
    /// pc − function start (0 when unknown).
    pub function_offset: u64,
}

/// Describes `pc` for `bt_info` lines. Call it inside a [`SymbolSession`] (a heap dump opens
/// one) so that the maps are read once and each pc resolved once; without one, every call
/// starts afresh. Call it without holding locks that allocation paths take.
pub fn describe_frame(pc: usize, f: &mut dyn FnMut(&FrameDescription<'_>)) {
    crate::symbolize::with_symbolizer(|res| {
        res.resolve(pc, &mut |r| {
            let (function, function_offset) = r.symbol.unwrap_or((b"", 0));
            let d = FrameDescription {
                map_name: r.map.map_or(b"", |m| m.name),
                rel_pc: if r.map.is_some() { r.rel_pc } else { r.pc },
                map_start: r.map.map_or(0, |m| m.start),
                function,
                function_offset,
            };
            f(&d)
        })
    });
}

/// Calls `f` with the source file of `pc` when its module's own line table names one
/// (symbolize/lines.rs says what is read); for suppression rules. Like [`describe_frame`],
/// cheap only inside a [`SymbolSession`].
pub fn frame_source_file(pc: usize, f: &mut dyn FnMut(&[u8])) {
    crate::symbolize::with_symbolizer(|res| res.source_file(pc, f));
}

/// Fork prepare / malloc_disable: takes the module's own lock (the symbolizer's caches).
/// Capture takes no lock of ours; `BacktraceTable` has its own `lock_raw`.
pub fn lock_raw() {
    crate::symbolize::lock_raw();
}

/// Fork parent and child / malloc_enable: releases what `lock_raw` took.
pub fn unlock_raw() {
    crate::symbolize::unlock_raw();
}
