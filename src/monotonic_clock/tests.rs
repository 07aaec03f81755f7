use super::*;

/// A counter at 3 ticks per nanosecond, offset from the kernel's clock.
const TICKS_PER_NS: u64 = 3;
const OFFSET: u64 = 1_000_000_007;

fn reading_at(ns: u64) -> Reading {
    let tick = ns * TICKS_PER_NS + OFFSET;
    Reading {
        tick_before: tick - 30,
        ns,
        tick_after: tick + 30,
    }
}

fn tick_at(ns: u64) -> u64 {
    ns * TICKS_PER_NS + OFFSET
}

fn started(at: u64) -> Anchors {
    let anchors = Anchors::new();
    anchors.start(reading_at(at), 60);
    anchors
}

fn calibrated(at: u64) -> Anchors {
    let anchors = started(at);
    assert_eq!(
        anchors.refresh(reading_at(at + CALIBRATE_NS)),
        at + CALIBRATE_NS
    );
    anchors
}

#[test]
fn every_read_asks_the_kernel_until_the_rate_is_measured() {
    let start = 5_000_000_000;
    let anchors = started(start);
    assert_eq!(anchors.extrapolate(tick_at(start + 10)), None);
    // Short of the calibration time, a kernel reading is only passed through.
    assert_eq!(
        anchors.refresh(reading_at(start + CALIBRATE_NS - 1)),
        start + CALIBRATE_NS - 1
    );
    assert_eq!(anchors.extrapolate(tick_at(start + CALIBRATE_NS)), None);
    anchors.refresh(reading_at(start + CALIBRATE_NS));
    assert_eq!(
        anchors.extrapolate(tick_at(start + CALIBRATE_NS + 1000)),
        Some(start + CALIBRATE_NS + 1000)
    );
}

#[test]
fn extrapolation_follows_the_counter_for_a_millisecond_then_asks_again() {
    let start = 7_000_000_000;
    let anchors = calibrated(start);
    let anchor = start + CALIBRATE_NS;
    for d in [0, 1, 333, 12_345, 500_000, ANCHOR_NS - 1] {
        let got = anchors.extrapolate(tick_at(anchor + d)).unwrap();
        assert!(got.abs_diff(anchor + d) <= 1, "{d}: {got}");
    }
    assert_eq!(anchors.extrapolate(tick_at(anchor + ANCHOR_NS + 1)), None);
    // A counter behind the anchor (another CPU's, or one that went back) is not extrapolated.
    assert_eq!(anchors.extrapolate(tick_at(anchor) - 1000), None);
    // The next kernel reading is the new anchor.
    let later = anchor + 3 * ANCHOR_NS;
    assert_eq!(anchors.refresh(reading_at(later)), later);
    assert_eq!(
        anchors.extrapolate(tick_at(later + 10_000)),
        Some(later + 10_000)
    );
}

#[test]
fn a_long_idle_gap_keeps_the_rate() {
    let start = 1_000_000_000;
    let anchors = calibrated(start);
    let much_later = start + 60_000_000_000;
    anchors.refresh(reading_at(much_later));
    assert_eq!(anchors.restarts.load(Ordering::Relaxed), 0);
    assert_eq!(
        anchors.extrapolate(tick_at(much_later + 777)),
        Some(much_later + 777)
    );
}

#[test]
fn a_counter_that_changes_rate_restarts_calibration_and_is_given_up_at_last() {
    let start = 2_000_000_000;
    let anchors = calibrated(start);
    let mut ns = start + CALIBRATE_NS;
    for restart in 1..=MAX_RESTARTS {
        assert!(anchors.usable());
        // The counter runs 1% fast for two milliseconds: the kernel disagrees.
        let tick =
            anchors.anchor_tick.load(Ordering::Relaxed) + 2 * ANCHOR_NS * TICKS_PER_NS * 101 / 100;
        ns += 2 * ANCHOR_NS;
        anchors.refresh(Reading {
            tick_before: tick - 30,
            ns,
            tick_after: tick + 30,
        });
        assert_eq!(anchors.restarts.load(Ordering::Relaxed), restart);
        assert_eq!(anchors.extrapolate(tick + 10), None, "calibrating again");
        // Calibrated again, from the new base.
        ns += CALIBRATE_NS;
        let tick = tick + CALIBRATE_NS * TICKS_PER_NS;
        anchors.refresh(Reading {
            tick_before: tick - 30,
            ns,
            tick_after: tick + 30,
        });
        if restart < MAX_RESTARTS {
            assert_eq!(anchors.extrapolate(tick + 3000), Some(ns + 1000));
        }
    }
    assert!(!anchors.usable());
}

#[test]
fn an_interrupted_reading_does_not_become_an_anchor() {
    let start = 3_000_000_000;
    let anchors = calibrated(start);
    let later = start + CALIBRATE_NS + 2 * ANCHOR_NS;
    let tick = tick_at(later);
    let wide = Reading {
        tick_before: tick - 5000,
        ns: later,
        tick_after: tick + 5000,
    };
    assert_eq!(anchors.refresh(wide), later);
    assert_eq!(
        anchors.anchor_ns.load(Ordering::Relaxed),
        start + CALIBRATE_NS
    );
}

#[test]
fn a_read_during_a_write_asks_the_kernel() {
    let start = 4_000_000_000;
    let anchors = calibrated(start);
    let tick = tick_at(start + CALIBRATE_NS + 10);
    assert!(anchors.extrapolate(tick).is_some());
    anchors.seq.fetch_add(1, Ordering::Relaxed);
    assert_eq!(anchors.extrapolate(tick), None);
    // And a kernel reading meanwhile does not wait for, or take over, the write.
    let later = start + CALIBRATE_NS + 2 * ANCHOR_NS;
    assert_eq!(anchors.refresh(reading_at(later)), later);
    assert_eq!(
        anchors.anchor_ns.load(Ordering::Relaxed),
        start + CALIBRATE_NS
    );
}

#[test]
fn the_process_clock_stays_within_a_few_microseconds_of_the_kernel() {
    init();
    let mut last = 0;
    let end = kernel_ns() + 5 * CALIBRATE_NS;
    let mut i = 0u64;
    while kernel_ns() < end {
        i += 1;
        let before = kernel_ns();
        let ours = now_ns();
        let after = kernel_ns();
        assert!(
            ours + 2_000 >= before && ours <= after + 2_000,
            "{i}: {before} <= {ours} <= {after}"
        );
        last = ours;
        if i.is_multiple_of(50_000) {
            std::thread::sleep(std::time::Duration::from_millis(3));
        }
    }
    assert!(last > 0);
    // Where the counter is not the kernel's clock (another clocksource), only the kernel was
    // asked; say which, so a passing run is not mistaken for a tested counter.
    eprintln!(
        "counter used: {}",
        ANCHORS.usable() && ANCHORS.rate.load(Ordering::Relaxed) != 0
    );
}

/// A fork child whose parent had a write in progress (the count left odd) starts calibrating
/// again instead of asking the kernel for ever.
#[test]
fn a_fork_child_recalibrates_past_a_write_left_in_progress() {
    let start = 6_000_000_000;
    let anchors = calibrated(start);
    anchors.seq.fetch_add(1, Ordering::Relaxed);
    let child = start + CALIBRATE_NS + 5 * ANCHOR_NS;
    anchors.reset_in_child(reading_at(child));
    assert_eq!(anchors.seq.load(Ordering::Relaxed) & 1, 0);
    assert_eq!(
        anchors.extrapolate(tick_at(child + 10)),
        None,
        "calibrating"
    );
    anchors.refresh(reading_at(child + CALIBRATE_NS));
    assert_eq!(
        anchors.extrapolate(tick_at(child + CALIBRATE_NS + 500)),
        Some(child + CALIBRATE_NS + 500)
    );
}
