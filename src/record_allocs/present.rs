//! Present bytes (docs/spec/abi.md#present-bytes, as amended by current AOSP:
//! docs/spec/android-versions.md#present-bytes):
//! how much of a block lies in resident pages, asked of the kernel with `mincore()` — up to
//! 2048 pages a call, as Android 17 does — instead of reading /proc/self/pagemap, so no
//! descriptor is kept open (and none goes stale in a fork child).
//!
//! The values are the pagemap method's (a page is resident or not either way). A failed call
//! logs `mincore failed: <strerror>` and the bytes counted so far are returned (the pagemap
//! version returned -1): the pages of the earlier calls, none of the failing one.
//!
//! A system call costs about as much as the rest of a recorded free together, so most blocks are
//! answered without one, exactly (docs/performance.md, "Seventh session"): the
//! size lookup that precedes the measurement — the reference's as well as ours — has just read
//! the header in front of the block. When that header lies in the block's first page, the page
//! is resident now (a swapped-out page was faulted back in by the read; a never-written one
//! cannot hold a header), so a block that fits in that page is present in full. glibc's lookup
//! also reads the next chunk's header, right after the block, so a block of its heap that ends
//! in its second page is present in full too. Other blocks ask the kernel.

use crate::log::log_error;
use core::sync::atomic::{AtomicUsize, Ordering};

/// Pages asked per call (Android 17's `kMaxReadPages`). A failure counts whole calls, so this
/// is part of the result, not only of the cost.
const CHUNK: usize = 2048;

/// What the size lookup that precedes a measurement has just read next to the block.
#[derive(Clone, Copy)]
pub struct Read {
    /// `[pointer - before, pointer)` (0: nothing known).
    before: usize,
    /// The bytes right after the block's usable end.
    after: bool,
}

impl Read {
    /// Our header, `before` bytes in front of the block.
    pub fn before(before: usize) -> Read {
        Read {
            before,
            after: false,
        }
    }

    /// The native allocator's `malloc_usable_size`, which returned `len`. glibc reads the
    /// chunk's size word just below the pointer and, for a chunk of its heap (not mmapped), the
    /// next chunk's size word, which starts where the block's usable bytes end. The size word
    /// is only trusted when it gives `len` as glibc computes it (another allocator behind the
    /// dispatch gets no shortcut); it is read only when it lies in the block's own page, which
    /// is mapped. On Android the allocator is not known here (jemalloc's lookup reads neither),
    /// so every block asks the kernel.
    #[cfg(not(target_os = "android"))]
    pub fn native(pointer: usize, len: usize) -> Read {
        const IS_MMAPPED: usize = 2;
        const NOTHING: Read = Read {
            before: 0,
            after: false,
        };
        if pointer & (page_size() - 1) < 8 {
            return NOTHING;
        }
        // SAFETY: 8 bytes in the page of a live block, so mapped; a plain read.
        let size_word = unsafe { ((pointer - 8) as *const usize).read_volatile() };
        let mmapped = size_word & IS_MMAPPED != 0;
        let chunk = size_word & !7;
        let header = if mmapped { 16 } else { 8 };
        if chunk.checked_sub(header) != Some(len) {
            return NOTHING;
        }
        Read {
            before: 8,
            after: !mmapped,
        }
    }

    /// On Android the allocator is known only if initialize recognised Scudo
    /// ([`recognise_native`]): Scudo's `malloc_usable_size` reads the chunk header 16 bytes
    /// before the pointer, so the block's first page is resident when that header lies in it.
    /// Other allocators (jemalloc) read nothing next to the block: every block asks the kernel.
    #[cfg(target_os = "android")]
    pub fn native(pointer: usize, _len: usize) -> Read {
        let before = if SCUDO.load(Ordering::Relaxed) && pointer & (page_size() - 1) >= 16 {
            16
        } else {
            0
        };
        Read {
            before,
            after: false,
        }
    }
}

/// Whether the native allocator was recognised as Scudo (Android).
#[cfg(target_os = "android")]
static SCUDO: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);

/// At initialize, on Android: is the native allocator Scudo? Told by its chunk headers: three
/// fresh blocks of different sizes must each carry, 16 bytes before the pointer, Scudo's packed
/// header (a primary size class, state "allocated", the requested size in
/// `SizeOrUnusedBytes`). Read with `process_vm_readv`, so another allocator's neighbouring
/// memory, mapped or not, is never dereferenced.
pub fn recognise_native(dispatch: &crate::dispatch::MallocDispatch) {
    #[cfg(target_os = "android")]
    {
        let looks_like_scudo = [40usize, 72, 136].iter().all(|&size| {
            // SAFETY: native allocation; the block is freed below.
            let p = unsafe { (dispatch.malloc)(size) } as usize;
            if p == 0 {
                return false;
            }
            let low = crate::platform::read_foreign_u32(p - 16);
            // SAFETY: the block allocated above, freed once.
            unsafe { (dispatch.free)(p as *mut _) };
            low.is_some_and(|h| {
                let class = h & 0xff;
                let state = (h >> 8) & 3;
                let size_field = (h >> 12) as usize & 0xf_ffff;
                class != 0 && state == 1 && size_field == size
            })
        });
        SCUDO.store(looks_like_scudo, Ordering::Relaxed);
    }
    #[cfg(not(target_os = "android"))]
    let _ = dispatch;
}

/// Bytes of `[pointer, pointer + len)` in resident pages; -1 when `pointer` is null or `len` 0.
/// `read`: what the size lookup just read; the pages it read in are resident.
pub fn bytes(pointer: usize, len: usize, read: Read) -> i64 {
    if pointer == 0 || len == 0 {
        return -1;
    }
    let page = page_size();
    let offset = pointer & (page - 1);
    let first_resident = read.before != 0 && offset >= read.before;
    // The byte after the block is in the block's last page unless the block ends on a page
    // boundary.
    let last_resident = read.after && !(offset + len).is_multiple_of(page);
    let pages = (offset + len).div_ceil(page);
    if first_resident && (pages == 1 || (pages == 2 && last_resident)) {
        return len as i64;
    }
    let end = pointer.saturating_add(len);
    let mut start = pointer & !(page - 1);
    let mut total = 0usize;
    // Left uninitialised: only the bytes a call wrote are read (zeroing 2 KiB per free costs).
    let mut resident = core::mem::MaybeUninit::<[u8; CHUNK]>::uninit();
    while start < end {
        let pages = (end - start).div_ceil(page).min(CHUNK);
        // SAFETY: `start` is page-aligned and `resident` holds a byte for each of the `pages`
        // pages asked for. mincore only reads the page tables.
        let rc =
            unsafe { libc::mincore(start as *mut _, pages * page, resident.as_mut_ptr().cast()) };
        if rc != 0 {
            log_error!(
                "mincore failed: {}",
                crate::errors::strerror(crate::platform::errno())
            );
            break;
        }
        // SAFETY: the successful call wrote one byte for each of the `pages` pages.
        let resident =
            unsafe { core::slice::from_raw_parts(resident.as_ptr().cast::<u8>(), pages) };
        for (k, &r) in resident.iter().enumerate() {
            if r & 1 != 0 {
                let page_start = start + k * page;
                total += (page_start + page).min(end) - page_start.max(pointer);
            }
        }
        start += pages * page;
    }
    total as i64
}

/// The page size, asked of libc once (this runs on every recorded free).
fn page_size() -> usize {
    static PAGE: AtomicUsize = AtomicUsize::new(0);
    match PAGE.load(Ordering::Relaxed) {
        0 => {
            let page = crate::platform::page_size();
            PAGE.store(page, Ordering::Relaxed);
            page
        }
        page => page,
    }
}
