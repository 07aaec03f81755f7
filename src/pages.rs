//! Internal memory straight from the kernel. Tables that grow with the number of live
//! allocations use `mmap`, never the exported malloc (which would re-enter the library) nor the
//! native allocator (whose own lock a caller of malloc may hold while we grow).

use core::ptr::NonNull;
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Maps `bytes` of zeroed read-write memory, rounded up to whole pages. errno is left as it was
/// whatever happens: internal memory is not the caller's business, and a caller that fails for
/// want of it says so itself.
pub fn map(bytes: usize) -> Option<NonNull<u8>> {
    let saved = crate::platform::errno();
    let p = map_pages(bytes, 0);
    crate::platform::set_errno(saved);
    p
}

/// `map` for memory the caller is about to write all over (a table that growth fills with
/// the entries of the old one): the kernel provides every page in the one `mmap` call
/// (`MAP_POPULATE`) instead of one page fault per page as the writes reach it. A page fault
/// costs a trap and, in a virtual machine, an exit; a program that reaches 20,000 live blocks
/// in its first milliseconds took 1,350 of them in live-table growth alone.
pub fn map_filled(bytes: usize) -> Option<NonNull<u8>> {
    let saved = crate::platform::errno();
    let p = map_pages(bytes, libc::MAP_POPULATE);
    crate::platform::set_errno(saved);
    p
}

/// `map` for memory that start-up cannot do without: a failure is logged, naming `what`, so
/// that an initialisation that fails for lack of memory says why.
pub fn map_or_log(bytes: usize, what: &str) -> Option<NonNull<u8>> {
    let p = map(bytes);
    if p.is_none() {
        crate::log::log_error!("out of memory for {} ({} bytes)", what, bytes);
    }
    p
}

fn map_pages(bytes: usize, flags: libc::c_int) -> Option<NonNull<u8>> {
    let len = round_to_pages(bytes)?;
    // SAFETY: anonymous private mapping; no existing memory is affected.
    let p = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | flags,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return (crate::platform::errno() == libc::ENOMEM && release_reserve_for_report())
            .then(|| map_pages(bytes, flags))
            .flatten();
    }
    name_mapping(p, len);
    register(p as usize, len);
    NonNull::new(p.cast())
}

/// Memory for the length of one walk (a buffer too large for the stack), unmapped when
/// dropped.
pub struct Scratch {
    memory: NonNull<u8>,
    len: usize,
}

impl Scratch {
    pub fn new(len: usize) -> Option<Scratch> {
        Some(Scratch {
            memory: map(len)?,
            len,
        })
    }

    pub fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: our own mapping of `len` zeroed bytes, borrowed through `self`.
        unsafe { core::slice::from_raw_parts_mut(self.memory.as_ptr(), self.len) }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // SAFETY: mapped by `new` with this length, no longer borrowed.
        unsafe { unmap(self.memory, self.len) };
    }
}

/// Returns memory obtained from `map` with the same `bytes`.
///
/// # Safety
/// `p` must come from `map(bytes)` and not be used afterwards.
pub unsafe fn unmap(p: NonNull<u8>, bytes: usize) {
    if let Some(len) = round_to_pages(bytes) {
        unregister(p.as_ptr() as usize);
        let saved = crate::platform::errno();
        // SAFETY: forwarded: the range is exactly a mapping we created.
        unsafe { libc::munmap(p.as_ptr().cast(), len) };
        crate::platform::set_errno(saved);
    }
}

// ---------------------------------------------------------------------------------------------
// The reserve for reports (issue 20.7). Under an address-space limit (`ulimit -v`) a program may
// use up every mapping the limit allows; a report then could not grow the unwinder's caches or
// read /proc/self/maps, and printed `pc 0` frames. Room is set aside at start-up (PROT_NONE: no
// memory, only address space under the limit) and given back the first time a mapping fails
// while a report is being written, so that the report's own mappings fit; once no report is
// being written, it is taken again if the room is there (the report's temporary mappings are
// gone by then).

const RESERVE_BYTES: usize = if cfg!(target_pointer_width = "64") {
    8 << 20
} else {
    2 << 20
};
/// The reserve's address, 0 while given back.
static RESERVE: AtomicUsize = AtomicUsize::new(0);
/// Reports being written, by any thread.
static REPORTS: AtomicUsize = AtomicUsize::new(0);

/// Sets the reserve aside, unless it is already. errno is left as it was.
pub fn take_reserve() {
    if RESERVE.load(Ordering::Acquire) != 0 {
        return;
    }
    let saved = crate::platform::errno();
    // SAFETY: an anonymous inaccessible mapping; no existing memory is affected.
    let p = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            RESERVE_BYTES,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p != libc::MAP_FAILED {
        name_mapping(p, RESERVE_BYTES);
        if RESERVE
            .compare_exchange(0, p as usize, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            // SAFETY: our own mapping, just made and published nowhere.
            unsafe { libc::munmap(p, RESERVE_BYTES) };
        }
    }
    crate::platform::set_errno(saved);
}

/// Gives the reserve back if a report is being written: true when there was one to give.
fn release_reserve_for_report() -> bool {
    if REPORTS.load(Ordering::Acquire) == 0 {
        return false;
    }
    let p = RESERVE.swap(0, Ordering::AcqRel);
    if p == 0 {
        return false;
    }
    // SAFETY: the reserve mapping, taken out of RESERVE by this call alone.
    unsafe { libc::munmap(p as *mut libc::c_void, RESERVE_BYTES) };
    true
}

/// While one lives, a mapping that fails for want of address space first gives the reserve
/// back: held around a report's stack captures and symbolization.
pub struct ReportScope(());

impl ReportScope {
    pub fn enter() -> ReportScope {
        REPORTS.fetch_add(1, Ordering::AcqRel);
        ReportScope(())
    }
}

impl Drop for ReportScope {
    fn drop(&mut self) {
        if REPORTS.fetch_sub(1, Ordering::AcqRel) == 1 {
            take_reserve();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The registry of our own mappings: the unreachable-memory scan must not take the library's
// tables (which hold heap addresses) for references. Names in /proc/self/maps would do where the
// kernel supports them, which is not everywhere. Lock-free, so that a fork child can use it
// whatever the parent's threads were doing.

const REGISTRY_SLOTS: usize = 1024;
static REGISTRY: [(AtomicUsize, AtomicUsize); REGISTRY_SLOTS] =
    [const { (AtomicUsize::new(0), AtomicUsize::new(0)) }; REGISTRY_SLOTS];

fn register(start: usize, len: usize) {
    for (s, l) in &REGISTRY {
        if s.compare_exchange(0, start, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            l.store(len, Ordering::Release);
            return;
        }
    }
    // Full: the mapping goes unlisted (the scan may then see more references than exist,
    // which only hides leaks; it never invents one).
}

fn unregister(start: usize) {
    for (s, l) in &REGISTRY {
        if s.load(Ordering::Acquire) == start {
            l.store(0, Ordering::Release);
            s.store(0, Ordering::Release);
            return;
        }
    }
}

/// Every live mapping of the library's own, as (start, length), in no particular order.
pub fn for_each_ours(mut f: impl FnMut(usize, usize)) {
    for (s, l) in &REGISTRY {
        let (start, len) = (s.load(Ordering::Acquire), l.load(Ordering::Acquire));
        if start != 0 && len != 0 {
            f(start, len);
        }
    }
}

fn round_to_pages(bytes: usize) -> Option<usize> {
    let page = crate::platform::page_size();
    Some(bytes.checked_add(page - 1)? & !(page - 1))
}

/// Names the mapping `[anon:malloc_debug]` in /proc/PID/maps where the kernel supports it, so
/// the library's own memory is easy to tell apart (and libmemunreachable skips it). Kernels
/// without CONFIG_ANON_VMA_NAME answer EINVAL; after that the call is not made again.
fn name_mapping(p: *mut libc::c_void, len: usize) {
    const PR_SET_VMA: libc::c_int = 0x53564d41;
    const PR_SET_VMA_ANON_NAME: libc::c_ulong = 0;
    static UNSUPPORTED: AtomicBool = AtomicBool::new(false);
    if UNSUPPORTED.load(Ordering::Relaxed) {
        return;
    }
    // SAFETY: prctl only reads the name; failure is harmless (errno is restored by `map`).
    let rc = unsafe {
        libc::prctl(
            PR_SET_VMA,
            PR_SET_VMA_ANON_NAME,
            p,
            len,
            c"malloc_debug".as_ptr(),
        )
    };
    if rc != 0 && crate::platform::errno() == libc::EINVAL {
        UNSUPPORTED.store(true, Ordering::Relaxed);
    }
}
