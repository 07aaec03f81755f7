//! CLOCK_MONOTONIC nanoseconds for record_allocs' timestamps, two per recorded call
//! (docs/design.md, "The record_allocs clock").
//!
//! # Model
//!
//! `clock_gettime` through the vDSO reads the CPU's time-stamp counter and converts it with the
//! kernel's scale, under a sequence lock, behind libc's wrapper: about 22 ns here, and on the
//! Android 11 root the two reads per call were a fifth of record_allocs' whole cost. Where the
//! kernel's own clock *is* the time-stamp counter, this module reads the counter itself (about
//! 10 ns) and converts it by an *anchor* — a counter value and the kernel's nanoseconds read
//! together — and a *rate* in nanoseconds per tick, measured between the first anchor and the
//! latest (the scheme of Abseil's `GetCurrentTimeNanos`):
//!
//! - a read extrapolates from the latest anchor for at most `ANCHOR_NS` (a millisecond) of
//!   ticks; the first read past that asks the kernel and becomes the next anchor. So every
//!   timestamp is within a millisecond's extrapolation of a kernel reading, and its error is
//!   that millisecond times the rate's relative error (measured over at least `CALIBRATE_NS`,
//!   a few parts per million at first and less the longer the process runs): nanoseconds;
//! - until the rate has been measured over `CALIBRATE_NS`, every read asks the kernel;
//! - an anchor whose kernel reading disagrees with the extrapolation by more than
//!   `tolerance` (the counter jumped, stopped or changed rate: a migrated virtual machine, a
//!   kernel that gave up on the counter) restarts the calibration from it, and after
//!   `MAX_RESTARTS` restarts the counter is not used again.
//!
//! The counter is used only on x86_64, when the CPU says it is invariant (constant rate in every
//! power state) and the kernel's current clocksource is `tsc`: the kernel keeps that only for a
//! counter synchronised across CPUs, so a thread that moves between CPUs reads one clock. A
//! process that forbids itself the counter (`prctl(PR_SET_TSC, PR_TSC_SIGSEGV)`, as record and
//! replay tools do) faults in the vDSO's `clock_gettime` just the same (tried on this project's
//! kernel), so the counter's own read asks nothing more of such a process than the kernel's
//! clock did.
//!
//! Readers never wait: the anchor is published under a sequence count, and a read that meets a
//! write in progress (its writer possibly parked by bionic's backtrace signal) asks the kernel
//! instead. Writers take the count by compare-and-swap once a millisecond and never wait for it
//! either (the signal-33 rule of docs/design.md).

use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering, fence};

/// Longest extrapolation from one anchor.
const ANCHOR_NS: u64 = 1_000_000;
/// The rate is first trusted once measured over this long.
const CALIBRATE_NS: u64 = 10_000_000;
/// Calibration restarts before the counter is given up.
const MAX_RESTARTS: u32 = 8;

/// The anchor and rate, published under `seq` (even: stable; odd: being written).
pub struct Anchors {
    seq: AtomicU32,
    anchor_tick: AtomicU64,
    anchor_ns: AtomicU64,
    /// Nanoseconds per tick, 32.32 fixed point; 0 while calibrating.
    rate: AtomicU64,
    /// Ticks of `ANCHOR_NS` at `rate`.
    limit: AtomicU64,
    /// Where the rate is measured from (written under `seq` too).
    base_tick: AtomicU64,
    base_ns: AtomicU64,
    /// Widest pair of counter reads around a kernel reading that may make an anchor: a pair
    /// much wider than the narrowest seen at start-up was interrupted, and its midpoint says
    /// little about when the kernel read its clock.
    max_bracket: AtomicU64,
    restarts: AtomicU32,
    /// Cleared for good after `MAX_RESTARTS`.
    usable: AtomicBool,
}

/// Three counter/kernel readings taken together: the counter before and after the kernel's.
#[derive(Clone, Copy, Debug)]
pub struct Reading {
    pub tick_before: u64,
    pub ns: u64,
    pub tick_after: u64,
}

impl Reading {
    fn tick(&self) -> u64 {
        self.tick_before + (self.tick_after - self.tick_before) / 2
    }

    fn bracket(&self) -> u64 {
        self.tick_after.wrapping_sub(self.tick_before)
    }
}

impl Anchors {
    pub const fn new() -> Self {
        Anchors {
            seq: AtomicU32::new(0),
            anchor_tick: AtomicU64::new(0),
            anchor_ns: AtomicU64::new(0),
            rate: AtomicU64::new(0),
            limit: AtomicU64::new(0),
            base_tick: AtomicU64::new(0),
            base_ns: AtomicU64::new(0),
            max_bracket: AtomicU64::new(0),
            restarts: AtomicU32::new(0),
            usable: AtomicBool::new(false),
        }
    }

    /// Starts calibrating from `first`; `narrowest` is the narrowest bracket of a few readings
    /// taken in a row.
    pub fn start(&self, first: Reading, narrowest: u64) {
        self.max_bracket
            .store(narrowest.saturating_mul(4).max(64), Ordering::Relaxed);
        self.restarts.store(0, Ordering::Relaxed);
        self.write_alone(|| self.restart_from(first));
        self.usable.store(true, Ordering::Release);
    }

    /// Writes under the count for a caller that knows no other writer runs (initialize, a fork
    /// child), so that readers and later writers see the fields whole.
    fn write_alone(&self, write: impl FnOnce()) {
        let seq = self.seq.load(Ordering::Relaxed) | 1;
        self.seq.store(seq, Ordering::Relaxed);
        fence(Ordering::Release);
        write();
        self.seq.store(seq + 1, Ordering::Release);
    }

    pub fn usable(&self) -> bool {
        self.usable.load(Ordering::Relaxed)
    }

    /// Nanoseconds at counter value `tick`, extrapolated from the anchor; None when the caller
    /// must ask the kernel (`refresh`): still calibrating, past the anchor's reach, the counter
    /// behind the anchor, or a write in progress.
    #[inline]
    pub fn extrapolate(&self, tick: u64) -> Option<u64> {
        let seq = self.seq.load(Ordering::Acquire);
        let anchor_tick = self.anchor_tick.load(Ordering::Relaxed);
        let anchor_ns = self.anchor_ns.load(Ordering::Relaxed);
        let rate = self.rate.load(Ordering::Relaxed);
        let limit = self.limit.load(Ordering::Relaxed);
        fence(Ordering::Acquire);
        if seq & 1 != 0 || self.seq.load(Ordering::Relaxed) != seq || rate == 0 {
            return None;
        }
        // A counter behind the anchor wraps to a huge distance and fails this test too.
        let ticks = tick.wrapping_sub(anchor_tick);
        if ticks > limit {
            return None;
        }
        Some(anchor_ns + ticks_to_ns(ticks, rate)?)
    }

    /// Takes a kernel reading made because `extrapolate` declined: it becomes the next anchor
    /// when it is due to and no other thread is writing one. Returns the reading's nanoseconds.
    pub fn refresh(&self, reading: Reading) -> u64 {
        let ns = reading.ns;
        let calibrating = self.rate.load(Ordering::Relaxed) == 0;
        if calibrating && ns.saturating_sub(self.base_ns.load(Ordering::Relaxed)) < CALIBRATE_NS {
            return ns;
        }
        if reading.bracket() > self.max_bracket.load(Ordering::Relaxed) {
            return ns;
        }
        let seq = self.seq.load(Ordering::Relaxed);
        if seq & 1 != 0
            || self
                .seq
                .compare_exchange(seq, seq + 1, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
        {
            return ns;
        }
        fence(Ordering::Release);
        self.anchor_at(reading);
        self.seq.store(seq + 2, Ordering::Release);
        ns
    }

    /// Under the write count: makes `reading` the anchor, with the rate measured from the base,
    /// or restarts calibration from it when it contradicts the current rate.
    fn anchor_at(&self, reading: Reading) {
        let tick = reading.tick();
        let rate = self.rate.load(Ordering::Relaxed);
        if rate != 0 {
            let anchor_tick = self.anchor_tick.load(Ordering::Relaxed);
            let anchor_ns = self.anchor_ns.load(Ordering::Relaxed);
            let ticks = tick.wrapping_sub(anchor_tick);
            let expected = ticks_to_ns(ticks, rate).map(|d| anchor_ns.saturating_add(d));
            let elapsed = reading.ns.saturating_sub(anchor_ns);
            let agrees = tick >= anchor_tick
                && reading.ns >= anchor_ns
                && expected.is_some_and(|e| e.abs_diff(reading.ns) <= tolerance(elapsed));
            if !agrees {
                if self.restarts.fetch_add(1, Ordering::Relaxed) + 1 >= MAX_RESTARTS {
                    self.usable.store(false, Ordering::Relaxed);
                }
                return self.restart_from(reading);
            }
        }
        let base_tick = self.base_tick.load(Ordering::Relaxed);
        let base_ns = self.base_ns.load(Ordering::Relaxed);
        if tick <= base_tick || reading.ns <= base_ns {
            return self.restart_from(reading);
        }
        // At most 256 ns per tick: ticks × rate stays far inside 64 bits over `limit` ticks.
        let ticks = u128::from(tick - base_tick);
        let rate = (((u128::from(reading.ns - base_ns) << 32) + ticks / 2) / ticks)
            .clamp(1, 1 << 40) as u64;
        self.anchor_tick.store(tick, Ordering::Relaxed);
        self.anchor_ns.store(reading.ns, Ordering::Relaxed);
        self.limit.store(
            (u128::from(ANCHOR_NS) << 32).div_ceil(u128::from(rate)) as u64,
            Ordering::Relaxed,
        );
        self.rate.store(rate, Ordering::Relaxed);
    }

    fn restart_from(&self, reading: Reading) {
        self.base_tick.store(reading.tick(), Ordering::Relaxed);
        self.base_ns.store(reading.ns, Ordering::Relaxed);
        self.anchor_tick.store(reading.tick(), Ordering::Relaxed);
        self.anchor_ns.store(reading.ns, Ordering::Relaxed);
        self.rate.store(0, Ordering::Relaxed);
    }

    /// Fork child: a write the parent's other threads had in progress never finishes.
    pub fn reset_in_child(&self, reading: Reading) {
        self.write_alone(|| self.restart_from(reading));
    }
}

/// How far a kernel reading may be from the extrapolation to it without restarting: a
/// microsecond for the readings' own uncertainty, plus 100 parts per million of the time since
/// the anchor (the rate's error is a few parts per million; a process idle for seconds reaches
/// its next anchor from far away).
fn tolerance(elapsed_ns: u64) -> u64 {
    1_000 + elapsed_ns / 10_000
}

/// `ticks` at `rate` (nanoseconds per tick, 32.32 fixed point), rounded to the nearest
/// nanosecond; None past 64 bits (a gap of centuries, or a corrupt rate).
#[inline]
fn ticks_to_ns(ticks: u64, rate: u64) -> Option<u64> {
    u64::try_from((u128::from(ticks) * u128::from(rate) + (1 << 31)) >> 32).ok()
}

static ANCHORS: Anchors = Anchors::new();

/// Decides once whether the counter may be used, and starts calibrating if so. For
/// record_allocs' initialize; before it (or without it) `now_ns` asks the kernel.
pub fn init() {
    if !counter_is_the_kernel_clock() {
        return;
    }
    let mut first = read_both();
    let mut narrowest = first.bracket();
    for _ in 0..7 {
        let reading = read_both();
        if reading.bracket() < narrowest {
            narrowest = reading.bracket();
            first = reading;
        }
    }
    ANCHORS.start(first, narrowest);
}

/// See [`Anchors::reset_in_child`].
pub fn reset_in_child() {
    if ANCHORS.usable() {
        ANCHORS.reset_in_child(read_both());
    }
}

/// CLOCK_MONOTONIC in nanoseconds (within nanoseconds: see the module's doc).
#[inline]
pub fn now_ns() -> u64 {
    if !ANCHORS.usable() {
        return kernel_ns();
    }
    if let Some(ns) = ANCHORS.extrapolate(read_counter()) {
        return ns;
    }
    ANCHORS.refresh(read_both())
}

fn read_both() -> Reading {
    let tick_before = read_counter();
    let ns = kernel_ns();
    Reading {
        tick_before,
        ns,
        tick_after: read_counter().max(tick_before),
    }
}

fn kernel_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-parameter; CLOCK_MONOTONIC cannot fail.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn read_counter() -> u64 {
    // SAFETY: rdtsc reads a register; every x86_64 CPU has it, and user-mode reads are only
    // refused where the kernel's own clock could not be the counter (checked at `init`).
    unsafe { core::arch::x86_64::_rdtsc() }
}

#[cfg(not(target_arch = "x86_64"))]
fn read_counter() -> u64 {
    0
}

#[cfg(target_arch = "x86_64")]
fn counter_is_the_kernel_clock() -> bool {
    // Leaf 0x8000_0007, EDX bit 8: the counter is invariant (the extended leaf checked to
    // exist first).
    let invariant = {
        use core::arch::x86_64::__cpuid;
        __cpuid(0x8000_0000).eax >= 0x8000_0007 && __cpuid(0x8000_0007).edx & (1 << 8) != 0
    };
    invariant && crate::platform::keeping_errno(current_clocksource_is_tsc)
}

#[cfg(not(target_arch = "x86_64"))]
fn counter_is_the_kernel_clock() -> bool {
    false
}

#[cfg(target_arch = "x86_64")]
fn current_clocksource_is_tsc() -> bool {
    const PATH: &[u8] = b"/sys/devices/system/clocksource/clocksource0/current_clocksource\0";
    // SAFETY: a NUL-terminated path; the descriptor is closed below.
    let fd = unsafe { libc::open(PATH.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return false;
    }
    let mut name = [0u8; 16];
    // SAFETY: reads into a buffer of the given length.
    let n = unsafe { libc::read(fd, name.as_mut_ptr().cast(), name.len()) };
    // SAFETY: our descriptor.
    unsafe { libc::close(fd) };
    n == 4 && &name[..4] == b"tsc\n"
}

#[cfg(test)]
mod tests;
