//! leak_track: at exit, one report per live allocation (docs/spec/errors.md#leak-report).
//!
//! With the extensions (README "Extensions") — `leak_unreachable`, `leak_suppressions` — the
//! live blocks are first classified (unreachable/classify.rs) and matched against the
//! suppressions (suppress.rs). `leak_unreachable` prints only the definitely and indirectly
//! lost blocks; suppressed blocks are never printed. Each leak line then ends with its kind,
//! and one summary line after the last leak counts blocks and bytes per kind (valgrind's LEAK
//! SUMMARY). Without the extensions the report is the reference's, line for line.

use crate::failure;
use crate::fmt::Bytes;
use crate::log::log_error;
use crate::pages;
use crate::platform;
use crate::snapshot::{LiveBlock, Snapshot};
use crate::state::State;
use crate::unreachable::classify::{self, Kind, Kinds};

/// The exit report. `stack_from` (with the registers spilled there) is taken by the exported
/// `debug_finalize` itself, so that nothing the library keeps on the stack — a sort moves
/// copies of the records through its frame, and the frames between the export and here hold
/// stale words of earlier calls — lies above where the scan starts.
pub fn report(state: &State, stack_from: usize) {
    report_from(state, stack_from);
}

/// With `leak_unreachable` and `check_unreachable_on_signal`: after the check's own lines, the
/// summary line of the exit report for the heap as it is now (no leak lines). `stack_from` as
/// for `report`, taken by the caller (`deferred`).
#[inline(never)]
pub fn summary_on_signal(state: &State, stack_from: usize) {
    if let Some(snapshot) = Snapshot::take() {
        report_classified(state, snapshot.records(), stack_from, false);
    }
}

#[inline(never)]
fn report_from(state: &State, stack_from: usize) {
    let Some(snapshot) = Snapshot::take() else {
        return;
    };
    let config = &state.config;
    let printed = if !config.leak_unreachable && config.leak_suppressions.is_empty() {
        report_all(state, snapshot.records());
        snapshot.records().len()
    } else {
        report_classified(state, snapshot.records(), stack_from, true)
    };
    crate::error_marker::leaks_reported(state, printed);
}

/// The reference's report: every live block.
fn report_all(state: &State, records: &[LiveBlock]) {
    let total = records.len();
    // Large writes instead of one per line on the host (docs/performance.md, "Exit reports").
    let _batch = crate::log::Batch::begin();
    // One symbolization session for the whole report: each distinct pc is resolved once.
    let _symbols = crate::backtrace::SymbolSession::begin();
    announce(records.iter());
    for (i, r) in records.iter().enumerate() {
        leak_line(state, r, i, total, None);
    }
}

/// Tells the symbolizer which backtraces the report is about to log, so that the work their
/// frames need is done a batch at a time (under `malloc-debug run`, the annotation server's
/// round trips: src/symbolize/rendered.rs). Nothing to do on Android or without the server.
fn announce<'a>(records: impl Iterator<Item = &'a LiveBlock>) {
    if !crate::backtrace::annotating() {
        return;
    }
    // Consecutive blocks often share a backtrace: a few recent ids are skipped (a repeat only
    // costs cached lookups).
    let mut seen = [0u32; 256];
    for r in records.filter(|r| r.has_backtrace()) {
        let slot = &mut seen[r.backtrace_id as usize % seen.len()];
        if *slot != r.backtrace_id {
            *slot = r.backtrace_id;
            crate::tracking::BACKTRACES.with_frames(r.backtrace_id, crate::backtrace::announce);
        }
    }
}

fn leak_line(state: &State, r: &LiveBlock, i: usize, total: usize, kind: Option<Kind>) {
    match kind {
        None => log_error!(
            "+++ {} leaked block of size {} at 0x{:x} (leak {} of {})",
            Bytes(platform::progname()),
            r.size,
            r.pointer,
            i + 1,
            total
        ),
        Some(kind) => log_error!(
            "+++ {} leaked block of size {} at 0x{:x} (leak {} of {}, {})",
            Bytes(platform::progname()),
            r.size,
            r.pointer,
            i + 1,
            total,
            kind.name()
        ),
    }
    if r.has_backtrace() {
        log_error!("Backtrace at time of allocation:");
        failure::log_interned_backtrace(state, r.backtrace_id);
    }
}

/// Blocks and bytes of one kind.
#[derive(Clone, Copy, Default)]
struct Count {
    blocks: usize,
    bytes: usize,
}

impl Count {
    fn add(&mut self, r: &LiveBlock) {
        self.blocks += 1;
        self.bytes += r.size;
    }
}

/// A block not printed, in the per-block plan (which otherwise holds the block's kind byte,
/// never 0).
const SKIP: u8 = 0;

/// The extended report (only its summary line unless `print_leaks`); returns the number of
/// leaks printed or, without `print_leaks`, that would have been.
fn report_classified(
    state: &State,
    records: &[LiveBlock],
    stack_from: usize,
    print_leaks: bool,
) -> usize {
    let n = records.len();
    let classified = ByAddress::new(records).and_then(|a| {
        // On signal the scan forks from inside the program's allocation call (one call of this
        // thread in flight); at exit finalize has closed the gate.
        let own_calls = usize::from(!print_leaks);
        let kinds = classify::classify_live(state, a.records(), stack_from, own_calls)?;
        Some((a, kinds))
    });
    let (Some((by_address, kinds)), Some(mut plan)) = (classified, Scratch::<u8>::new(n)) else {
        // Out of memory or no child process: the reference's report, said so first.
        log_error!("leak_unreachable: the heap could not be scanned; every live block is listed");
        if print_leaks {
            report_all(state, records);
        }
        return n;
    };
    // Each record's kind, in the report's order: `plan` holds it until the block is known not to
    // be printed (then SKIP).
    let plan = plan.slice();
    by_address.kinds_by_record(&kinds, plan);
    drop(kinds);
    // As in `report_all`: large writes, and each distinct pc symbolized once (suppression rules
    // match function names too).
    let _batch = crate::log::Batch::begin();
    let _symbols = crate::backtrace::SymbolSession::begin();
    let mut verdicts = Verdicts::new(n);
    let mut counts = [Count::default(); 4];
    let mut suppressed = Count::default();
    let mut printed = 0;
    for (i, r) in records.iter().enumerate() {
        let kind = Kind::from_byte(plan[i]);
        let selected = !state.config.leak_unreachable || kind != Kind::Reachable;
        if selected && is_suppressed(r, &mut verdicts) {
            suppressed.add(r);
            plan[i] = SKIP;
            continue;
        }
        counts[kind as usize].add(r);
        if selected {
            printed += 1;
        } else {
            plan[i] = SKIP;
        }
    }
    if print_leaks {
        announce(
            records
                .iter()
                .zip(plan.iter())
                .filter(|(_, p)| **p != SKIP)
                .map(|(r, _)| r),
        );
    }
    let mut index = 0;
    for (i, r) in records.iter().enumerate() {
        if print_leaks && plan[i] != SKIP {
            leak_line(state, r, index, printed, Some(Kind::from_byte(plan[i])));
            index += 1;
        }
    }
    let c = |k: Kind| counts[k as usize];
    log_error!(
        "leak summary: definitely lost: {} bytes in {} blocks, indirectly lost: {} bytes in {} \
         blocks, still reachable: {} bytes in {} blocks, suppressed: {} bytes in {} blocks",
        c(Kind::Definite).bytes,
        c(Kind::Definite).blocks,
        c(Kind::Indirect).bytes,
        c(Kind::Indirect).blocks,
        c(Kind::Reachable).bytes,
        c(Kind::Reachable).blocks,
        suppressed.bytes,
        suppressed.blocks
    );
    printed
}

/// Whether the block's allocation backtrace matches a suppression; decided once per distinct
/// backtrace.
fn is_suppressed(r: &LiveBlock, verdicts: &mut Verdicts) -> bool {
    if !r.has_backtrace() {
        return false;
    }
    if let Some(v) = verdicts.get(r.backtrace_id) {
        return v;
    }
    let mut frames = [0usize; crate::backtrace::MAX_FRAMES];
    let n = crate::tracking::BACKTRACES
        .with_frames(r.backtrace_id, |f| {
            let n = f.len().min(frames.len());
            frames[..n].copy_from_slice(&f[..n]);
            n
        })
        .unwrap_or(0);
    // Symbolised outside the table's lock.
    let v = crate::suppress::suppressed(&frames[..n]);
    verdicts.set(r.backtrace_id, v);
    v
}

/// Zeroed bytes in a private mapping.
struct Scratch<T: Copy> {
    ptr: core::ptr::NonNull<T>,
    len: usize,
}

impl<T: Copy> Scratch<T> {
    fn new(len: usize) -> Option<Self> {
        let bytes = len.max(1).checked_mul(size_of::<T>())?;
        Some(Scratch {
            ptr: pages::map(bytes)?.cast(),
            len,
        })
    }
    fn slice(&mut self) -> &mut [T] {
        // SAFETY: `len` zeroed elements (a valid bit pattern for the plain-data types used
        // here), owned by self.
        unsafe { core::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Copy> Drop for Scratch<T> {
    fn drop(&mut self) {
        // SAFETY: mapped in `new` with this size.
        unsafe { pages::unmap(self.ptr.cast(), self.len.max(1) * size_of::<T>()) };
    }
}

/// The report's records again, sorted by address (the order the classifier needs), and where
/// each came from in the report's order.
struct ByAddress {
    copy: Scratch<LiveBlock>,
    /// Per sorted position: the record's index in the report.
    order: Scratch<u32>,
}

impl ByAddress {
    fn new(records: &[LiveBlock]) -> Option<Self> {
        let n = records.len();
        u32::try_from(n).ok()?;
        // Sorting (address, index) pairs gives both orders; the records are then gathered once.
        let mut keys = Scratch::<(usize, u32)>::new(n)?;
        let k = keys.slice();
        for (i, r) in records.iter().enumerate() {
            k[i] = (r.pointer, i as u32);
        }
        k.sort_unstable_by_key(|e| e.0);
        let mut copy = Scratch::<LiveBlock>::new(n)?;
        let mut order = Scratch::<u32>::new(n)?;
        let (c, o) = (copy.slice(), order.slice());
        for (j, &(_, i)) in k.iter().enumerate() {
            c[j] = records[i as usize];
            o[j] = i;
        }
        Some(ByAddress { copy, order })
    }

    /// Writes each record's kind byte at its index in the report's order: one pass instead of
    /// a binary search per block (which missed the cache at every step: half of a
    /// million-block report's time).
    fn kinds_by_record(mut self, kinds: &Kinds, out: &mut [u8]) {
        for (j, &i) in self.order.slice().iter().enumerate() {
            if let Some(b) = out.get_mut(i as usize) {
                *b = kinds.get(j) as u8;
            }
        }
    }
    fn records(&self) -> &[LiveBlock] {
        // SAFETY: `len` initialised records, owned by self.
        unsafe { core::slice::from_raw_parts(self.copy.ptr.as_ptr(), self.copy.len) }
    }
}

/// Suppression verdicts by backtrace id: open addressing, 0 = empty slot.
struct Verdicts {
    slots: Option<Scratch<(u32, bool)>>,
}

impl Verdicts {
    fn new(blocks: usize) -> Self {
        let cap = (blocks * 2).next_power_of_two().max(64);
        Verdicts {
            slots: Scratch::new(cap),
        }
    }
    fn find(slots: &mut [(u32, bool)], id: u32) -> usize {
        let mask = slots.len() - 1;
        let mut i = (id as usize).wrapping_mul(0x9e37_79b9) & mask;
        while slots[i].0 != 0 && slots[i].0 != id {
            i = (i + 1) & mask;
        }
        i
    }
    fn get(&mut self, id: u32) -> Option<bool> {
        let slots = self.slots.as_mut()?.slice();
        let i = Self::find(slots, id);
        (slots[i].0 == id).then_some(slots[i].1)
    }
    fn set(&mut self, id: u32, v: bool) {
        if let Some(s) = self.slots.as_mut() {
            let slots = s.slice();
            let i = Self::find(slots, id);
            slots[i] = (id, v);
        }
    }
}
