//! Present bytes (spec §7.4): how much of a block is backed by resident pages, from
//! /proc/self/pagemap (bit 63 of each page's 8-byte entry), opened once at start-up.

use crate::log::log_error;
use core::sync::atomic::{AtomicI32, Ordering};

static PAGEMAP: AtomicI32 = AtomicI32::new(-1);
/// Entries read per pread. The spec allows up to 1024; nearly every block spans one or two pages,
/// and a smaller buffer keeps this (per free, under record_allocs) off an 8 KiB stack frame.
const CHUNK: usize = 64;
const PRESENT: u64 = 1 << 63;

pub fn init() {
    PAGEMAP.store(open_pagemap(), Ordering::Release);
}

fn open_pagemap() -> i32 {
    // SAFETY: NUL-terminated literal path.
    unsafe {
        libc::open(
            c"/proc/self/pagemap".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    }
}

/// Fork child: the inherited descriptor still reads the parent's page table (`/proc/self` was
/// resolved when it was opened), so the child opens its own.
pub fn reopen_in_child() {
    let old = PAGEMAP.load(Ordering::Acquire);
    if old < 0 {
        return;
    }
    // SAFETY: our own descriptor; only the forking thread exists in the child.
    unsafe { libc::close(old) };
    PAGEMAP.store(open_pagemap(), Ordering::Release);
}

/// Bytes of `[pointer, pointer + len)` in present pages; -1 when unknown or `len` is 0.
pub fn bytes(pointer: usize, len: usize) -> i64 {
    let fd = PAGEMAP.load(Ordering::Acquire);
    if len == 0 || fd < 0 {
        return -1;
    }
    // A failed read is logged, not the caller's error (this runs inside frees and reallocs).
    let saved_errno = crate::platform::errno();
    let page = crate::platform::page_size();
    let end = pointer + len;
    let first = pointer / page;
    let last = (end - 1) / page;
    let mut total = 0usize;
    let mut entries = [0u64; CHUNK];
    let mut index = first;
    while index <= last {
        let count = (last - index + 1).min(CHUNK);
        // SAFETY: reads at most `count` u64 entries into the local array.
        let got = unsafe {
            libc::pread(
                fd,
                entries.as_mut_ptr().cast(),
                count * 8,
                (index * 8) as libc::off_t,
            )
        };
        if got <= 0 {
            log_error!(
                "Failed to read page data: {}",
                crate::errors::strerror(crate::platform::errno())
            );
            crate::platform::set_errno(saved_errno);
            return -1;
        }
        let read = got as usize / 8;
        for (k, e) in entries[..read].iter().enumerate() {
            if e & PRESENT != 0 {
                let page_start = (index + k) * page;
                let lo = page_start.max(pointer);
                let hi = (page_start + page).min(end);
                total += hi - lo;
            }
        }
        index += read.max(1);
    }
    total as i64
}
