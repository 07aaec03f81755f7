//! check_unreachable_on_signal (docs/spec/options.md#check_unreachable_on_signal): after
//! SIGRTMAX-16, the next call into the library looks for heap blocks that nothing references any
//! more, and logs them in the layout of libmemunreachable's `LogUnreachableMemory` (which the
//! reference calls). The walk itself runs in a forked child (scan.rs) so the process is stopped
//! only for the fork; the calling thread waits for the child's answer on a pipe. The child also
//! lists the live blocks (`live_blocks`), from the table it inherited: list and memory image are of
//! the same instant.

pub mod classify;
mod report;
mod scan;

use crate::log::{log_error, log_info};
use crate::snapshot::Snapshot;
use crate::state::State;

/// Leaks reported in detail, as the reference's `LogUnreachableMemory(false, 100)`.
const LIMIT: usize = 100;
/// Bytes of each leak's contents that are shown (libmemunreachable's `contents_length`).
const CONTENTS: usize = 32;

/// The child's totals, sent first.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Summary {
    allocations: usize,
    allocation_bytes: usize,
    leaks: usize,
    leak_bytes: usize,
    /// Leak records that follow (at most LIMIT).
    reported: usize,
}

/// One reported leak: a block nothing reachable points to, with what only it references.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Leak {
    begin: usize,
    size: usize,
    referenced_count: usize,
    referenced_size: usize,
    contents_len: usize,
    contents: [u8; CONTENTS],
    backtrace_id: u32,
}

/// Runs one check and logs its result. `stack_from`: where the scan of this thread's stack
/// starts, with the callee-saved registers spilled there (`classify::stack_top`), taken by the
/// caller before it moved to the report stack (`report_stack`).
pub fn check(state: &State, stack_from: usize) {
    log_info!("Starting to check for unreachable memory.");
    if run(state, stack_from).is_none() {
        log_error!("Unreachable check failed, run setenforce 0 and try again.");
    }
}

fn run(state: &State, stack_from: usize) -> Option<()> {
    // The backtrace records of the blocks the child reports must outlive their logging here,
    // though the blocks may be freed meanwhile.
    let _pin = crate::tracking::pin_records();

    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return None;
    }
    let [read_fd, write_fd] = fds;
    // The library's fork handlers leave the child able to run the walk, which uses only system
    // calls and fresh mappings, and leaves with _exit (its gate count, reset by the handlers,
    // is never given back).
    // One call in flight: the allocation call whose entry runs the check.
    let pid = crate::sync::fork_from_inside(1);
    if pid == 0 {
        // SAFETY: the child's copies of the descriptors.
        unsafe { libc::close(read_fd) };
        let ok = live_blocks().and_then(|snapshot| {
            scan::run(
                snapshot.records(),
                stack_from,
                |r| allocator_marker(state, r.pointer),
                |bytes| write_all(write_fd, bytes),
            )
        });
        // SAFETY: leave the child without running the parent's exit handlers.
        unsafe { libc::_exit(if ok.is_some() { 0 } else { 1 }) };
    }
    // SAFETY: the parent's write end; the child holds its own copy.
    unsafe { libc::close(write_fd) };
    let result = if pid > 0 {
        report::receive_and_log(state, read_fd)
    } else {
        None
    };
    // SAFETY: our descriptor; the child (if any) is reaped so it leaves no zombie.
    unsafe {
        libc::close(read_fd);
        if pid > 0 {
            let mut status = 0;
            while libc::waitpid(pid, &mut status, 0) < 0 && crate::platform::errno() == libc::EINTR
            {
            }
        }
    }
    result
}

/// The blocks to check, sorted by address: the live table as the child inherited it, which is
/// the table at the instant of the fork. The memory image is of that same instant, so a block
/// listed here had not been freed in it: a free takes the block out of the table before the
/// native allocator gets it back, and an allocation enters the table after the native one
/// (src/alloc.rs). A copy taken before the fork would list blocks other threads free before
/// it, which no one references any more. The one coupling to the table: `Snapshot` walks it,
/// here in a single-threaded child where nothing can free a block meanwhile, so the copy takes
/// no lock and reads headers directly (the presence map's sizes: one `process_vm_readv` per
/// block otherwise).
fn live_blocks() -> Option<Snapshot> {
    let mut snapshot = Snapshot::take_unsorted_quiescent()?;
    snapshot.sort_by_address();
    Some(snapshot)
}

/// Where glibc's bookkeeping may point inside the block at `pointer`: the header of the next
/// chunk, which overlaps the block's last usable word. Bionic's allocators keep their metadata
/// apart, so nothing is excluded there.
fn allocator_marker(state: &State, pointer: usize) -> usize {
    if cfg!(target_os = "android") {
        return usize::MAX;
    }
    let native = if state.layout.header {
        // SAFETY: a live block of ours (from the snapshot, in the child's unchanging image): its
        // header is readable.
        unsafe { core::ptr::read_unaligned(state.layout.header_of(pointer)).orig_pointer }
    } else {
        pointer
    };
    // SAFETY: a live native allocation; malloc_usable_size takes no lock.
    let usable = unsafe { (state.dispatch.malloc_usable_size)(native as *const libc::c_void) };
    match usable.checked_sub(core::mem::size_of::<usize>()) {
        Some(last_word) if usable > 0 => native + last_word,
        _ => usize::MAX,
    }
}

fn write_all(fd: libc::c_int, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        // SAFETY: writes from a live slice.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if n <= 0 {
            if n < 0 && crate::platform::errno() == libc::EINTR {
                continue;
            }
            return;
        }
        bytes = &bytes[n as usize..];
    }
}

/// Stores the callee-saved registers into `out`, so that a value held only in one of them is
/// seen by a scan of the stack.
#[inline(always)]
fn spill_registers(out: &mut [usize; 16]) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: stores six registers into the caller's array; no other effect.
    unsafe {
        core::arch::asm!(
            "mov [{o}], rbx", "mov [{o} + 8], rbp", "mov [{o} + 16], r12",
            "mov [{o} + 24], r13", "mov [{o} + 32], r14", "mov [{o} + 40], r15",
            o = in(reg) out.as_mut_ptr(), options(nostack, preserves_flags)
        );
    }
    #[cfg(target_arch = "aarch64")]
    // SAFETY: stores eleven registers into the caller's array; no other effect.
    unsafe {
        core::arch::asm!(
            "stp x19, x20, [{o}]", "stp x21, x22, [{o}, #16]", "stp x23, x24, [{o}, #32]",
            "stp x25, x26, [{o}, #48]", "stp x27, x28, [{o}, #64]", "str x29, [{o}, #80]",
            o = in(reg) out.as_mut_ptr(), options(nostack, preserves_flags)
        );
    }
    #[cfg(target_arch = "x86")]
    // SAFETY: stores four registers into the caller's array; no other effect.
    unsafe {
        core::arch::asm!(
            "mov [{o}], ebx", "mov [{o} + 4], ebp", "mov [{o} + 8], esi", "mov [{o} + 12], edi",
            o = in(reg) out.as_mut_ptr(), options(nostack, preserves_flags)
        );
    }
    #[cfg(target_arch = "arm")]
    // SAFETY: stores eight registers into the caller's array; no other effect.
    unsafe {
        core::arch::asm!(
            "str r4, [{o}]", "str r5, [{o}, #4]", "str r6, [{o}, #8]", "str r7, [{o}, #12]",
            "str r8, [{o}, #16]", "str r9, [{o}, #20]", "str r10, [{o}, #24]",
            "str r11, [{o}, #28]",
            o = in(reg) out.as_mut_ptr(), options(nostack, preserves_flags)
        );
    }
    #[cfg(not(any(
        target_arch = "x86_64",
        target_arch = "aarch64",
        target_arch = "x86",
        target_arch = "arm"
    )))]
    let _ = out;
}
