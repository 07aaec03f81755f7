//! Exit-time classification of every live block (the `leak_unreachable` extension, README
//! "Extensions"), in valgrind memcheck's terms:
//!
//! * still reachable: reachable from the roots of scan.rs (writable data of every module,
//!   thread stacks, the spilled registers of the calling thread, heap memory outside the live
//!   blocks) directly or through other reachable blocks;
//! * definitely lost ("unreachable"): not reachable, and not referenced by another unreachable
//!   block — the entry point of a lost structure. A lost cycle that nothing unreachable outside
//!   it references has its lowest-addressed block as entry point;
//! * indirectly lost: not reachable, and referenced from a definitely lost block (transitively).
//!
//! A pointer anywhere inside a block (an interior pointer) references it, as for the rest of
//! the detector; valgrind would call a block held only by interior pointers "possibly lost".
//!
//! The walk runs in a forked child, as the signal check's does: other threads of an exiting
//! process may still run, free and unmap blocks and move pointers while a scan reads them; the
//! child's copy-on-write image is consistent and nothing else touches it. The child writes one
//! kind per block into a shared anonymous mapping, then a completion mark after them, and
//! exits; the parent reads them once the child is gone. The program may reap the child itself
//! (bash's SIGCHLD handler calls `waitpid(-1)`, which took our child's status in one run of 20
//! under load and made the report fail): SIGCHLD is blocked in this thread while the child
//! runs, and the completion mark, not the exit status, says whether the walk finished. The
//! cost is the fork (page tables of the process) and the walk.

use super::scan::{self, Array, Blocks, UNMARKED};
use crate::snapshot::LiveBlock;
use crate::state::State;

/// What a block is, one byte per block.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Reachable = 1,
    Definite = 2,
    Indirect = 3,
}

impl Kind {
    pub fn from_byte(b: u8) -> Kind {
        match b {
            2 => Kind::Definite,
            3 => Kind::Indirect,
            _ => Kind::Reachable,
        }
    }

    /// The words of the leak line and of the summary (valgrind's).
    pub fn name(self) -> &'static str {
        match self {
            Kind::Reachable => "still reachable",
            Kind::Definite => "definitely lost",
            Kind::Indirect => "indirectly lost",
        }
    }
}

/// The byte after the kinds once the child has written them all.
const DONE: u8 = 0xd0;

/// Kinds of `records` (sorted by address), in a shared mapping the child filled.
pub struct Kinds {
    ptr: core::ptr::NonNull<u8>,
    len: usize,
}

impl Kinds {
    pub fn get(&self, i: usize) -> Kind {
        // SAFETY: `len` bytes mapped for as long as self lives; any byte value is handled.
        Kind::from_byte(unsafe { *self.ptr.as_ptr().add(i.min(self.len.saturating_sub(1))) })
    }
}

impl Drop for Kinds {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `shared_bytes` (`len` kinds and the completion mark), no
        // longer referenced.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len + 1) };
    }
}

/// A shared anonymous mapping of `len` (at least 1) zeroed bytes (the child's writes are seen by
/// the parent), as a `Kinds` of `len - 1` kinds.
fn shared_bytes(len: usize) -> Option<Kinds> {
    // SAFETY: a fresh anonymous mapping; no existing memory is affected.
    let p = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            len.max(1),
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return None;
    }
    Some(Kinds {
        ptr: core::ptr::NonNull::new(p.cast())?,
        len: len.saturating_sub(1),
    })
}

/// Where the scan of the calling thread's stack starts: `spilled`, which receives the
/// callee-saved registers, in the frame of the caller. Call it first thing in the library's
/// frame that runs the report: the library's own frames below it (a sort keeps copies of the
/// records it moves on the stack) are then left out.
#[inline(always)]
pub fn stack_top(spilled: &mut [usize; 16]) -> usize {
    super::spill_registers(spilled);
    core::hint::black_box(spilled) as *const _ as usize
}

/// Classifies every block of `records` (sorted by address, all live), scanning this thread's
/// stack from `stack_from` (see [`stack_top`]) up. `own_calls`: library calls this thread has
/// in flight (the fork handlers wait for every other one). `None` when the child could not be
/// started or failed (no memory for its bookkeeping).
pub fn classify_live(
    state: &State,
    records: &[LiveBlock],
    stack_from: usize,
    own_calls: usize,
) -> Option<Kinds> {
    let n = records.len();
    // The kinds and the completion mark.
    let kinds = shared_bytes(n + 1)?;
    let _sigchld = SigchldBlocked::new();
    // The library's fork handlers leave the child able to run the walk, which uses only system
    // calls and fresh mappings.
    let pid = crate::sync::fork_from_inside(own_calls);
    if pid == 0 {
        // SAFETY: the shared mapping, `n + 1` bytes, written only by this child.
        let out = unsafe { core::slice::from_raw_parts_mut(kinds.ptr.as_ptr(), n + 1) };
        if walk(state, records, stack_from, &mut out[..n]).is_some() {
            out[n] = DONE;
        }
        // SAFETY: leave the child without running the parent's exit handlers.
        unsafe { libc::_exit(0) };
    }
    if pid < 0 {
        return None;
    }
    let mut status = 0;
    // SAFETY: our child; reaped so it leaves no zombie. ECHILD: the program reaped it (another
    // thread's SIGCHLD handler); either way it has exited.
    while unsafe { libc::waitpid(pid, &mut status, 0) } < 0
        && crate::platform::errno() == libc::EINTR
    {}
    // SAFETY: the byte after the kinds, in the mapping; the child has exited.
    let done = unsafe { core::ptr::read_volatile(kinds.ptr.as_ptr().add(n)) } == DONE;
    done.then_some(kinds)
}

/// SIGCHLD blocked in the calling thread for the scope (the previous mask restored after): a
/// handler of the program on this thread cannot reap the walk's child before we do.
struct SigchldBlocked {
    old: libc::sigset_t,
}

impl SigchldBlocked {
    fn new() -> Self {
        // SAFETY: sigset operations on local sets; pthread_sigmask only changes this thread's
        // mask and stores the old one.
        unsafe {
            let mut set: libc::sigset_t = core::mem::zeroed();
            let mut old: libc::sigset_t = core::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGCHLD);
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
            SigchldBlocked { old }
        }
    }
}

impl Drop for SigchldBlocked {
    fn drop(&mut self) {
        // SAFETY: restores the mask saved in `new`.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, core::ptr::null_mut()) };
    }
}

/// The child's work: roots, then the lost blocks' kinds.
fn walk(state: &State, records: &[LiveBlock], stack_from: usize, out: &mut [u8]) -> Option<()> {
    let mut referenced = Array::<u8>::new(records.len())?;
    let marker = |r: &LiveBlock| super::allocator_marker(state, r.pointer);
    scan::with_marked(records, stack_from, marker, |blocks, mark, work| {
        classify(blocks, mark, work, referenced.slice(), out);
        Some(())
    })
}

/// Given `mark` (REACHABLE for every block reachable from the roots, UNMARKED for the rest),
/// writes each block's kind into `out`. `work` and `referenced` are scratch, one slot per
/// block (`referenced` zeroed).
pub(super) fn classify(
    blocks: &Blocks<'_>,
    mark: &mut [u8],
    work: &mut [u32],
    referenced: &mut [u8],
    out: &mut [u8],
) {
    let records = blocks.records;
    // Which unreachable blocks another unreachable block points into.
    for (i, r) in records.iter().enumerate() {
        if mark[i] == UNMARKED {
            scan::scan_block(r, |v| {
                if let Some(j) = blocks.containing(v)
                    && j != i
                    && mark[j] == UNMARKED
                {
                    referenced[j] = 1;
                }
            });
        }
    }
    for (o, &m) in out.iter_mut().zip(mark.iter()) {
        *o = if m == UNMARKED {
            0
        } else {
            Kind::Reachable as u8
        };
    }
    // First the entry points nothing unreachable references, then what is left: cycles, each
    // entered at its lowest address. Everything an entry point reaches is indirectly lost.
    for entries_only in [true, false] {
        for i in 0..records.len() {
            if out[i] != 0 || (entries_only && referenced[i] != 0) {
                continue;
            }
            out[i] = Kind::Definite as u8;
            let mut top = 0usize;
            let visit = |v: usize, out: &mut [u8], work: &mut [u32], top: &mut usize| {
                if let Some(j) = blocks.containing(v)
                    && out[j] == 0
                {
                    out[j] = Kind::Indirect as u8;
                    work[*top] = j as u32;
                    *top += 1;
                }
            };
            scan::scan_block(&records[i], |v| visit(v, out, work, &mut top));
            while top > 0 {
                top -= 1;
                let r = &records[work[top] as usize];
                scan::scan_block(r, |v| visit(v, out, work, &mut top));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::unreachable::scan::REACHABLE;

    /// A heap of `sizes.len()` blocks, each a zeroed boxed slice of words, sorted by address.
    struct Heap {
        blocks: Vec<Box<[usize]>>,
    }

    impl Heap {
        fn new(words: &[usize]) -> Heap {
            Heap {
                blocks: words
                    .iter()
                    .map(|&n| vec![0usize; n].into_boxed_slice())
                    .collect(),
            }
        }
        fn addr(&self, i: usize) -> usize {
            self.blocks[i].as_ptr() as usize
        }
        /// Block `from`'s word `at` points `offset` bytes into block `to`.
        fn link(&mut self, from: usize, at: usize, to: usize, offset: usize) {
            let target = self.addr(to) + offset;
            self.blocks[from][at] = target;
        }
        /// Kinds of every block (in the order of `new`), with `roots` reachable.
        fn classify(&self, roots: &[usize]) -> Vec<Kind> {
            let mut records: Vec<(LiveBlock, usize)> = self
                .blocks
                .iter()
                .enumerate()
                .map(|(i, b)| {
                    let r = LiveBlock {
                        pointer: b.as_ptr() as usize,
                        size: b.len() * 8,
                        zygote: false,
                        backtrace_id: 0,
                        frames: 0,
                    };
                    (r, i)
                })
                .collect();
            records.sort_by_key(|(r, _)| r.pointer);
            let sorted: Vec<LiveBlock> = records.iter().map(|(r, _)| *r).collect();
            let n = sorted.len();
            let markers = vec![usize::MAX; n];
            let blocks = Blocks::new(&sorted, &markers);
            let mut mark = vec![UNMARKED; n];
            let mut work = vec![0u32; n];
            // Roots: mark and propagate as mark_from_roots does, through the work list.
            let mut top = 0;
            for &root in roots {
                let j = records.iter().position(|(_, i)| *i == root).unwrap();
                mark[j] = REACHABLE;
                work[top] = j as u32;
                top += 1;
            }
            while top > 0 {
                top -= 1;
                let r = sorted[work[top] as usize];
                scan::scan_block(&r, |v| {
                    if let Some(j) = blocks.containing(v)
                        && mark[j] == UNMARKED
                    {
                        mark[j] = REACHABLE;
                        work[top] = j as u32;
                        top += 1;
                    }
                });
            }
            let mut referenced = vec![0u8; n];
            let mut out = vec![0u8; n];
            classify(&blocks, &mut mark, &mut work, &mut referenced, &mut out);
            let mut kinds = vec![Kind::Reachable; n];
            for (j, (_, i)) in records.iter().enumerate() {
                kinds[*i] = Kind::from_byte(out[j]);
            }
            kinds
        }
    }

    use Kind::{Definite as D, Indirect as I, Reachable as R};

    #[test]
    fn lone_blocks_and_chains() {
        // 0 root -> 1 -> 2; 3 lost -> 4 -> 5; 6 lost alone.
        let mut h = Heap::new(&[2, 2, 2, 2, 2, 2, 2]);
        h.link(0, 0, 1, 0);
        h.link(1, 1, 2, 0);
        h.link(3, 0, 4, 0);
        h.link(4, 0, 5, 0);
        assert_eq!(h.classify(&[0]), [R, R, R, D, I, I, D]);
    }

    #[test]
    fn cycles_have_one_entry_point() {
        // 0 <-> 1 lost cycle; 2 -> 3 -> 4 -> 2 lost cycle entered from 5 (lost);
        // 6 <-> 7 cycle reachable from root 8; 9 points to itself.
        let mut h = Heap::new(&[2; 10]);
        h.link(0, 0, 1, 0);
        h.link(1, 0, 0, 0);
        h.link(2, 0, 3, 0);
        h.link(3, 0, 4, 0);
        h.link(4, 0, 2, 0);
        h.link(5, 1, 3, 0);
        h.link(6, 0, 7, 0);
        h.link(7, 0, 6, 0);
        h.link(8, 0, 6, 0);
        h.link(9, 0, 9, 0);
        let k = h.classify(&[8]);
        // The pure cycle: its lowest-addressed block is the entry point.
        let (lo, hi) = if h.addr(0) < h.addr(1) {
            (0, 1)
        } else {
            (1, 0)
        };
        assert_eq!((k[lo], k[hi]), (D, I));
        assert_eq!(&k[2..], [I, I, I, D, R, R, R, D]);
    }

    #[test]
    fn interior_pointers_count_and_the_end_does_not() {
        // 0 root -> interior of 1 (byte 12); 2 lost -> last byte of 3; 4 lost -> one past the
        // end of 5 (not a reference: 5 is its own entry point).
        let mut h = Heap::new(&[2, 4, 2, 4, 2, 4]);
        h.link(0, 1, 1, 12);
        h.link(2, 0, 3, 31);
        h.link(4, 0, 5, 32);
        // (One past a block's end is the next chunk's header in glibc, never inside a block.)
        assert_eq!(h.classify(&[0]), [R, R, D, I, D, D]);
    }

    #[test]
    fn nothing_lost_when_everything_is_reachable() {
        let mut h = Heap::new(&[1, 1, 1]);
        h.link(0, 0, 1, 0);
        h.link(1, 0, 2, 0);
        assert_eq!(h.classify(&[0]), [R, R, R]);
        assert_eq!(Heap::new(&[]).classify(&[]), []);
    }
}
