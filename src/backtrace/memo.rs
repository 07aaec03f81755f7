//! Whole-stack memos: a walk that reaches a frame (return address and stack pointer) where an
//! earlier walk stood usually goes on through the same frames again, and checking that is much
//! cheaper than walking.
//!
//! The cached walk is a chain of dependent loads (return address → rule slot → next return
//! address); on a program that sweeps its heap, every rule slot is a cache miss and a 16-frame
//! capture pays sixteen of them in a row. A memo lists the stack slots (offsets from its
//! start's stack pointer) the walk read and the return addresses it found there. Verifying it
//! is a run of independent loads from the hot stack, with no rule lookup at all.
//!
//! Where a memo starts: `walk::MEMO_AFTER` frames into the walk, not at its first frame. All
//! allocation calls of a thread reach the allocator through the same few frames at the same
//! stack depth, so a key taken there would file every call path under one start; a few frames
//! up they have parted. The memo also records how many frames the sink held at its start
//! (frames of this library are not pushed, so one start can follow different counts).
//!
//! Exactness: the walk is a function of its starting registers and of the words it reads. Each
//! step's rule is a function of the return address (within one loader generation); where the
//! step reads is a function of the stack pointer and, for frame-pointer-based CFAs, of the
//! frame pointer, itself either the starting one or a word read earlier. So a memo holds every
//! read that can matter (return addresses always; saved frame pointers when some frame bases
//! its CFA on the frame pointer), the start (return address and stack pointer: its key) and,
//! when a frame uses it, the starting frame pointer. If the stack holds the memo's first `i`
//! words at the memo's first `i` offsets, the real walk makes its `i+1`-th read at the memo's
//! `i+1`-th offset; by induction, a memo whose words all match is exactly the walk the cached
//! walker would do, and every stack read made while verifying is one that walk would make
//! (which is also why verification stops at the first mismatch). A memo carries the generation
//! of its rules, like the rule cache, checked before any stack read (the generation of
//! permanent code when every rule it used came from code that is never unloaded, as is usual,
//! so that a replay need not read the loader's). Walks through signed return addresses
//! (aarch64 PAC) are not memoised.
//!
//! Storage: a fixed set-associative table in `.bss` with a line of way tags per set; each memo
//! is a seqlock (as in cache.rs).
//! A reader re-checks the sequence before each stack read, so it never follows an offset from
//! a memo that is being rewritten.
//!
//! Thrashing: one start can lead on to many different stacks (a program whose call chains
//! branch above the allocating frames: benches/stack_mix.c has 32 continuations per start). All
//! of them share a set, which holds `WAYS`; past that, most replays try every way in vain and
//! then record and store a memo that evicts another one, which costs far more than walking
//! without memos (2,800 instructions per call against 1,900 on that mix). Each set keeps a
//! miss score (an average of its replays that found ways with its tag but no match); while it
//! says most replays miss, walks from the set's starts neither try nor record memos, except
//! for one probe in about `PAUSE` walks that tells whether the set's starts repeat again.

use super::arch::Regs;
use super::cache::{ANY_GENERATION, UNKNOWN_GENERATION, begin_write, end_write};
use super::note::MemoHit;
use super::walk::Sink;
use core::mem::MaybeUninit;
use core::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence};

/// Most stack reads a memo holds: the default 16 frames fit, with a saved frame pointer per
/// frame where the code keeps frame pointers.
pub const ENTRIES: usize = 40;
/// Reads a trace can collect before dropping the saved frame pointers nobody used (most
/// frames save one even in code without frame pointers).
const TRACE_READS: usize = 64;
const SETS: usize = 128;
const WAYS: usize = 8;
/// Memo slots in all (notes on memos, note.rs, are kept per slot).
pub const MEMO_SLOTS: usize = SETS * WAYS;
/// `limit` of a walk that ended by itself (outermost frame, zero return address, implausible
/// frame) rather than by filling the caller's buffer: valid for any buffer size.
const NATURAL_END: u32 = 0xffff;
/// A set's miss score (`MemoTable::misses`) is about `MISS_ONE` times the share of its recent
/// replays that missed (an average over about `MISS_DECAY` replays).
const MISS_ONE: u32 = 1024;
const MISS_DECAY: u32 = 16;
/// Above this score (half of the replays missed) the set's memos are left alone.
const MISS_LIMIT: u32 = MISS_ONE / 2;
/// Walks left alone after a miss that takes the score above MISS_LIMIT.
const PAUSE: u32 = 32;

/// The miss score policy: whether a set with this score is left alone (and its next score),
/// and the score after a replay that hit or missed. While a set is left alone its score falls
/// by one per walk; a miss that takes it above MISS_LIMIT puts it at least PAUSE above, so a
/// set whose memos keep missing is probed about once in PAUSE walks.
#[inline(always)]
fn left_alone(score: u32) -> Option<u32> {
    (score > MISS_LIMIT).then(|| score - 1)
}

#[inline(always)]
fn after_hit(score: u32) -> u32 {
    score - score.div_ceil(MISS_DECAY)
}

#[inline(always)]
fn after_miss(score: u32) -> u32 {
    let score = score - score / MISS_DECAY + MISS_ONE / MISS_DECAY;
    if score > MISS_LIMIT {
        score.max(MISS_LIMIT + PAUSE)
    } else {
        score
    }
}

/// The stack reads of one cached walk, collected while it runs.
pub struct Trace {
    offsets: [MaybeUninit<u16>; TRACE_READS],
    words: [MaybeUninit<usize>; TRACE_READS],
    /// Bit i: entry i is a return address (else a saved frame pointer).
    is_ra: u64,
    /// Bit i: entry i is a saved frame pointer that some frame's CFA was computed from.
    fp_used: u64,
    len: usize,
    /// False once a frame could not be memoised (signed return address, a slot too far from
    /// the start, too many reads).
    memoizable: bool,
    /// Where the frame pointer's current value came from: the entry that read it, START_FP,
    /// or ZERO_FP.
    fp_source: usize,
    /// Some frame computed its CFA from the starting frame pointer.
    needs_start_fp: bool,
}

const START_FP: usize = usize::MAX;
const ZERO_FP: usize = usize::MAX - 1;

impl Trace {
    #[inline(always)]
    pub fn new() -> Self {
        Trace {
            offsets: [MaybeUninit::uninit(); TRACE_READS],
            words: [MaybeUninit::uninit(); TRACE_READS],
            is_ra: 0,
            fp_used: 0,
            len: 0,
            memoizable: true,
            fp_source: START_FP,
            needs_start_fp: false,
        }
    }

    /// Before a step: its rule's CFA is computed from the frame pointer (which then matters:
    /// the read it came from, or the starting value, must match for a memo to hold).
    #[inline(always)]
    pub fn rule(&mut self, cfa_from_fp: bool, ra_signed: bool) {
        if cfa_from_fp {
            match self.fp_source {
                START_FP => self.needs_start_fp = true,
                ZERO_FP => {}
                i => self.fp_used |= 1 << i,
            }
        }
        if ra_signed {
            self.memoizable = false;
        }
    }

    /// After a step that zeroed the frame pointer.
    #[inline(always)]
    pub fn fp_zeroed(&mut self) {
        self.fp_source = ZERO_FP;
    }

    /// Notes that the walk read `word` at `address`; `sp0` is the stack pointer at the memo's
    /// start.
    #[inline(always)]
    pub fn read(&mut self, sp0: usize, address: usize, word: usize, is_ra: bool) {
        let offset = address.wrapping_sub(sp0);
        if self.len < TRACE_READS && offset <= u16::MAX as usize {
            self.offsets[self.len].write(offset as u16);
            self.words[self.len].write(word);
            self.is_ra |= (is_ra as u64) << self.len;
            if !is_ra {
                self.fp_source = self.len;
            }
            self.len += 1;
        } else {
            self.memoizable = false;
            if !is_ra {
                // An unrecorded source: a later use of it cannot be checked.
                self.fp_source = START_FP;
                self.needs_start_fp = true;
            }
        }
    }

    /// Keeps the return addresses and the saved frame pointers some CFA was computed from;
    /// drops the other saved frame pointers (code without frame pointers keeps arbitrary data
    /// in that register, which must not make memos miss). False when the rest does not fit a
    /// memo.
    fn finish(&mut self) -> bool {
        let keep = self.is_ra | self.fp_used;
        let mut kept = 0;
        let mut is_ra = 0u64;
        for i in 0..self.len {
            if keep & (1 << i) != 0 {
                self.offsets[kept] = self.offsets[i];
                self.words[kept] = self.words[i];
                is_ra |= ((self.is_ra >> i) & 1) << kept;
                kept += 1;
            }
        }
        self.len = kept;
        self.is_ra = is_ra;
        self.len <= ENTRIES
    }

    fn entry(&self, i: usize) -> (u16, usize) {
        debug_assert!(i < self.len);
        // SAFETY: entries below `len` were written by `read` (or moved down by `finish`).
        unsafe { (self.offsets[i].assume_init(), self.words[i].assume_init()) }
    }
}

#[repr(C, align(64))]
struct Memo {
    seq: AtomicU32,
    generation: AtomicU32,
    /// Entries in the low byte, NEEDS_START_FP, the buffer size the walk filled (or
    /// NATURAL_END) above bit 16.
    meta: AtomicU32,
    /// Frames the sink held when the memo's walk reached its start (own frames among the
    /// first ones are not pushed, so the same start can follow different counts).
    pushed_before: AtomicU32,
    pc: AtomicUsize,
    sp: AtomicUsize,
    fp: AtomicUsize,
    is_ra: AtomicU64,
    offsets: [AtomicU16; ENTRIES],
    words: [AtomicUsize; ENTRIES],
}

const NEEDS_START_FP: u32 = 1 << 8;

impl Memo {
    const fn new() -> Self {
        Memo {
            seq: AtomicU32::new(0),
            generation: AtomicU32::new(0),
            meta: AtomicU32::new(0),
            pushed_before: AtomicU32::new(0),
            pc: AtomicUsize::new(0),
            sp: AtomicUsize::new(0),
            fp: AtomicUsize::new(0),
            is_ra: AtomicU64::new(0),
            offsets: [const { AtomicU16::new(0) }; ENTRIES],
            words: [const { AtomicUsize::new(0) }; ENTRIES],
        }
    }
}

#[repr(align(64))]
struct SetTags([AtomicUsize; WAYS]);

/// A memo start's tag: never 0 (the tag of an empty way) for a real start.
#[inline(always)]
fn tag_of(pc: usize, sp: usize) -> usize {
    (pc ^ sp.rotate_left(29)) | 1
}

/// What a walk does at a memo's start.
pub enum Replay {
    /// A memo matched: the sink holds the whole walk, the rest of it from the memo version
    /// named.
    Hit(usize, MemoHit),
    /// Walk on, recording the reads, and remember them.
    Record,
    /// Walk on without recording (a start not seen before).
    Skip,
}

pub struct MemoTable {
    memos: [Memo; SETS * WAYS],
    /// Per set, each way's `tag_of` its start, in one cache line: a replay opens only the
    /// memos whose tag matches instead of reading every way's header (eight cache lines).
    /// A hint: `try_memo` checks the memo itself.
    tags: [SetTags; SETS],
    /// Per set, tags of starts seen once without a memo (see `replay`).
    ghosts: [SetTags; SETS],
    /// Per set, the miss score (see the module doc: thrashing). Written only when it changes,
    /// so a set whose memos hit keeps its line shared.
    misses: [AtomicU32; SETS],
    /// Round-robin victim choice; a racy increment is harmless (any way will do).
    victim: AtomicUsize,
}

pub static MEMOS: MemoTable = MemoTable::new();

/// The set of a starting point: the return address and stack pointer of the frame where the
/// memo starts (its depth in the stack also tells threads apart).
#[inline(always)]
fn set_of(pc: usize, sp: usize) -> usize {
    let h = ((sp >> 4) ^ pc) as u64;
    (h.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - SETS.trailing_zeros())) as usize
}

impl MemoTable {
    pub const fn new() -> Self {
        MemoTable {
            memos: [const { Memo::new() }; SETS * WAYS],
            tags: [const { SetTags([const { AtomicUsize::new(0) }; WAYS]) }; SETS],
            ghosts: [const { SetTags([const { AtomicUsize::new(0) }; WAYS]) }; SETS],
            misses: [const { AtomicU32::new(0) }; SETS],
            victim: AtomicUsize::new(0),
        }
    }

    /// Pushes the rest of the walk from `start` out of a memo, if one matches the stack; else
    /// says whether this walk should record one (see the admission below).
    /// `generation` is the loader generation if the caller read it (else UNKNOWN_GENERATION;
    /// read here when a memo needs it, and handed back).
    #[inline(always)]
    pub fn replay(&self, start: Regs, sink: &mut Sink<'_>, generation: &mut u32) -> Replay {
        #[cfg(test)]
        if OFF.load(Ordering::Relaxed) {
            return Replay::Skip;
        }
        let set = set_of(start.ra, start.sp);
        let tag = tag_of(start.ra, start.sp);
        let misses = &self.misses[set];
        let score = misses.load(Ordering::Relaxed);
        if let Some(next) = left_alone(score) {
            // Thrashing: walk without memos, and come back to probe once the score has fallen.
            misses.store(next, Ordering::Relaxed);
            #[cfg(test)]
            LEFT_ALONE.fetch_add(1, Ordering::Relaxed);
            return Replay::Skip;
        }
        let mut known = false;
        for (way, t) in self.tags[set].0.iter().enumerate() {
            if t.load(Ordering::Relaxed) != tag {
                continue;
            }
            known = true;
            let index = set * WAYS + way;
            let memo = &self.memos[index];
            let pushed_before = sink.len();
            if let Some((n, seq)) = self.try_memo(memo, start, sink, generation) {
                #[cfg(test)]
                HITS.fetch_add(1, Ordering::Relaxed);
                if score != 0 {
                    misses.store(after_hit(score), Ordering::Relaxed);
                }
                let hit = MemoHit::new(index, seq, pushed_before);
                return Replay::Hit(n, hit);
            }
        }
        if known {
            // Memos of this start, none of them for this stack.
            misses.store(after_miss(score), Ordering::Relaxed);
        }
        // Admission: a start seen for the first time only leaves its tag among the set's
        // ghosts; a memo is recorded the next time a walk passes there. Recording and storing a
        // memo more than doubles the cost of a walk, which a program whose stacks rarely
        // repeat would pay on every capture.
        let ghost = &self.ghosts[set].0[(tag >> 4) % WAYS];
        if known || ghost.load(Ordering::Relaxed) == tag {
            Replay::Record
        } else {
            ghost.store(tag, Ordering::Relaxed);
            Replay::Skip
        }
    }

    #[inline(always)]
    fn try_memo(
        &self,
        memo: &Memo,
        start: Regs,
        sink: &mut Sink<'_>,
        generation: &mut u32,
    ) -> Option<(usize, u32)> {
        let s1 = memo.seq.load(Ordering::Acquire);
        let meta = memo.meta.load(Ordering::Relaxed);
        let tag = memo.generation.load(Ordering::Relaxed);
        let is_ra = memo.is_ra.load(Ordering::Relaxed);
        let pushed_before = memo.pushed_before.load(Ordering::Relaxed);
        let same_start = memo.sp.load(Ordering::Relaxed) == start.sp
            && pushed_before as usize == sink.len()
            && memo.pc.load(Ordering::Relaxed) == start.ra
            && (meta & NEEDS_START_FP == 0 || memo.fp.load(Ordering::Relaxed) == start.fp);
        fence(Ordering::Acquire);
        if !same_start || s1 & 1 != 0 || memo.seq.load(Ordering::Relaxed) != s1 {
            return None;
        }
        let entries = ((meta & 0xff) as usize).min(ENTRIES);
        if sink.limit() > (meta >> 16) as usize || entries == 0 {
            return None;
        }
        let sp = start.sp;
        if tag != ANY_GENERATION {
            if *generation == UNKNOWN_GENERATION {
                *generation = read_generation();
            }
            if tag != *generation {
                return None;
            }
        }
        // Verified and pushed in one pass: a word is pushed once it matched the stack, and a
        // mismatch later takes the pushed frames back. Each word and offset is read before the
        // sequence check that precedes its stack read, so every pushed word belongs to the memo
        // version whose start was checked above.
        let before = sink.len();
        let mut pushing = true;
        for i in 0..entries {
            let offset = memo.offsets[i].load(Ordering::Relaxed) as usize;
            let word = memo.words[i].load(Ordering::Relaxed);
            fence(Ordering::Acquire);
            if memo.seq.load(Ordering::Relaxed) != s1 {
                sink.truncate(before);
                return None;
            }
            // SAFETY: `offset` belongs to the memo version whose start (pc, sp) and generation
            // were checked above, and every earlier word matched: by the induction in the
            // module comment this is the very slot the cached walk would read next from this
            // stack, inside the frame it has reached.
            let found = unsafe { ((sp + offset) as *const usize).read() };
            if found != word {
                sink.truncate(before);
                return None;
            }
            if pushing && is_ra & (1 << i) != 0 {
                pushing = word != 0 && sink.push(word);
            }
        }
        Some((sink.len(), s1))
    }

    /// Keeps the walk `trace` from `start`, reached with `pushed_before` frames in the sink.
    /// `limit` is the buffer size that ended it (or None when it ended by itself);
    /// `generation` the loader generation its rules were taken under (ANY_GENERATION when all
    /// came from permanent code). Gives up if the chosen slot is being written by another
    /// thread.
    pub fn remember(
        &self,
        start: Regs,
        pushed_before: usize,
        trace: &mut Trace,
        limit: Option<usize>,
        generation: u32,
    ) {
        if !trace.memoizable || trace.len == 0 || !trace.finish() {
            return;
        }
        let limit = limit.map_or(NATURAL_END, |l| l.min(NATURAL_END as usize - 1) as u32);
        let meta = trace.len as u32
            | if trace.needs_start_fp {
                NEEDS_START_FP
            } else {
                0
            }
            | limit << 16;
        let set = set_of(start.ra, start.sp);
        let base = set * WAYS;
        let ways = &self.memos[base..base + WAYS];
        let way = ways
            .iter()
            .position(|m| m.sp.load(Ordering::Relaxed) == 0)
            .unwrap_or_else(|| {
                let v = self.victim.load(Ordering::Relaxed);
                self.victim.store(v.wrapping_add(1), Ordering::Relaxed);
                v % WAYS
            });
        let memo = &ways[way];
        let Some(s) = begin_write(&memo.seq) else {
            return;
        };
        memo.generation.store(generation, Ordering::Relaxed);
        memo.meta.store(meta, Ordering::Relaxed);
        memo.pc.store(start.ra, Ordering::Relaxed);
        memo.sp.store(start.sp, Ordering::Relaxed);
        memo.fp.store(start.fp, Ordering::Relaxed);
        memo.pushed_before
            .store(pushed_before as u32, Ordering::Relaxed);
        memo.is_ra.store(trace.is_ra, Ordering::Relaxed);
        for i in 0..trace.len {
            let (offset, word) = trace.entry(i);
            memo.offsets[i].store(offset, Ordering::Relaxed);
            memo.words[i].store(word, Ordering::Relaxed);
        }
        end_write(&memo.seq, s);
        self.tags[set].0[way].store(tag_of(start.ra, start.sp), Ordering::Relaxed);
    }

    /// Forgets every memo (tests that measure or check the walk itself).
    #[cfg(test)]
    pub fn clear(&self) {
        for m in &self.memos {
            m.sp.store(0, Ordering::Relaxed);
        }
    }
}

/// Tests: bypass the memos (to compare against the plain walk, and to time it).
#[cfg(test)]
pub static OFF: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);
#[cfg(test)]
pub static HITS: AtomicUsize = AtomicUsize::new(0);
/// Tests: walks that left their set's memos alone (thrashing).
#[cfg(test)]
pub static LEFT_ALONE: AtomicUsize = AtomicUsize::new(0);

/// The loader generation, read through libc (marked: see `slow_lookup` in walk.rs).
#[cold]
#[inline(never)]
fn read_generation() -> u32 {
    let _foreign = crate::sync::DisabledScope::enter();
    super::cfi::generation()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Walks of one set whose replays hit when `hit(i)` says so: (replays tried, walks left
    /// alone) over `walks` walks from a fresh score.
    fn run(walks: usize, hit: impl Fn(usize) -> bool) -> (usize, usize) {
        let (mut score, mut tried, mut alone) = (0, 0, 0);
        for i in 0..walks {
            if let Some(next) = left_alone(score) {
                score = next;
                alone += 1;
                continue;
            }
            tried += 1;
            score = if hit(i) {
                after_hit(score)
            } else {
                after_miss(score)
            };
        }
        (tried, alone)
    }

    #[test]
    fn sets_whose_memos_hit_are_never_left_alone() {
        assert_eq!(run(100_000, |_| true), (100_000, 0));
        // Three hits in four: still worth trying.
        assert_eq!(run(100_000, |i| i % 4 != 0), (100_000, 0));
    }

    #[test]
    fn thrashing_sets_are_probed_now_and_then() {
        // A quarter of the replays hit (32 continuations of a start, 8 ways): after a short
        // run-in, about one walk in PAUSE probes.
        let (tried, alone) = run(100_000, |i| i % 4 == 0);
        assert_eq!(tried + alone, 100_000);
        let per_probe = 100_000 / tried;
        let expected = PAUSE as usize;
        assert!(
            (expected / 2..=expected * 2).contains(&per_probe),
            "one probe per {per_probe} walks"
        );
        // Every replay missing: the same pace.
        let (tried, _) = run(100_000, |_| false);
        assert!((expected / 2..=expected * 2).contains(&(100_000 / tried)));
    }

    #[test]
    fn a_set_comes_back_once_its_memos_hit_again() {
        let mut score = 0;
        for _ in 0..1000 {
            score = left_alone(score).unwrap_or_else(|| after_miss(score));
        }
        assert!(score >= MISS_LIMIT, "score {score}");
        // From now on every probe hits: the set is tried on every walk again within a few
        // hundred walks.
        let mut walks = 0;
        while left_alone(score).is_some() || score > MISS_LIMIT / 2 {
            score = left_alone(score).unwrap_or_else(|| after_hit(score));
            walks += 1;
            assert!(walks < 1000, "score {score}");
        }
    }
}
