//! Present bytes (spec §7.4, as amended by current AOSP: docs/performance.md, "record_allocs"):
//! how much of a block lies in resident pages, asked of the kernel with `mincore()` — up to
//! 2048 pages a call, as Android 17 does — instead of reading /proc/self/pagemap, so no
//! descriptor is kept open (and none goes stale in a fork child).
//!
//! The values are the pagemap method's (a page is resident or not either way). A failed call
//! logs `mincore failed: <strerror>` and the bytes counted so far are returned (the pagemap
//! version returned -1): the pages of the earlier calls, none of the failing one.

use crate::log::log_error;

/// Pages asked per call (Android 17's `kMaxReadPages`). A failure counts whole calls, so this
/// is part of the result, not only of the cost.
const CHUNK: usize = 2048;

/// Bytes of `[pointer, pointer + len)` in resident pages; -1 when `pointer` is null or `len` 0.
pub fn bytes(pointer: usize, len: usize) -> i64 {
    if pointer == 0 || len == 0 {
        return -1;
    }
    let page = crate::platform::page_size();
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
