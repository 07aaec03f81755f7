use super::*;
use std::collections::HashSet;

fn spares() -> Box<SpareBlocks> {
    Box::new(SpareBlocks::new())
}

/// Puts a block; returns the blocks given back (the caller's to free).
fn put(s: &SpareBlocks, orig: usize, usable: usize) -> Vec<usize> {
    let mut given_back = Vec::new();
    s.put(orig, usable, |b| given_back.extend_from_slice(b));
    given_back
}

fn kept(s: &SpareBlocks) -> Vec<Spare> {
    let mut all = Vec::new();
    s.for_each(|spare| all.push(spare));
    all
}

/// A fake block address (never dereferenced): aligned like a native block.
fn block(i: usize) -> usize {
    0x1000_0000 + i * 0x1000
}

#[test]
fn a_request_takes_back_the_block_of_its_learned_size_class() {
    let s = spares();
    assert_eq!(s.take(20), Err(Miss::Unlearned));
    // glibc's classes on 64-bit: 17..=24 bytes get 24 usable, 25..=40 get 40.
    s.learn(20, 24);
    s.learn(30, 40);
    assert_eq!(s.take(20), Err(Miss::Empty));
    assert_eq!(put(&s, block(1), 24), []);
    assert_eq!(put(&s, block(2), 40), []);
    assert_eq!(
        s.take(30),
        Ok(Spare {
            orig: block(2),
            usable: 40
        })
    );
    assert_eq!(
        s.take(17),
        Ok(Spare {
            orig: block(1),
            usable: 24
        })
    );
    assert_eq!(s.take(24), Err(Miss::Empty));
    assert_eq!(s.take(25), Err(Miss::Empty));
}

#[test]
fn the_usable_size_is_kept_exactly_below_the_alignment() {
    let s = spares();
    for usable in [24, 40, 56, 72, 4088] {
        s.learn(usable, usable);
        assert_eq!(put(&s, block(usable), usable), [], "{usable}");
        assert_eq!(
            s.take(usable),
            Ok(Spare {
                orig: block(usable),
                usable
            })
        );
    }
}

#[test]
fn blocks_that_are_large_or_misaligned_are_not_kept() {
    let s = spares();
    assert_eq!(put(&s, block(1), MAX_USABLE + GRANULE), [block(1)]);
    assert_eq!(put(&s, block(1) + 8, 64), [block(1) + 8]);
    assert_eq!(put(&s, 0, 64), [0]);
    s.learn(MAX_USABLE + 1, MAX_USABLE + 16);
    assert_eq!(s.take(MAX_USABLE + 1), Err(Miss::TooLarge));
    let mut n = 0;
    s.for_each(|_| n += 1);
    assert_eq!(n, 0);
}

#[test]
fn a_take_never_hands_out_a_block_smaller_than_the_request() {
    let s = spares();
    s.learn(24, 24);
    // Same bucket (16..=31 on 64-bit), smaller block: an allocator this library does not know.
    assert_eq!(put(&s, block(1), 16), []);
    assert_eq!(s.take(24), Err(Miss::Empty));
    s.learn(16, 16);
    assert_eq!(
        s.take(16),
        Ok(Spare {
            orig: block(1),
            usable: 16
        })
    );
}

#[test]
fn a_full_bucket_gives_back_its_newer_half_at_once_and_keeps_the_new_block() {
    let s = spares();
    for i in 0..WAYS {
        assert_eq!(put(&s, block(i), 64), []);
    }
    assert_eq!(
        put(&s, block(WAYS), 64),
        (WAYS / 2..WAYS).map(block).collect::<Vec<_>>()
    );
    // Room for the next puts of the size without giving anything back.
    for i in WAYS + 1..WAYS + WAYS / 2 {
        assert_eq!(put(&s, block(i), 64), []);
    }
    s.learn(64, 64);
    let mut taken = HashSet::new();
    while let Ok(spare) = s.take(64) {
        assert_eq!(spare.usable, 64);
        assert!(taken.insert(spare.orig));
    }
    let expected: HashSet<usize> = (0..WAYS / 2)
        .chain(WAYS..WAYS + WAYS / 2)
        .map(block)
        .collect();
    assert_eq!(taken, expected);
}

#[test]
fn a_shard_over_its_budget_gives_back_older_spares_of_other_sizes() {
    let s = spares();
    let mut given_back = HashSet::new();
    let mut put_in = Vec::new();
    let mut i = 0;
    for usable in (MAX_USABLE - 64 * GRANULE..=MAX_USABLE).step_by(GRANULE) {
        for _ in 0..WAYS {
            i += 1;
            put_in.push(block(i));
            for b in put(&s, block(i), usable) {
                assert!(given_back.insert(b), "{b:#x} given back twice");
            }
            let bytes: usize = kept(&s).iter().map(|k| k.usable).sum();
            assert!(bytes <= SHARD_BYTES, "{bytes}");
        }
    }
    // Every block is either kept or given back, never both; the newest ones are kept.
    let kept_now: HashSet<usize> = kept(&s).iter().map(|k| k.orig).collect();
    assert!(kept_now.is_disjoint(&given_back));
    assert_eq!(kept_now.len() + given_back.len(), put_in.len());
    assert!(kept_now.contains(put_in.last().unwrap()));
    let bytes: usize = kept(&s).iter().map(|k| k.usable).sum();
    // Evictions free an eighth of the budget at a time.
    assert!(
        bytes > SHARD_BYTES - SHARD_BYTES / 8 - MAX_USABLE,
        "{bytes}"
    );
    // The oldest sizes went first.
    assert!(given_back.contains(&put_in[0]));
}

#[test]
fn threads_putting_and_taking_never_lose_or_duplicate_a_block() {
    const THREADS: usize = 4;
    const BLOCKS: usize = 20_000;
    let s: &'static SpareBlocks = Box::leak(spares());
    for usable in [32, 48, 64] {
        s.learn(usable, usable);
    }
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            std::thread::spawn(move || {
                // Each thread owns a block until it is put; a block taken is owned again.
                let mut owned = Vec::new();
                let mut given_back = Vec::new();
                for i in 0..BLOCKS {
                    let usable = [32, 48, 64][i % 3];
                    let b = block(t * BLOCKS + i);
                    s.put(b, usable, |g| given_back.extend_from_slice(g));
                    if let Ok(spare) = s.take([32, 48, 64][(i * 7) % 3]) {
                        owned.push(spare.orig);
                    }
                }
                (owned, given_back)
            })
        })
        .collect();
    let mut seen = HashSet::new();
    for h in handles {
        let (owned, given_back) = h.join().unwrap();
        for b in owned.into_iter().chain(given_back) {
            assert!(seen.insert(b), "block {b:#x} twice");
        }
    }
    s.for_each(|spare| assert!(seen.insert(spare.orig), "{:#x} twice", spare.orig));
    assert_eq!(seen.len(), THREADS * BLOCKS);
}

#[test]
fn a_take_accepts_a_spare_up_to_an_eighth_larger_and_no_more() {
    let s = spares();
    // Scudo: the usable size is the request.
    s.learn(800, 800);
    let class = 800 / GRANULE;
    let last = class + 1 + class / SLACK_DIVISOR;
    assert_eq!(put(&s, block(1), (last + 1) * GRANULE), []);
    assert_eq!(s.take(800), Err(Miss::Empty));
    assert_eq!(put(&s, block(2), last * GRANULE), []);
    assert_eq!(
        s.take(800),
        Ok(Spare {
            orig: block(2),
            usable: last * GRANULE
        })
    );
    assert!(last * GRANULE <= 800 + 800 / 8 + 2 * GRANULE);
}

/// The bucket's hint only guides: a hint left too low hides spares from takes until the next
/// put of the size, one left too high costs a scan; no spare is lost or handed out twice.
#[test]
fn a_wrong_hint_hides_a_spare_at_most_until_the_next_put_of_its_size() {
    let s = spares();
    s.learn(64, 64);
    for i in 0..3 {
        assert_eq!(put(&s, block(i), 64), []);
    }
    let bucket = 64 / GRANULE;
    let shard = s.own_shard();
    // Too low (a take that raced with puts).
    shard.tops[bucket].store(0, Ordering::Relaxed);
    assert_eq!(s.take(64), Err(Miss::Empty));
    assert_eq!(put(&s, block(3), 64), []);
    let mut taken = HashSet::new();
    while let Ok(spare) = s.take(64) {
        assert!(taken.insert(spare.orig));
    }
    assert_eq!(taken, (0..4).map(block).collect());
    // Too high (slots emptied behind it): found by the scan, and the hint comes down.
    assert_eq!(put(&s, block(4), 64), []);
    shard.tops[bucket].store(WAYS as u8, Ordering::Relaxed);
    assert_eq!(put(&s, block(5), 64), []);
    let mut taken = HashSet::new();
    while let Ok(spare) = s.take(64) {
        assert!(taken.insert(spare.orig));
    }
    assert_eq!(taken, [4, 5].map(block).into());
    assert_eq!(shard.tops[bucket].load(Ordering::Relaxed), 0);
}

/// Puts and takes of one size are last in, first out: the block checked most recently (still
/// in the cache) is the one handed out.
#[test]
fn the_last_block_put_is_the_first_taken() {
    let s = spares();
    s.learn(64, 64);
    for i in 0..5 {
        assert_eq!(put(&s, block(i), 64), []);
    }
    for i in (0..5).rev() {
        assert_eq!(s.take(64).map(|spare| spare.orig), Ok(block(i)));
    }
}

/// A take looks at the tops of the request's buckets before scanning any: a bucket's top may be
/// a little short of the request (Scudo), and the next bucket's top fits without a scan.
#[test]
fn a_take_prefers_a_fitting_top_to_a_scan() {
    let s = spares();
    // Scudo: the usable size is the request; 96..=111 share a bucket.
    s.learn(100, 100);
    for (i, usable) in [(0, 98), (1, 100), (2, 97), (3, 112)] {
        assert_eq!(put(&s, block(i), usable), []);
    }
    assert_eq!(
        s.take(100),
        Ok(Spare {
            orig: block(3),
            usable: 112
        })
    );
    // With no other top fitting, the scan finds the one block of the bucket that fits.
    assert_eq!(
        s.take(100),
        Ok(Spare {
            orig: block(1),
            usable: 100
        })
    );
    assert_eq!(s.take(100), Err(Miss::Empty));
}
