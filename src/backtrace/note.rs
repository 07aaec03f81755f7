//! Notes on memos: one value a caller attaches to the stacks a memo replays, so that the work
//! it does per distinct stack (tracking interns the frames into the backtrace store: a hash of
//! every frame, a probe of the store's index, a comparison with the stored frames, each likely
//! a cache miss) can be skipped when a capture replays the same memo again.
//!
//! The model: a capture that ends in a memo replay (memo.rs) knows exactly which frames it
//! holds — the frames its first steps pushed (the *prefix*, at most `walk::MEMO_AFTER` of
//! them) followed by the words of one memo version, identified by the memo's slot and
//! sequence number ([`MemoHit`]). A note is filed under that slot with the version it was made
//! for and the prefix it was made with. A later capture that replays the same version and
//! pushed the same prefix holds the same frames, so the note's value is the one the caller
//! computed for them. A memo rewritten since has a new sequence number: its old notes no longer
//! match anything. Exactness rests on the memo's own argument (memo.rs): a replay that hits
//! pushed precisely the memo version's frames.
//!
//! One memo often serves stacks that differ only in their first frames (alloc_mix's eight call
//! chains share memos this way), so each memo slot has `NOTES_PER_MEMO` notes, filled as they
//! come; when all hold other prefixes of the same version, a further prefix is not noted
//! (replacing one would make two callers rewrite it in turn on every capture). Each note is a
//! seqlock of its own (as the memos are): writers that find it busy give up, readers that see
//! it change ignore it. The notes live in a parallel array: the memos' lines stay as they are
//! and a capture that replays no memo reads none of them.

use super::cache::{begin_write, end_write};
use core::num::NonZeroU64;
use core::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering, fence};

/// Most prefix frames a note keeps (the prefix is at most MEMO_AFTER frames).
const PREFIX: usize = 3;
/// Notes per memo slot.
const NOTES_PER_MEMO: usize = 4;
/// `Note::version` of an empty note.
const EMPTY: u32 = 0;

/// The memo version a capture's replay pushed, and how many frames the walk had pushed
/// before it.
///
/// One non-zero word, so that a capture's `(length, Option<MemoHit>)` is a pair of scalars and
/// comes back in two registers. Returned through memory (it was three u32 and a tag), the
/// caller's 16-byte load of what the capture had just stored field by field could not be
/// forwarded from the store buffer, and stalled every capture on the allocation path.
#[derive(Clone, Copy, Debug)]
pub struct MemoHit(
    /// `seq << 32 | (memo slot + 1) << 16 | frames pushed before`: never zero.
    NonZeroU64,
);

impl MemoHit {
    pub(super) fn new(memo: usize, seq: u32, pushed_before: usize) -> MemoHit {
        const _: () = assert!(super::memo::MEMO_SLOTS < u16::MAX as usize);
        const _: () = assert!(super::MAX_FRAMES <= u16::MAX as usize);
        let packed = (u64::from(seq) << 32) | ((memo as u64 + 1) << 16) | pushed_before as u64;
        MemoHit(NonZeroU64::new(packed).unwrap_or(NonZeroU64::MIN))
    }

    /// The memo slot replayed.
    pub(super) fn memo(&self) -> usize {
        ((self.0.get() >> 16) & 0xffff) as usize - 1
    }

    /// The memo slot's version when it was replayed.
    pub(super) fn seq(&self) -> u32 {
        (self.0.get() >> 32) as u32
    }

    /// How many of the capture's first frames came before the memo's.
    pub fn prefix_len(&self) -> usize {
        (self.0.get() & 0xffff) as usize
    }
}

#[repr(C, align(64))]
struct Note {
    seq: AtomicU32,
    /// The memo version the note was made for (its sequence number: even, and at least 2 once
    /// the memo was written); 0 while empty. Zero, not an impossible odd value, so that the
    /// notes start as zero bytes: the array is then in .bss, and the pages that lookups only
    /// read stay the kernel's zero page instead of 256 KiB of the library's file counted in
    /// the program's RSS. A memo whose sequence wraps to 0 gets no note.
    version: AtomicU32,
    prefix_len: AtomicU32,
    value: AtomicU64,
    prefix: [AtomicUsize; PREFIX],
}

pub struct Notes {
    notes: [[Note; NOTES_PER_MEMO]; super::memo::MEMO_SLOTS],
}

pub static NOTES: Notes = Notes::new();

impl Notes {
    const fn new() -> Self {
        Notes {
            notes: [const {
                [const {
                    Note {
                        seq: AtomicU32::new(0),
                        version: AtomicU32::new(EMPTY),
                        prefix_len: AtomicU32::new(0),
                        value: AtomicU64::new(0),
                        prefix: [const { AtomicUsize::new(0) }; PREFIX],
                    }
                }; NOTES_PER_MEMO]
            }; super::memo::MEMO_SLOTS],
        }
    }

    /// The value noted for the stack `hit` replayed behind `prefix` (the capture's first
    /// `hit.prefix_len()` frames), if any.
    #[inline]
    pub fn get(&self, hit: &MemoHit, prefix: &[usize]) -> Option<u64> {
        if hit.seq() == EMPTY {
            return None;
        }
        let notes = self.notes.get(hit.memo())?;
        notes.iter().find_map(|note| note.read(hit.seq(), prefix))
    }

    /// Notes `value` for the stack `hit` replayed behind `prefix`, in the memo slot's note for
    /// this prefix, else in one that holds no note for this memo version. Gives up when there
    /// is none, when the chosen note is being written by another thread, or when the prefix is
    /// longer than a note holds.
    pub fn set(&self, hit: &MemoHit, prefix: &[usize], value: u64) {
        let Some(notes) = self.notes.get(hit.memo()) else {
            return;
        };
        if prefix.len() > PREFIX || hit.seq() == EMPTY {
            return;
        }
        let this_version = |n: &&Note| n.version.load(Ordering::Relaxed) == hit.seq();
        let Some(note) = notes
            .iter()
            .find(|n| this_version(n) && n.holds(prefix))
            .or_else(|| notes.iter().find(|n| !this_version(n)))
        else {
            return;
        };
        let Some(s) = begin_write(&note.seq) else {
            return;
        };
        note.version.store(hit.seq(), Ordering::Relaxed);
        note.prefix_len
            .store(prefix.len() as u32, Ordering::Relaxed);
        note.value.store(value, Ordering::Relaxed);
        for (slot, &f) in note.prefix.iter().zip(prefix) {
            slot.store(f, Ordering::Relaxed);
        }
        end_write(&note.seq, s);
    }
}

impl Note {
    fn holds(&self, prefix: &[usize]) -> bool {
        self.prefix_len.load(Ordering::Relaxed) as usize == prefix.len()
            && self
                .prefix
                .iter()
                .zip(prefix)
                .all(|(a, &b)| a.load(Ordering::Relaxed) == b)
    }

    /// The value, if this note was made for memo version `version` behind `prefix` and is not
    /// being rewritten.
    #[inline]
    fn read(&self, version: u32, prefix: &[usize]) -> Option<u64> {
        let s = self.seq.load(Ordering::Acquire);
        if s & 1 != 0 || self.version.load(Ordering::Relaxed) != version {
            return None;
        }
        let value = self.value.load(Ordering::Relaxed);
        let same = self.holds(prefix);
        fence(Ordering::Acquire);
        (same && self.seq.load(Ordering::Relaxed) == s).then_some(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hit(memo: u32, seq: u32, pushed_before: u32) -> MemoHit {
        MemoHit::new(memo as usize, seq, pushed_before as usize)
    }

    /// A note answers only the memo version and prefix it was made for; a memo slot keeps
    /// NOTES_PER_MEMO prefixes of one version and notes no further one.
    #[test]
    fn a_note_answers_only_its_version_and_prefix() {
        let notes = Notes::new();
        let h = hit(5, 8, 2);
        assert_eq!(notes.get(&h, &[1, 2]), None);
        notes.set(&h, &[1, 2], 77);
        assert_eq!(notes.get(&h, &[1, 2]), Some(77));
        assert_eq!(notes.get(&h, &[1, 3]), None);
        assert_eq!(notes.get(&h, &[1]), None);
        // The memo rewritten since (a new sequence number), or another memo slot.
        assert_eq!(notes.get(&hit(5, 10, 2), &[1, 2]), None);
        assert_eq!(notes.get(&hit(6, 8, 2), &[1, 2]), None);
        // The same prefix is noted again in place (a new epoch, say).
        notes.set(&h, &[1, 2], 79);
        assert_eq!(notes.get(&h, &[1, 2]), Some(79));
        // Other prefixes fill the other notes, then are no longer noted.
        for p in 10..16 {
            notes.set(&h, &[p, p], p as u64);
        }
        for p in 10..13 {
            assert_eq!(notes.get(&h, &[p, p]), Some(p as u64));
        }
        for p in 13..16 {
            assert_eq!(notes.get(&h, &[p, p]), None);
        }
        assert_eq!(notes.get(&h, &[1, 2]), Some(79));
        // A new memo version takes the notes over.
        let newer = hit(5, 10, 2);
        for p in 20..24 {
            notes.set(&newer, &[p], p as u64);
        }
        for p in 20..24 {
            assert_eq!(notes.get(&newer, &[p]), Some(p as u64));
        }
        assert_eq!(notes.get(&h, &[1, 2]), None);
        // Too long a prefix is not noted; an empty one is.
        notes.set(&hit(1, 2, 4), &[1, 2, 3, 4], 9);
        assert_eq!(notes.get(&hit(1, 2, 4), &[1, 2, 3, 4]), None);
        notes.set(&hit(1, 2, 0), &[], 10);
        assert_eq!(notes.get(&hit(1, 2, 0), &[]), Some(10));
        // Out of range slots are ignored.
        notes.set(&hit(u32::MAX, 2, 0), &[], 1);
        assert_eq!(notes.get(&hit(u32::MAX, 2, 0), &[]), None);
    }

    /// A note being written is never read half-written: two writers keep taking the notes of
    /// one memo slot over for two versions of its memo, each note always written with a value
    /// that matches its prefix and version; a reader checks every value it finds. (A stress
    /// check: on x86 the window of a torn read is a few instructions wide, so a broken seqlock
    /// fails it only now and then.)
    #[test]
    fn readers_never_see_a_torn_note() {
        use std::sync::Arc;
        use std::sync::atomic::AtomicBool;
        let notes = Arc::new(Notes::new());
        let stop = Arc::new(AtomicBool::new(false));
        let started = Arc::new(std::sync::Barrier::new(3));
        let prefixes = [0usize, 5, 17, 40, 63];
        let writers: Vec<_> = [4u32, 6]
            .into_iter()
            .map(|version| {
                let (notes, stop, started) = (notes.clone(), stop.clone(), started.clone());
                std::thread::spawn(move || {
                    let h = hit(3, version, 3);
                    let mut i = 0;
                    while !stop.load(Ordering::Relaxed) {
                        let p = prefixes[i % prefixes.len()];
                        notes.set(&h, &[p, p + 1, p + 2], (version as usize * 1000 + p) as u64);
                        if i == 2 * prefixes.len() {
                            started.wait();
                        }
                        i += 1;
                    }
                })
            })
            .collect();
        started.wait();
        let mut found = 0;
        for _ in 0..200_000 {
            for version in [4u32, 6] {
                for p in prefixes {
                    if let Some(v) = notes.get(&hit(3, version, 3), &[p, p + 1, p + 2]) {
                        assert_eq!(v as usize, version as usize * 1000 + p);
                        found += 1;
                    }
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
        for w in writers {
            w.join().unwrap();
        }
        assert!(found > 0);
    }
}
