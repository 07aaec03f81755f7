use super::*;
use std::boxed::Box;
use std::vec::Vec;

/// A map of its own (2 MiB of root: on the heap, zeroed, which is an empty map).
fn map() -> Box<PresenceMap> {
    // SAFETY: all-zero bytes are a valid empty map (null leaves, top byte not yet learned).
    unsafe { Box::<PresenceMap>::new_zeroed().assume_init() }
}

const BASE: usize = 0x7f12_3456_0000;

#[test]
fn inserted_pointers_are_present_until_removed() {
    let m = map();
    assert!(!m.contains(BASE));
    assert!(m.insert(BASE));
    assert!(m.insert(BASE + 16));
    assert!(m.contains(BASE) && m.contains(BASE + 16));
    assert!(!m.contains(BASE + 32));
    assert!(m.remove(BASE));
    assert!(!m.remove(BASE), "a second removal finds nothing");
    assert!(!m.contains(BASE) && m.contains(BASE + 16));
}

#[test]
fn pointers_the_map_cannot_hold_are_refused() {
    let m = map();
    assert!(m.insert(BASE));
    // Not 16-aligned: its bit would be the block's before it.
    assert!(!m.insert(BASE + 8));
    assert!(!m.contains(BASE + 8) && !m.remove(BASE + 8));
    // Above 2^48.
    assert!(!m.insert(1 << 48));
    // Another top byte than the first pointer's.
    assert!(!m.insert(BASE | (0xb4 << 56)));
    assert!(!m.contains(BASE | (0xb4 << 56)));
    assert_eq!(m.count(), 1);
}

#[test]
fn a_tagged_first_pointer_sets_the_tag_of_all() {
    let m = map();
    let tagged = BASE | (0xb4 << 56);
    assert!(m.insert(tagged));
    assert!(m.contains(tagged) && !m.contains(BASE));
    assert!(!m.insert(BASE));
    let mut seen = Vec::new();
    m.for_each(|p| seen.push(p));
    assert_eq!(seen, [tagged]);
}

#[test]
fn a_walk_sees_every_live_pointer_in_address_order_across_leaves() {
    let m = map();
    let mut expected = Vec::new();
    for i in 0..1000usize {
        // Spread over three leaves (1 GiB each) and many pages of bitmap.
        let p = BASE + (i % 3) * (1 << 30) + i * 4096 * 17 + 48;
        assert!(m.insert(p));
        expected.push(p);
    }
    for p in expected.iter().step_by(7) {
        assert!(m.remove(*p));
    }
    let mut kept: Vec<usize> = expected
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 7 != 0)
        .map(|(_, p)| *p)
        .collect();
    kept.sort();
    let mut seen = Vec::new();
    m.for_each(|p| seen.push(p));
    assert_eq!(seen, kept);
    assert_eq!(m.count(), kept.len());
}

#[test]
fn threads_marking_neighbouring_blocks_lose_no_bit() {
    // Four threads own interleaved 16-byte granules of the same words: every bit they set and
    // clear with their own locked instructions must survive the others'.
    let m: &'static PresenceMap = Box::leak(map());
    on_four_threads(move |t| {
        for round in 0..200 {
            for i in 0..256usize {
                let p = BASE + (i * 4 + t) * 16;
                assert!(m.insert(p));
                if (i + round) % 3 == 0 {
                    assert!(m.remove(p));
                }
            }
            for i in 0..256usize {
                let p = BASE + (i * 4 + t) * 16;
                assert_eq!(m.contains(p), (i + round) % 3 != 0, "thread {t} block {i}");
                m.remove(p);
            }
        }
    });
    assert_eq!(m.count(), 0);
}

/// Runs `f(t)` on four threads, t = 0..4, and waits for them.
fn on_four_threads(f: impl Fn(usize) + Send + Copy + 'static) {
    let threads: Vec<_> = (0..4usize)
        .map(|t| std::thread::spawn(move || f(t)))
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

/// A size map of its own (zeroed on the heap, as `map`).
fn size_map() -> Box<SizeMap> {
    // SAFETY: all-zero bytes are a valid empty map.
    unsafe { Box::<SizeMap>::new_zeroed().assume_init() }
}

#[test]
fn lanes_keep_each_pointers_value_apart_from_its_neighbours() {
    let m = size_map();
    // Four lanes share a word: the first, a middle one, the last, and the next word's first.
    let values = [
        (BASE, 1),
        (BASE + 32, 65535),
        (BASE + 48, 300),
        (BASE + 64, 2),
    ];
    for (p, v) in values {
        assert!(m.insert_value(p, v));
    }
    for (p, v) in values {
        assert_eq!(m.value(p), v);
    }
    assert_eq!(m.value(BASE + 16), 0);
    let mut seen = Vec::new();
    m.for_each_value(|p, v| seen.push((p, v)));
    assert_eq!(seen, values);
    assert_eq!(m.take(BASE + 32), 65535);
    assert_eq!(m.take(BASE + 32), 0, "a second take finds nothing");
    assert_eq!((m.value(BASE + 48), m.value(BASE)), (300, 1));
    assert!(!m.insert_value(BASE + 8, 5), "not 16-aligned");
    assert_eq!(m.count(), 3);
}

#[test]
fn threads_setting_neighbouring_lanes_lose_no_value() {
    // As for the bits: four threads own interleaved granules, here each with a value of its own
    // in lanes of the same words.
    let m: &'static SizeMap = Box::leak(size_map());
    on_four_threads(move |t| {
        for round in 0..200u64 {
            for i in 0..256usize {
                let p = BASE + (i * 4 + t) * 16;
                let value = 1 + (i as u64 * 257 + round + t as u64) % 65535;
                assert!(m.insert_value(p, value));
                if (i as u64 + round).is_multiple_of(3) {
                    assert_eq!(m.take(p), value);
                }
            }
            for i in 0..256usize {
                let p = BASE + (i * 4 + t) * 16;
                let value = 1 + (i as u64 * 257 + round + t as u64) % 65535;
                let kept = !(i as u64 + round).is_multiple_of(3);
                assert_eq!(m.take(p), if kept { value } else { 0 }, "thread {t} {i}");
            }
        }
    });
    assert_eq!(m.count(), 0);
}
