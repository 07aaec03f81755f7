//! Queries that report on live allocations: leak info, `malloc_backtrace`, `malloc_info`, heap
//! dumps (docs/spec/abi.md#leak-info to
//! docs/spec/abi.md#malloc_iterate-malloc_disable-malloc_enable).
//!
//! The exported queries are called inside an entered call (`entry::enter`: gate held, thread
//! marked); they take the published state as plain data, so this module knows nothing of the
//! entry layer above it (docs/design.md, "Layers").

use crate::backtrace;
use crate::config::bits;
use crate::dispatch::M_PURGE_ALL;
use crate::fmt::{Bytes, StackBuf};
use crate::log::log_error;
use crate::output::{FdWriter, OutputFile};
use crate::platform;
use crate::snapshot::{LiveBlock, Snapshot};
use crate::state::State;
use crate::tracking::{self, BACKTRACES};
use core::ffi::{c_int, c_void};
use core::fmt::Write;

pub struct LeakInfoOut<'a> {
    pub info: &'a mut *mut u8,
    pub overall_size: &'a mut usize,
    pub info_size: &'a mut usize,
    pub total_memory: &'a mut usize,
    pub backtrace_size: &'a mut usize,
}

/// A run of adjacent sorted records with equal zygote flag, size and backtrace
/// (docs/spec/abi.md#list-order-and-merging).
struct Unique {
    first: LiveBlock,
    count: usize,
}

/// Folds runs of adjacent equal records (the reference merges adjacency only, so one
/// (size, backtrace) pair can appear in several records).
fn unique<'a>(records: impl Iterator<Item = &'a LiveBlock>) -> impl Iterator<Item = Unique> {
    let mut records = records.peekable();
    core::iter::from_fn(move || {
        let first = *records.next()?;
        let mut count = 1;
        while let Some(next) = records.peek() {
            if next.zygote != first.zygote
                || next.size != first.size
                || next.backtrace_id != first.backtrace_id
            {
                break;
            }
            count += 1;
            records.next();
        }
        Some(Unique { first, count })
    })
}

pub fn get_malloc_leak_info(state: &State, out: LeakInfoOut<'_>) {
    *out.info = core::ptr::null_mut();
    *out.overall_size = 0;
    *out.info_size = 0;
    *out.total_memory = 0;
    *out.backtrace_size = 0;
    if !state.has(bits::BACKTRACE) {
        log_error!(
            "get_malloc_leak_info: Allocations not being tracked, to enable set the option 'backtrace'."
        );
        return;
    }
    let Some(snapshot) = Snapshot::take() else {
        return;
    };
    let with_slot = || {
        snapshot
            .records()
            .iter()
            .filter(|r| r.backtrace_id != tracking::BT_OFF)
    };
    let count = unique(with_slot()).count();
    if count == 0 {
        return;
    }
    let frames = state.config.backtrace_frames;
    let info_size = 2 * size_of::<usize>() + frames * size_of::<usize>();
    *out.backtrace_size = frames;
    *out.info_size = info_size;
    *out.overall_size = info_size * count;
    // SAFETY: native calloc; the caller frees it with debug_free_malloc_leak_info.
    let buffer = unsafe { (state.dispatch.calloc)(info_size, count) }.cast::<u8>();
    if buffer.is_null() {
        return;
    }
    *out.info = buffer;
    let mut total = 0usize;
    for (i, u) in unique(with_slot()).enumerate() {
        total = total.wrapping_add(u.first.size.wrapping_mul(u.count));
        let zygote_bit = if u.first.zygote { 1usize << 31 } else { 0 };
        // SAFETY: entry i of `count` entries of `info_size` bytes; fields are written unaligned
        // because info_size need not keep usize alignment on every ABI.
        unsafe {
            let entry = buffer.add(i * info_size).cast::<usize>();
            entry.write_unaligned(u.first.size | zygote_bit);
            entry.add(1).write_unaligned(u.count);
            if u.first.has_backtrace() {
                BACKTRACES.with_frames(u.first.backtrace_id, |f| {
                    for (j, &pc) in f.iter().take(frames).enumerate() {
                        entry.add(2 + j).write_unaligned(pc);
                    }
                });
            }
        }
    }
    *out.total_memory = total;
}

pub fn malloc_backtrace(
    state: &State,
    pointer: *mut c_void,
    frames: *mut usize,
    max: usize,
) -> isize {
    if !state.has(bits::BACKTRACE) || frames.is_null() {
        return 0;
    }
    // arm64 libc hands this pointer over still tagged (docs/spec/abi.md#malloc_backtrace).
    let pointer = untag(pointer as usize);
    let Some(id) = tracking::backtrace_of(pointer) else {
        return 0;
    };
    if id <= tracking::BT_EMPTY {
        return 0;
    }
    BACKTRACES
        .with_frames(id, |f| {
            let n = f.len().min(max);
            // SAFETY: the caller provides room for `max` frames.
            unsafe { core::ptr::copy_nonoverlapping(f.as_ptr(), frames, n) };
            n as isize
        })
        .unwrap_or(0)
}

fn untag(pointer: usize) -> usize {
    if cfg!(target_arch = "aarch64") {
        pointer & ((1usize << 56) - 1)
    } else {
        pointer
    }
}

/// `malloc_info` with tracking on (docs/spec/abi.md#malloc_info): one `<allocation>` per run of
/// adjacent entries of the sorted list with the same size, `<total>` being how many entries the run
/// holds (not bytes). As in the reference, the zygote flag is not compared: the runs are separate
/// unless the smallest non-zygote size equals the largest zygote size, where the sorted list puts
/// the two side by side and they make one run.
pub fn malloc_info(state: &State, fp: *mut libc::FILE) -> c_int {
    let _ = state;
    // The call succeeds: errno stays as it was (the stream calls below may set it).
    let saved_errno = crate::platform::errno();
    // SAFETY: the caller's stream (null is refused by `for_stream`).
    let mut w = unsafe { FdWriter::for_stream(fp) };
    let _ = w.write_str("<malloc version=\"debug-malloc-1\">");
    if let Some(snapshot) = Snapshot::take() {
        let records = snapshot.records();
        for (nr, run) in records.chunk_by(|a, b| a.size == b.size).enumerate() {
            let _ = write!(
                w,
                "<allocation nr=\"{}\"><size>{}</size><total>{}</total></allocation>",
                nr,
                run[0].size,
                run.len()
            );
        }
    }
    let _ = w.write_str("</malloc>");
    w.flush();
    crate::platform::set_errno(saved_errno);
    0
}

/// `write_malloc_leak_info(FILE*)`: the dump body on the FILE's descriptor
/// (docs/spec/abi.md#heap-dump).
pub fn write_malloc_leak_info(state: &State, fp: *mut libc::FILE) -> bool {
    if !state.has(bits::BACKTRACE) || fp.is_null() {
        return false;
    }
    // SAFETY: the caller's non-null stream.
    let mut w = unsafe { FdWriter::for_stream(fp) };
    write_dump(state, &mut w);
    w.flush();
    purge(state);
    true
}

pub fn dump_heap(state: &State, file_name: &[u8]) {
    dump_heap_to(state, file_name);
}

/// SIGRTMAX-17: `<prefix>.<pid>.txt`. Out of line: it is rare and its frame is large.
#[cold]
#[inline(never)]
pub fn dump_heap_on_signal(state: &State) {
    let _foreign = crate::sync::DisabledScope::enter();
    let mut name = StackBuf::<4096>::new();
    let _ = write!(
        name,
        "{}.{}.txt",
        Bytes(state.config.backtrace_dump_prefix),
        platform::getpid()
    );
    dump_heap_to(state, name.as_bytes());
}

/// backtrace_dump_on_exit: `<prefix>.<pid>.exit.txt`.
pub fn dump_heap_at_exit(state: &State) {
    let mut name = StackBuf::<4096>::new();
    let _ = write!(
        name,
        "{}.{}.exit.txt",
        Bytes(state.config.backtrace_dump_prefix),
        platform::getpid()
    );
    dump_heap_to(state, name.as_bytes());
}

static DUMP_LOCK: crate::mutex::Mutex<()> = crate::mutex::Mutex::new(());

fn dump_heap_to(state: &State, file_name: &[u8]) {
    let _serialised = DUMP_LOCK.lock();
    let Some(file) = OutputFile::create(file_name, 0o644) else {
        log_error!("Unable to create file: {}", Bytes(file_name));
        return;
    };
    log_error!("Dumping to file: {}\n", Bytes(file_name));
    let mut w = FdWriter::new(file.fd());
    write_dump(state, &mut w);
    let written = w.flush();
    if !file.commit(written) {
        log_error!("Unable to create file: {}", Bytes(file_name));
    }
    purge(state);
}

fn purge(state: &State) {
    // SAFETY: plain native call.
    unsafe { (state.dispatch.mallopt)(M_PURGE_ALL, 0) };
}

/// The v1.2 text format (docs/spec/abi.md#heap-dump).
fn write_dump(state: &State, w: &mut FdWriter) {
    let snapshot = Snapshot::take();
    let records = snapshot.as_ref().map_or(&[][..], |s| s.records());
    let total: usize = unique(records.iter())
        .map(|u| u.first.size.wrapping_mul(u.count))
        .sum();
    let count = unique(records.iter()).count();
    let _ = write!(w, "Android Native Heap Dump v1.2\n\n");
    let _ = write!(w, "Build fingerprint: '");
    platform::build_fingerprint(&mut |b| w.write_bytes(b));
    let _ = write!(w, "'\n\n");
    let _ = writeln!(w, "Total memory: {}", total);
    let _ = writeln!(w, "Allocation records: {}", count);
    let _ = write!(w, "Backtrace size: {}\n\n", state.config.backtrace_frames);
    // One symbolization session for every bt_info line: maps read once, each pc resolved once.
    let symbols = backtrace::SymbolSession::begin();
    for u in unique(records.iter()) {
        let _ = write!(
            w,
            "z {}  sz {:8}  num    {}  bt",
            u.first.zygote as u8, u.first.size, u.count
        );
        if u.first.has_backtrace() {
            BACKTRACES.with_frames(u.first.backtrace_id, |frames| {
                for &pc in frames.iter().take_while(|&&pc| pc != 0) {
                    let _ = write!(w, " {:x}", pc);
                }
                let _ = w.write_str("\n");
                if state.has(bits::BACKTRACE_FULL) {
                    write_bt_info(w, frames);
                }
            });
        } else {
            let _ = w.write_str("\n");
        }
    }
    // The ELF files mapped to name bt_info's functions are not the process's: unmapped (the
    // session ends) before the maps are copied.
    drop(symbols);
    let _ = w.write_str("MAPS\n");
    if !copy_file(b"/proc/self/maps\0", w) {
        let _ = w.write_str("Could not open /proc/self/maps\n");
    }
    let _ = w.write_str("END\n");
}

fn write_bt_info(w: &mut FdWriter, frames: &[usize]) {
    let _ = w.write_str("  bt_info");
    for &pc in frames {
        backtrace::describe_frame(pc, &mut |d| {
            let _ = write!(w, " {{\"{}\" {:x}", Bytes(d.map_name), d.rel_pc);
            if d.function.is_empty() {
                let _ = w.write_str(" \"\" 0}");
            } else {
                let _ = write!(w, " \"{}\" {:x}}}", Bytes(d.function), d.function_offset);
            }
        });
    }
    let _ = w.write_str("\n");
}

/// Copies a file (procfs: size unknown in advance) into the writer.
fn copy_file(path: &[u8], w: &mut FdWriter) -> bool {
    // SAFETY: NUL-terminated path.
    let fd = unsafe { libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return false;
    }
    let mut buf = [0u8; 4096];
    loop {
        // SAFETY: reading into a stack buffer of its own length.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 && platform::errno() == libc::EINTR {
            continue;
        }
        if n <= 0 {
            break;
        }
        w.write_bytes(&buf[..n as usize]);
    }
    // SAFETY: our own descriptor.
    unsafe { libc::close(fd) };
    true
}

#[cfg(test)]
mod tests;
