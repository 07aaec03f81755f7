//! A sorted copy of the live table, for leak reports, heap dumps, leak info and
//! malloc_info (docs/spec/abi.md#list-order-and-merging). Copied under the table's locks into
//! mmap'd memory, then sorted and used without holding any lock.

use crate::header::{DEBUG_TAG, Header, Layout};
use crate::pages;
use crate::tracking::{self, BACKTRACES, LIVE_TABLE};
use core::cmp::Ordering;
use core::ptr::NonNull;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LiveBlock {
    pub pointer: usize,
    pub size: usize,
    pub zygote: bool,
    pub backtrace_id: u32,
    /// Frames of the interned backtrace (0 without one).
    pub frames: usize,
}

impl LiveBlock {
    pub fn has_backtrace(&self) -> bool {
        self.backtrace_id > tracking::BT_EMPTY
    }
}

pub struct Snapshot {
    memory: Option<NonNull<LiveBlock>>,
    capacity: usize,
    len: usize,
    /// The backtrace ids copied stay valid while the snapshot exists, though their blocks may
    /// be freed meanwhile.
    _pin: tracking::RecordPin,
}

impl Snapshot {
    /// Pinned before the table is read (see `tracking::pin_records`).
    fn with_capacity(capacity: usize, pin: tracking::RecordPin) -> Option<Snapshot> {
        let memory = if capacity == 0 {
            None
        } else {
            Some(pages::map(capacity * size_of::<LiveBlock>())?.cast::<LiveBlock>())
        };
        Some(Snapshot {
            memory,
            capacity,
            len: 0,
            _pin: pin,
        })
    }

    fn push_entry(&mut self, pointer: usize, info: crate::live_table::Info) {
        let (size, zygote) = tracking::decode_size(info.size);
        self.push(LiveBlock {
            pointer,
            size,
            zygote,
            backtrace_id: info.backtrace_id,
            frames: 0,
        });
    }

    /// Every live allocation, unsorted and without frame counts, copied while the table cannot
    /// grow. Other threads go on adding and removing entries meanwhile: the copy holds each
    /// entry that lived through the whole copy, and any mix of those that came or went.
    pub fn take_unsorted() -> Option<Snapshot> {
        let pin = tracking::pin_records();
        // Marked and with the backtrace signal blocked while the grow locks are held.
        let _slow = crate::sync::DisabledScope::enter();
        let table = LIVE_TABLE.lock_all();
        let len = table.approximate_len() + count_present();
        Self::copy(pin, len, |f| {
            table.for_each(&mut *f);
            for_each_present(false, f);
        })
    }

    /// As `take_unsorted`, for a caller that holds the gate closed (malloc_disable): nothing
    /// else runs in the library.
    pub fn take_unsorted_quiescent() -> Option<Snapshot> {
        let pin = tracking::pin_records();
        let mut count = count_present();
        LIVE_TABLE.for_each_unlocked(|_, _| count += 1);
        Self::copy(pin, count, |f| {
            LIVE_TABLE.for_each_unlocked(&mut *f);
            for_each_present(true, f);
        })
    }

    /// Copies what `for_each` passes; room for `len` entries and some that may arrive meanwhile,
    /// and another try with more room if even that was not enough. `pin` keeps the records
    /// alive across the tries; each try's snapshot holds a pin of its own.
    fn copy(
        pin: tracking::RecordPin,
        len: usize,
        for_each: impl Fn(&mut dyn FnMut(usize, crate::live_table::Info)),
    ) -> Option<Snapshot> {
        let _held = pin;
        let mut room = len + len / 8 + 64;
        loop {
            let mut s = Snapshot::with_capacity(room, tracking::pin_records())?;
            let mut seen = 0usize;
            for_each(&mut |pointer, info| {
                seen += 1;
                s.push_entry(pointer, info);
            });
            if seen <= room {
                return Some(s);
            }
            room = seen + seen / 4 + 64;
        }
    }

    /// Every live allocation, sorted. `None` if memory for the copy could not be mapped.
    pub fn take() -> Option<Snapshot> {
        let mut snapshot = Self::take_unsorted()?;
        for r in snapshot.records_mut() {
            if r.has_backtrace() {
                r.frames = BACKTRACES
                    .with_frames(r.backtrace_id, |f| f.len())
                    .unwrap_or(0);
            }
        }
        snapshot.records_mut().sort_unstable_by(compare);
        Some(snapshot)
    }

    /// Orders the records by address (the unreachable-memory scan looks blocks up by address).
    pub fn sort_by_address(&mut self) {
        self.records_mut().sort_unstable_by_key(|r| r.pointer);
    }

    fn push(&mut self, r: LiveBlock) {
        if self.len < self.capacity
            && let Some(m) = self.memory
        {
            // SAFETY: len < capacity slots mapped.
            unsafe { m.as_ptr().add(self.len).write(r) };
            self.len += 1;
        }
    }

    pub fn records(&self) -> &[LiveBlock] {
        match self.memory {
            // SAFETY: `len` initialised records.
            Some(m) => unsafe { core::slice::from_raw_parts(m.as_ptr(), self.len) },
            None => &[],
        }
    }

    fn records_mut(&mut self) -> &mut [LiveBlock] {
        match self.memory {
            // SAFETY: `len` initialised records, exclusively ours.
            Some(m) => unsafe { core::slice::from_raw_parts_mut(m.as_ptr(), self.len) },
            None => &mut [],
        }
    }
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        if let Some(m) = self.memory {
            // SAFETY: mapped in `take` with this size.
            unsafe { pages::unmap(m.cast(), self.capacity * size_of::<LiveBlock>()) };
        }
    }
}

/// How many live blocks the presence or size map holds.
fn count_present() -> usize {
    let mut n = 0;
    tracking::for_each_present(|_| n += 1);
    tracking::for_each_sized(|_, _| n += 1);
    n
}

/// The size map's blocks as entries (`tracking::SIZES`), and the presence map's
/// (`tracking::PRESENCE`, header mode only) with the size, and the backtrace id when headers
/// hold one (`tracking::ids_in_headers`), from each block's header. Unless nothing else runs in
/// the library (`quiescent`), a block may be freed, even unmapped, while it is read: its header
/// is then read without faulting (`process_vm_readv`, a batch of blocks per system call), and a
/// block that no longer carries the live tag is left out, as if it had been freed a moment
/// before the copy.
fn for_each_present(quiescent: bool, f: &mut dyn FnMut(usize, crate::live_table::Info)) {
    tracking::for_each_sized(|pointer, size| {
        let info = crate::live_table::Info {
            size: size as u32,
            backtrace_id: tracking::BT_OFF,
        };
        f(pointer, info);
    });
    let Some(state) = crate::state::get() else {
        return;
    };
    if !state.layout.header {
        return;
    }
    let mut batch = HeaderBatch {
        pointers: [0; HeaderBatch::LEN],
        len: 0,
        quiescent,
        ids: tracking::ids_in_headers(),
        scratch: if quiescent {
            None
        } else {
            pages::Scratch::new(tracking::SCRATCH_BYTES)
        },
    };
    tracking::for_each_present(|pointer| {
        batch.pointers[batch.len] = pointer;
        batch.len += 1;
        if batch.len == HeaderBatch::LEN {
            batch.flush(&state.layout, f);
        }
    });
    batch.flush(&state.layout, f);
}

/// A header and the id slot after it (`header::ID_SLOT`), as read in one piece.
const HEADER_READ: usize = size_of::<Header>() + 4;

/// Presence-map blocks whose headers are yet to be read.
struct HeaderBatch {
    pointers: [usize; Self::LEN],
    len: usize,
    quiescent: bool,
    ids: bool,
    /// For reads through the kernel; `None` when quiescent (or out of memory: then one read
    /// per header).
    scratch: Option<pages::Scratch>,
}

impl HeaderBatch {
    const LEN: usize = 128;

    fn flush(&mut self, layout: &Layout, f: &mut dyn FnMut(usize, crate::live_table::Info)) {
        let pointers = &self.pointers[..self.len];
        let mut headers = [None; Self::LEN];
        let headers = &mut headers[..pointers.len()];
        if self.quiescent {
            for (read, &pointer) in headers.iter_mut().zip(pointers) {
                // SAFETY: a live header-mode block, and no call can free it meanwhile; the
                // id slot is inside the header's padding, before the user pointer.
                *read = Some(unsafe {
                    core::ptr::read_unaligned(layout.header_of(pointer).cast::<[u8; HEADER_READ]>())
                });
            }
        } else {
            let mut addresses = [0usize; Self::LEN];
            for (address, &pointer) in addresses.iter_mut().zip(pointers) {
                *address = layout.header_of(pointer) as usize;
            }
            let scratch = self.scratch.as_mut().map_or(&mut [][..], |s| s.bytes());
            crate::platform::read_foreign_records(&addresses[..pointers.len()], headers, scratch);
        }
        for (bytes, &pointer) in headers.iter().zip(pointers) {
            let Some(bytes) = bytes else { continue };
            // SAFETY: `Header` is plain integers, any bytes are a value of it.
            let header = unsafe { core::ptr::read_unaligned(bytes.as_ptr().cast::<Header>()) };
            if header.tag != DEBUG_TAG {
                continue;
            }
            let backtrace_id = match crate::header::ID_SLOT {
                Some(at) if self.ids => {
                    u32::from_ne_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
                }
                _ => tracking::BT_OFF,
            };
            let info = crate::live_table::Info {
                size: header.size.min(crate::header::MAX_SIZE) as u32,
                backtrace_id,
            };
            f(pointer, info);
        }
        self.len = 0;
    }
}

/// Non-zygote first; size descending; with a backtrace before without; more frames first;
/// pointer ascending (the reference's order; its comment claims zygote first, its code and
/// tests put zygote last).
pub fn compare(a: &LiveBlock, b: &LiveBlock) -> Ordering {
    a.zygote
        .cmp(&b.zygote)
        .then(b.size.cmp(&a.size))
        .then(b.has_backtrace().cmp(&a.has_backtrace()))
        .then(b.frames.cmp(&a.frames))
        .then(a.pointer.cmp(&b.pointer))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(pointer: usize, size: usize, zygote: bool, bt: u32, frames: usize) -> LiveBlock {
        LiveBlock {
            pointer,
            size,
            zygote,
            backtrace_id: bt,
            frames,
        }
    }

    #[test]
    fn sort_order_matches_reference() {
        let mut v = [
            rec(0x10, 100, true, 0, 0),
            rec(0x20, 100, false, 0, 0),
            rec(0x30, 200, false, 0, 0),
            rec(0x40, 100, false, 5, 2),
            rec(0x50, 100, false, 6, 3),
            rec(0x08, 100, false, 0, 0),
        ];
        v.sort_unstable_by(compare);
        let order: Vec<usize> = v.iter().map(|r| r.pointer).collect();
        assert_eq!(order, vec![0x30, 0x50, 0x40, 0x08, 0x20, 0x10]);
    }
}
