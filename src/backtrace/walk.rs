//! The stack walks behind `capture`:
//!
//! - the cached DWARF walk (every 64-bit target we build for): per frame, one lookup in the
//!   rule cache and a couple of loads; a miss runs the CFI program once (cfi.rs) and caches the
//!   result;
//! - the full DWARF walk of the `unwinding` crate (`_Unwind_Backtrace`), for stacks with a
//!   frame the cache cannot express (signal frames, CFA expressions) and for other
//!   architectures;
//! - on aarch64 Android, a frame-record walk (the platform ABI keeps frame pointers), bounded
//!   by the thread's stack so that a bad frame pointer stops the walk instead of faulting.

use super::arch::{self, Regs};
use super::cache::{ANY_GENERATION, CACHE, UNKNOWN_GENERATION};
use super::cfi;
use super::memo::{MEMOS, Replay, Trace};
use super::note::MemoHit;
use super::rule::{
    KIND_END, KIND_MASK, KIND_RULE, Packed, cfa_from_fp, fp_slot, ra_signed, ra_slot, step_packed,
    to_pair, zeroes_fp,
};
use core::sync::atomic::{AtomicUsize, Ordering};

/// The library's own code, skipped wherever it appears in a stack
/// (docs/spec/allocation.md#allocation-backtraces). Empty until
/// `startup` (unit tests leave it empty so their own frames are kept).
pub static OWN_START: AtomicUsize = AtomicUsize::new(0);
pub static OWN_END: AtomicUsize = AtomicUsize::new(0);

/// Hard limit on frames stepped through (own frames included) per capture.
pub(super) const MAX_STEPS: usize = 1024;

/// Collects adjusted pcs, skipping the library's own frames.
pub struct Sink<'a> {
    frames: &'a mut [usize],
    n: usize,
    own: (usize, usize),
}

impl<'a> Sink<'a> {
    pub fn new(frames: &'a mut [usize]) -> Self {
        let own = (
            OWN_START.load(Ordering::Relaxed),
            OWN_END.load(Ordering::Relaxed),
        );
        Sink { frames, n: 0, own }
    }

    /// Records the frame whose return address is `ra`. Returns false when full.
    #[inline(always)]
    pub fn push(&mut self, ra: usize) -> bool {
        let pc = arch::adjust_pc(ra);
        if pc.wrapping_sub(self.own.0) < self.own.1.wrapping_sub(self.own.0) {
            return true;
        }
        match self.frames.get_mut(self.n) {
            Some(slot) => {
                *slot = pc;
                self.n += 1;
                self.n < self.frames.len()
            }
            None => false,
        }
    }

    pub fn is_full(&self) -> bool {
        self.n >= self.frames.len()
    }

    pub fn len(&self) -> usize {
        self.n
    }

    /// The buffer's size.
    pub fn limit(&self) -> usize {
        self.frames.len()
    }

    /// Forgets the frames pushed after the first `n` (a replay that turned out torn).
    pub fn truncate(&mut self, n: usize) {
        self.n = self.n.min(n);
    }
}

/// Outcome of the cached walk.
pub enum Walk {
    Done(usize),
    /// Done, the frames after the first ones replayed from a memo (note.rs).
    Replayed(usize, MemoHit),
    /// A frame needs the full unwinder: redo the capture with `full_walk`.
    Unsupported,
}

/// Frames walked before a memo is looked for. The memo's key is where the walk stands then:
/// the return address and stack pointer of that frame. Allocation calls share their first
/// frames (the allocator's entry points, the program's own wrappers), which would leave
/// several different stacks under one key; a few frames up they differ.
const MEMO_AFTER: usize = 3;

/// Walks from `regs`, the snapshot taken inside the capturing function (or an entry point
/// still running on this thread): that frame itself is not recorded, its caller is the first
/// candidate. After `MEMO_AFTER` frames a memo of an earlier walk from the same point is tried
/// (memo.rs); a walk that can be memoised is remembered.
#[inline(always)]
pub fn cached_walk(frames: &mut [usize], mut regs: Regs) -> Walk {
    // The loader generation is read only when a frame outside permanent code needs it.
    let mut generation = UNKNOWN_GENERATION;
    let limit = frames.len();
    let mut sink = Sink::new(frames);
    let mut steps = 0;
    if let Some(done) = walk_until(
        &mut regs,
        &mut sink,
        &mut generation,
        &mut NoRecording,
        &mut steps,
        MEMO_AFTER,
    ) {
        return done;
    }
    match MEMOS.replay(regs, &mut sink, &mut generation) {
        Replay::Hit(n, hit) => Walk::Replayed(n, hit),
        Replay::Skip => walk_on(regs, &mut sink, &mut generation, &mut NoRecording, steps),
        Replay::Record => {
            let mut recording = Recording {
                start: regs,
                pushed_before: sink.len(),
                trace: Trace::new(),
                all_permanent: true,
                filled: false,
            };
            let walk = walk_on(regs, &mut sink, &mut generation, &mut recording, steps);
            if let Walk::Done(_) = walk {
                // Whether every rule the memoised part used holds in every loader generation:
                // then the memo does too, and replaying it needs no generation read.
                let tag = if recording.all_permanent {
                    ANY_GENERATION
                } else {
                    generation
                };
                MEMOS.remember(
                    recording.start,
                    recording.pushed_before,
                    &mut recording.trace,
                    recording.filled.then_some(limit),
                    tag,
                );
            }
            walk
        }
    }
}

/// The rest of a walk after `steps` steps.
#[inline(always)]
fn walk_on(
    mut regs: Regs,
    sink: &mut Sink<'_>,
    generation: &mut u32,
    rec: &mut impl Recorder,
    mut steps: usize,
) -> Walk {
    walk_until(&mut regs, sink, generation, rec, &mut steps, MAX_STEPS)
        .unwrap_or(Walk::Done(sink.len()))
}

/// Steps until the walk ends or `*steps` reaches `until`: `Some` outcome when it ended, `None`
/// when it stopped at the bound with `regs` at the next frame to step from.
#[inline(always)]
fn walk_until(
    regs: &mut Regs,
    sink: &mut Sink<'_>,
    generation: &mut u32,
    rec: &mut impl Recorder,
    steps: &mut usize,
    until: usize,
) -> Option<Walk> {
    while *steps < until {
        *steps += 1;
        match step(regs, sink, generation, rec) {
            Step::Next => {}
            Step::Unsupported => return Some(Walk::Unsupported),
            Step::End => return Some(Walk::Done(sink.len())),
            Step::Filled => {
                rec.filled();
                return Some(Walk::Done(sink.len()));
            }
        }
    }
    None
}

enum Step {
    Next,
    /// The walk is over (outermost frame, zero return address, implausible frame).
    End,
    /// The caller's buffer is full.
    Filled,
    /// A frame needs the full unwinder.
    Unsupported,
}

/// One frame: look up the rule of `regs.ra`, step to the caller, push its return address.
#[inline(always)]
fn step(
    regs: &mut Regs,
    sink: &mut Sink<'_>,
    generation: &mut u32,
    rec: &mut impl Recorder,
) -> Step {
    let (p, permanent) = match CACHE.get_home(regs.ra, *generation) {
        Some(found) => found,
        None => slow_lookup(regs.ra, generation),
    };
    let kind = p.0 as u32 & KIND_MASK;
    if kind != KIND_RULE {
        // The full unwinder asks the loader, which a quarantined fork child must not: its walk
        // ends here (an entry the parent cached).
        return if kind == KIND_END || super::quarantine::active() {
            Step::End
        } else {
            Step::Unsupported
        };
    }
    rec.rule(p, permanent);
    if !step_packed(regs, p) {
        return Step::End;
    }
    rec.stepped(regs, p);
    if regs.ra == 0 {
        return Step::End;
    }
    if !sink.push(regs.ra) {
        return Step::Filled;
    }
    Step::Next
}

/// What a walk notes for a memo; a walk that does not record one notes nothing, at no cost.
trait Recorder {
    fn rule(&mut self, p: Packed, permanent: bool);
    fn stepped(&mut self, regs: &Regs, p: Packed);
    fn filled(&mut self);
}

struct NoRecording;

impl Recorder for NoRecording {
    #[inline(always)]
    fn rule(&mut self, _: Packed, _: bool) {}
    #[inline(always)]
    fn stepped(&mut self, _: &Regs, _: Packed) {}
    #[inline(always)]
    fn filled(&mut self) {}
}

struct Recording {
    start: Regs,
    pushed_before: usize,
    trace: Trace,
    all_permanent: bool,
    filled: bool,
}

impl Recorder for Recording {
    #[inline(always)]
    fn rule(&mut self, p: Packed, permanent: bool) {
        self.trace.rule(cfa_from_fp(p), ra_signed(p));
        self.all_permanent &= permanent;
    }

    #[inline(always)]
    fn stepped(&mut self, regs: &Regs, p: Packed) {
        let sp0 = self.start.sp;
        if let Some(slot) = fp_slot(regs, p) {
            self.trace.read(sp0, slot, regs.fp, false);
        } else if zeroes_fp(p) {
            self.trace.fp_zeroed();
        }
        self.trace.read(sp0, ra_slot(regs, p), regs.ra, true);
    }

    #[inline(always)]
    fn filled(&mut self) {
        self.filled = true;
    }
}

/// Other probe slots, then the CFI tables (the result is cached).
#[cold]
#[inline(never)]
fn slow_lookup(ra: usize, generation: &mut u32) -> (Packed, bool) {
    // Two hot return addresses sharing a home slot send one of them here on every walk: the
    // other probe slots come first, under the generation already known (an unknown one still
    // matches permanent code), before anything that leaves the library (reading the
    // generation takes the loader's lock; the mark costs two pthread_setspecific calls).
    if let Some(found) = CACHE.get_tagged(ra, *generation) {
        return found;
    }
    let _foreign = crate::sync::DisabledScope::enter();
    if *generation == UNKNOWN_GENERATION {
        *generation = cfi::generation();
        if let Some(found) = CACHE.get_tagged(ra, *generation) {
            return found;
        }
    }
    #[cfg(test)]
    MISSES.fetch_add(1, Ordering::Relaxed);
    // The table search (dl_iterate_phdr, then gimli's evaluation of the CFI program) is deep:
    // on a thread with a 16 KiB stack it overflowed. It runs on a stack of the library's own
    // (docs/design.md, "Reports run on a stack of their own"); the walk itself stays here.
    let e = crate::report_stack::run(|| cfi::lookup(ra));
    // Rules of code that is never unloaded hold in every generation. (The generation was
    // read before the lookup: a module loaded in between is at worst cached under a
    // generation that is already stale, never the other way round.)
    let permanent = ra != 0 && cfi::is_permanent(ra - 1);
    let tag = if permanent {
        ANY_GENERATION
    } else {
        *generation
    };
    CACHE.put(ra, tag, e);
    (to_pair(e.pack()), permanent)
}

/// The `unwinding` crate's full DWARF unwinder. Its first two reported frames are this
/// function and the capturing function (which must call it directly and not be inlined): both
/// are dropped, so the result starts where the cached walk's would. (32-bit arm walks its
/// EHABI tables instead: exidx.rs.)
#[cfg(not(target_arch = "arm"))]
#[inline(never)]
pub fn full_walk(frames: &mut [usize]) -> usize {
    use unwinding::abi::{_Unwind_Backtrace, _Unwind_GetIP, UnwindContext, UnwindReasonCode};
    struct State<'a> {
        sink: Sink<'a>,
        skip: usize,
        steps: usize,
    }
    extern "C" fn trace(ctx: &UnwindContext<'_>, arg: *mut core::ffi::c_void) -> UnwindReasonCode {
        // SAFETY: `arg` is the State passed to _Unwind_Backtrace below.
        let st = unsafe { &mut *arg.cast::<State<'_>>() };
        st.steps += 1;
        if st.steps > MAX_STEPS {
            return UnwindReasonCode::END_OF_STACK;
        }
        if st.skip > 0 {
            st.skip -= 1;
            return UnwindReasonCode::NO_REASON;
        }
        let ip = _Unwind_GetIP(ctx);
        if ip == 0 || !st.sink.push(ip) {
            return UnwindReasonCode::END_OF_STACK;
        }
        UnwindReasonCode::NO_REASON
    }
    let mut st = State {
        sink: Sink::new(frames),
        skip: 2,
        steps: 0,
    };
    // The unwinder finds modules through the loader: not in a quarantined fork child.
    if st.sink.is_full() || super::quarantine::active() {
        return 0;
    }
    // The unwinder walks the loaded modules through libc: marked, like every other path of an
    // allocation call that leaves the library.
    let _foreign = crate::sync::DisabledScope::enter();
    _Unwind_Backtrace(trace, (&raw mut st).cast());
    st.sink.len()
}

/// Frame-record walk for aarch64 Android. `None` when the stack bounds are unknown (the caller
/// then uses the cached DWARF walk).
#[cfg(all(target_arch = "aarch64", target_os = "android"))]
#[inline(always)]
pub fn frame_pointer_walk(frames: &mut [usize], regs: Regs) -> Option<usize> {
    let (lo, hi) = super::stack::bounds(regs.sp)?;
    let mut sink = Sink::new(frames);
    let mut fp = regs.fp;
    for _ in 0..MAX_STEPS {
        // A frame record is two words, 16-byte aligned, inside [sp, stack top).
        if fp < lo || !fp.is_multiple_of(16) || fp > hi - 16 {
            break;
        }
        // SAFETY: [fp, fp + 16) was just checked to lie inside this thread's stack.
        let (next, lr) = unsafe { (*(fp as *const usize), *((fp + 8) as *const usize)) };
        let ra = arch::strip_pac(lr);
        if ra == 0 || !sink.push(ra) {
            break;
        }
        if next <= fp {
            break;
        }
        fp = next;
    }
    Some(sink.len())
}

#[cfg(test)]
pub static MISSES: AtomicUsize = AtomicUsize::new(0);
