//! The heap walk of the unreachable-memory check, run in a forked child: a copy-on-write image
//! of the whole process that nothing else touches, so the walk needs no lock and stops no thread.
//!
//! Conservative mark and sweep. Roots are every readable and writable mapping except the
//! library's own tables and the live blocks themselves (heap memory between blocks counts: it
//! holds the allocator's bookkeeping and, conservatively, stale values), and for the thread that
//! forked, its stack from the point of the check upwards (dead frames below could only hide
//! leaks). Any aligned word whose value falls inside a block marks it; marked blocks are scanned
//! in turn through an explicit work list. Then unreachable blocks referenced by other unreachable
//! blocks are folded into the ones that reference them, as libmemunreachable does.
//!
//! Limits, as for any scan without ptrace: registers of the other threads are not read (a
//! thread blocked in the kernel has its callee-saved registers on its stack; one running at the
//! moment of the fork may hold a last reference in a register only).

use super::{CONTENTS, Leak, Summary};
use crate::pages;
use crate::snapshot::LiveBlock;
use crate::symbolize::maps::{Maps, PROT_READ, PROT_WRITE};

const WORD: usize = core::mem::size_of::<usize>();
/// Root memory is copied through this much at a time with `process_vm_readv`, which fails
/// cleanly where a read would fault (a file mapping past its end, say).
const BOUNCE: usize = 64 * 1024;
const OURS_MAX: usize = 1024;

/// Blocks sorted by address, and where to find the block containing an address.
pub(super) struct Blocks<'a> {
    pub(super) records: &'a [LiveBlock],
    /// Per block, an address inside it that the native allocator itself points at (see
    /// `run`'s `allocator_marker`), or `usize::MAX`.
    markers: &'a [usize],
    low: usize,
    high: usize,
}

impl<'a> Blocks<'a> {
    pub(super) fn new(records: &'a [LiveBlock], markers: &'a [usize]) -> Self {
        let low = records.first().map_or(0, |r| r.pointer);
        let high = records
            .iter()
            .map(|r| r.pointer + r.size)
            .max()
            .unwrap_or(0);
        Blocks {
            records,
            markers,
            low,
            high,
        }
    }

    /// Index of the block with `start <= value < start + size`, unless `value` is the block's
    /// allocator marker.
    #[inline]
    pub(super) fn containing(&self, value: usize) -> Option<usize> {
        if value < self.low || value >= self.high {
            return None;
        }
        let i = self
            .records
            .partition_point(|r| r.pointer <= value)
            .checked_sub(1)?;
        let r = self.records.get(i)?;
        (value - r.pointer < r.size.max(1) && self.markers.get(i) != Some(&value)).then_some(i)
    }
}

/// Fixed arrays in fresh mappings (the child must not call malloc: another thread of the parent
/// may have held the allocator's lock at the fork).
pub(super) struct Array<T: Copy> {
    ptr: core::ptr::NonNull<T>,
    len: usize,
}

impl<T: Copy> Array<T> {
    pub(super) fn new(len: usize) -> Option<Self> {
        let bytes = len.max(1).checked_mul(core::mem::size_of::<T>())?;
        Some(Array {
            ptr: pages::map(bytes)?.cast(),
            len,
        })
    }
    pub(super) fn slice(&mut self) -> &mut [T] {
        // SAFETY: `len` elements of zeroed memory (a valid bit pattern for the integer and
        // plain-data types used here), owned by self.
        unsafe { core::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

pub(super) const UNMARKED: u8 = 0;
pub(super) const REACHABLE: u8 = 1;
/// Unreachable, and already counted under some reported leak.
const FOLDED: u8 = 2;

/// Runs the walk; `None` when memory for its bookkeeping could not be mapped.
///
/// `allocator_marker(block)` names the address inside a block that the native allocator's own
/// bookkeeping points at, if any: glibc keeps pointers to chunk headers (the top chunk, free
/// chunks in its bins), and the header of the chunk after a block lies inside the block's last
/// bytes. Such a value is not a reference from the program.
pub fn run(
    records: &[LiveBlock],
    stack_from: usize,
    allocator_marker: impl Fn(&LiveBlock) -> usize,
    mut send: impl FnMut(&[u8]),
) -> Option<()> {
    with_marked(
        records,
        stack_from,
        allocator_marker,
        |blocks, mark, work| send_leaks(blocks, mark, work, &mut send),
    )
}

/// The first half of every walk: the blocks indexed with their allocator markers, and `mark`
/// set from the roots (REACHABLE for every block reachable from them, UNMARKED for the rest);
/// `then` gets them with a work array of one slot per block. `None` when memory for the
/// bookkeeping could not be mapped.
pub(super) fn with_marked<R>(
    records: &[LiveBlock],
    stack_from: usize,
    allocator_marker: impl Fn(&LiveBlock) -> usize,
    then: impl FnOnce(&Blocks<'_>, &mut [u8], &mut [u32]) -> Option<R>,
) -> Option<R> {
    let n = records.len();
    let mut markers = Array::<usize>::new(n)?;
    let markers = markers.slice();
    for (m, r) in markers.iter_mut().zip(records) {
        *m = allocator_marker(r);
    }
    let blocks = Blocks::new(records, markers);
    let mut mark = Array::<u8>::new(n)?;
    let mut work = Array::<u32>::new(n)?;
    let (mark, work) = (mark.slice(), work.slice());
    mark_from_roots(&blocks, mark, work, stack_from)?;
    then(&blocks, mark, work)
}

/// The check's answer: the summary, then the reported leaks, each as bytes for the pipe.
fn send_leaks(
    blocks: &Blocks<'_>,
    mark: &mut [u8],
    work: &mut [u32],
    send: &mut impl FnMut(&[u8]),
) -> Option<()> {
    let n = blocks.records.len();
    let mut summary = Summary {
        allocations: n,
        allocation_bytes: blocks.records.iter().map(|r| r.size).sum(),
        ..Summary::default()
    };
    for (i, r) in blocks.records.iter().enumerate() {
        if mark[i] == UNMARKED {
            summary.leaks += 1;
            summary.leak_bytes += r.size;
        }
    }
    let leaks = fold(blocks, mark, work)?;
    summary.reported = leaks.len().min(super::LIMIT);
    send(as_bytes(&summary));
    for leak in &leaks[..summary.reported] {
        send(as_bytes(leak));
    }
    Some(())
}

/// Marks REACHABLE every block reachable from the roots (see the module docs), transitively.
/// `mark` and `work` have one slot per block; `None` when memory could not be mapped.
pub(super) fn mark_from_roots(
    blocks: &Blocks<'_>,
    mark: &mut [u8],
    work: &mut [u32],
    stack_from: usize,
) -> Option<()> {
    let mut bounce = Array::<u8>::new(BOUNCE)?;
    let mut ours = [(0usize, 0usize); OURS_MAX];
    let mut n_ours = 0;
    pages::for_each_ours(|start, len| {
        if n_ours < OURS_MAX {
            ours[n_ours] = (start, start + len);
            n_ours += 1;
        }
    });
    let ours = &mut ours[..n_ours];
    ours.sort_unstable();
    let maps = Maps::read_self()?;
    let mut top = 0usize;
    let own_name = maps
        .find(anchor as fn() as usize)
        .and_then(|i| maps.entries().get(i))
        .map_or(&b""[..], |e| maps.name(e));
    let mut previous_ours = false;

    for e in maps.entries() {
        // The library's own static data (its writable segments and the anonymous .bss
        // mapping right after them) is not the program's: the backtrace memos keep words read
        // from stacks there, heap addresses among them (`as` under `backtrace`: two blocks
        // held only by a memo).
        let name = maps.name(e);
        let own_data =
            !own_name.is_empty() && (name == own_name || (name.is_empty() && previous_ours));
        previous_ours = own_data;
        if own_data
            || e.flags & (PROT_READ | PROT_WRITE) != PROT_READ | PROT_WRITE
            || name.starts_with(b"/dev/")
        {
            continue;
        }
        let start = if (e.start..e.end).contains(&stack_from) {
            stack_from & !(WORD - 1)
        } else {
            e.start
        };
        scan_roots(start, e.end, ours, blocks, bounce.slice(), |v| {
            push(blocks, mark, work, &mut top, v, REACHABLE)
        });
        // Drain as we go so the work list never holds more than the n blocks it was sized for.
        while top > 0 {
            top -= 1;
            let r = blocks.records[work[top] as usize];
            scan_block(&r, |v| push(blocks, mark, work, &mut top, v, REACHABLE));
        }
    }
    Some(())
}

/// An address in the library's code, to find its mappings by.
#[inline(never)]
fn anchor() {}

/// Splits `[start, end)` around the library's own mappings and the live blocks, calling `f` on
/// each remaining piece.
fn for_each_root_range(
    start: usize,
    end: usize,
    ours: &[(usize, usize)],
    blocks: &Blocks<'_>,
    mut f: impl FnMut(usize, usize),
) {
    let mut at = start;
    let mut next_block = blocks
        .records
        .partition_point(|r| r.pointer + r.size <= start);
    let mut next_ours = ours.partition_point(|&(_, e)| e <= start);
    while at < end {
        let block = blocks
            .records
            .get(next_block)
            .map(|r| (r.pointer, r.pointer + r.size));
        let own = ours.get(next_ours).copied();
        // The nearest excluded range at or after `at`.
        let skip = match (block, own) {
            (Some(b), Some(o)) => Some(if b.0 <= o.0 { b } else { o }),
            (b, o) => b.or(o),
        };
        match skip {
            Some((s, e)) if s < end => {
                if s > at {
                    f(at, s);
                }
                at = at.max(e);
                if block == Some((s, e)) {
                    next_block += 1;
                } else {
                    next_ours += 1;
                }
            }
            _ => {
                f(at, end);
                break;
            }
        }
    }
}

/// Every aligned word of `[start, end)` outside the library's mappings and the live blocks
/// (see `for_each_root_range`), read through `process_vm_readv` a bounce buffer at a time: one
/// system call per 64 KiB, not one per gap between two blocks (a heap of 1M small blocks has
/// 1M gaps; reading them one by one took most of the 4.6 s of such an exit report).
fn scan_roots(
    start: usize,
    end: usize,
    ours: &[(usize, usize)],
    blocks: &Blocks<'_>,
    bounce: &mut [u8],
    mut f: impl FnMut(usize),
) {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    let mut at = start;
    while let Some(first) = first_root(at, end, ours, blocks) {
        // Reads start at the first root word, so a large block is skipped, not copied.
        let base = first & !(WORD - 1);
        let len = (end - base).min(bounce.len()) & !(WORD - 1);
        if len == 0 {
            break;
        }
        let local = libc::iovec {
            iov_base: bounce.as_mut_ptr().cast(),
            iov_len: len,
        };
        let remote = libc::iovec {
            iov_base: base as *mut libc::c_void,
            iov_len: len,
        };
        // SAFETY: the kernel copies from our own address space into `bounce` (at least `len`
        // bytes) and reports unreadable memory as an error instead of faulting.
        let got = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
        let read_end = base + (got.max(0) as usize & !(WORD - 1));
        if read_end <= first {
            // Unreadable: skip to the next page.
            at = (first | (crate::platform::page_size() - 1)) + 1;
            continue;
        }
        for_each_root_range(first, read_end, ours, blocks, |a, b| {
            let mut w = (a + WORD - 1) & !(WORD - 1);
            while w + WORD <= b {
                let i = w - base;
                if let Some(bytes) = bounce.get(i..i + WORD) {
                    f(usize::from_ne_bytes(bytes.try_into().unwrap_or_default()));
                }
                w += WORD;
            }
        });
        at = read_end;
    }
}

/// The first address of `[at, end)` inside no live block and no mapping of ours.
fn first_root(
    mut at: usize,
    end: usize,
    ours: &[(usize, usize)],
    blocks: &Blocks<'_>,
) -> Option<usize> {
    loop {
        let i = blocks.records.partition_point(|r| r.pointer + r.size <= at);
        let in_block = blocks
            .records
            .get(i)
            .filter(|r| r.pointer <= at)
            .map(|r| r.pointer + r.size);
        let j = ours.partition_point(|&(_, e)| e <= at);
        let in_ours = ours.get(j).filter(|&&(s, _)| s <= at).map(|&(_, e)| e);
        match in_block.or(in_ours) {
            Some(past) if past > at => at = past,
            _ => break,
        }
    }
    (at < end).then_some(at)
}

/// Every aligned word inside a live block (heap memory: readable while the block lives).
pub(super) fn scan_block(r: &LiveBlock, mut f: impl FnMut(usize)) {
    let words = r.size / WORD;
    for k in 0..words {
        // SAFETY: inside the block's `size` bytes, which the snapshot recorded as allocated.
        f(unsafe { ((r.pointer + k * WORD) as *const usize).read_unaligned() });
    }
}

/// Unreachable blocks not referenced by another unreachable block become reported leaks, each
/// counting what it references (transitively); cycles with no such entry are reported from
/// their lowest address. Sorted by total bytes, largest first.
fn fold(blocks: &Blocks<'_>, mark: &mut [u8], work: &mut [u32]) -> Option<&'static mut [Leak]> {
    let n = blocks.records.len();
    let mut referenced = Array::<u8>::new(n)?;
    let referenced = referenced.slice();
    for (i, r) in blocks.records.iter().enumerate() {
        if mark[i] == UNMARKED {
            scan_block(r, |v| {
                if let Some(j) = blocks.containing(v)
                    && j != i
                    && mark[j] == UNMARKED
                {
                    referenced[j] = 1;
                }
            });
        }
    }
    let leaks_len = mark.iter().filter(|&&m| m == UNMARKED).count();
    let leaks = Array::<Leak>::new(leaks_len)?;
    // SAFETY: a fresh mapping of `leaks_len` zeroed Leak values (plain data), never unmapped:
    // the child exits right after sending them.
    let leaks: &'static mut [Leak] =
        unsafe { core::slice::from_raw_parts_mut(leaks.ptr.as_ptr(), leaks_len) };
    let mut count = 0;
    for pass in [true, false] {
        for i in 0..n {
            // First pass: entries nothing else references; second: what is left (cycles).
            if mark[i] != UNMARKED || (pass && referenced[i] != 0) {
                continue;
            }
            mark[i] = FOLDED;
            let mut leak = Leak::of(&blocks.records[i]);
            let mut top = 0;
            scan_block(&blocks.records[i], |v| {
                push(blocks, mark, work, &mut top, v, FOLDED)
            });
            while top > 0 {
                top -= 1;
                let r = &blocks.records[work[top] as usize];
                leak.referenced_count += 1;
                leak.referenced_size += r.size;
                scan_block(r, |v| push(blocks, mark, work, &mut top, v, FOLDED));
            }
            leaks[count] = leak;
            count += 1;
        }
    }
    let leaks = &mut leaks[..count];
    leaks.sort_unstable_by(|a, b| {
        (b.size + b.referenced_size)
            .cmp(&(a.size + a.referenced_size))
            .then(a.begin.cmp(&b.begin))
    });
    Some(leaks)
}

/// Marks the unmarked block `v` points into (if any) with `to` and queues it for scanning.
#[inline]
fn push(blocks: &Blocks<'_>, mark: &mut [u8], work: &mut [u32], top: &mut usize, v: usize, to: u8) {
    if let Some(j) = blocks.containing(v)
        && mark[j] == UNMARKED
    {
        mark[j] = to;
        work[*top] = j as u32;
        *top += 1;
    }
}

impl Leak {
    fn of(r: &LiveBlock) -> Leak {
        let mut leak = Leak {
            begin: r.pointer,
            size: r.size,
            backtrace_id: r.backtrace_id,
            ..Leak::default()
        };
        leak.contents_len = r.size.min(CONTENTS);
        // SAFETY: the first `contents_len` bytes of a live block.
        let bytes =
            unsafe { core::slice::from_raw_parts(r.pointer as *const u8, leak.contents_len) };
        leak.contents[..leak.contents_len].copy_from_slice(bytes);
        leak
    }
}

fn as_bytes<T: Copy>(v: &T) -> &[u8] {
    // SAFETY: plain-data repr(C) values without padding-sensitive reads on the other side (the
    // parent reads them back as the same type from the same build).
    unsafe { core::slice::from_raw_parts((v as *const T).cast(), core::mem::size_of::<T>()) }
}
