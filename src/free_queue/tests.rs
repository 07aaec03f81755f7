use super::*;
use std::sync::Mutex;
use std::vec::Vec;

/// Pushes `value` into ring `shard` and returns what left, with its frames.
fn push(
    q: &FreeQueue<usize>,
    shard: usize,
    value: usize,
    frames: &[usize],
) -> Vec<(usize, Vec<usize>)> {
    let mut left = Vec::new();
    q.push_to(shard, value, frames, |e, f| left.push((e, f.to_vec())));
    left
}

fn held(q: &FreeQueue<usize>) -> Vec<(usize, Vec<usize>)> {
    let mut seen = Vec::new();
    q.for_each(|e, f| seen.push((*e, f.to_vec())));
    seen
}

#[test]
fn one_thread_sees_one_fifo_whose_oldest_leaves_with_its_frames() {
    let q = FreeQueue::new();
    assert!(q.init(2, 4));
    assert!(push(&q, 0, 1, &[1, 2, 3, 4]).is_empty());
    assert!(push(&q, 0, 2, &[5, 6]).is_empty());
    assert_eq!(push(&q, 0, 3, &[]), [(1, vec![1, 2, 3, 4])]);
    // Frames beyond the configured count are cut.
    assert_eq!(push(&q, 0, 4, &[7, 8, 9, 10, 11, 12]), [(2, vec![5, 6])]);
    assert_eq!(held(&q), [(3, vec![]), (4, vec![7, 8, 9, 10])]);
}

#[test]
fn the_bound_is_shared_an_empty_ring_takes_another_rings_oldest() {
    let q = FreeQueue::new();
    assert!(q.init(3, 1));
    assert!(q.shards.load(Ordering::Relaxed) > 1);
    for v in 1..=3 {
        assert!(push(&q, 0, v, &[v]).is_empty());
    }
    // Ring 1 is empty and the bound reached: ring 0's oldest leaves.
    assert_eq!(push(&q, 1, 10, &[10]), [(1, vec![1])]);
    // Now ring 1 has an entry of its own, and its own oldest leaves first.
    assert_eq!(push(&q, 1, 11, &[11]), [(10, vec![10])]);
    assert_eq!(held(&q), [(2, vec![2]), (3, vec![3]), (11, vec![11])]);
    // Ring 1's pushes take from another ring when their turn comes (STEAL_EVERY).
    let mut v = 12;
    while !q
        .ends(1)
        .tail
        .load(Ordering::Relaxed)
        .is_multiple_of(STEAL_EVERY)
    {
        assert_eq!(push(&q, 1, v, &[v]), [(v - 1, vec![v - 1])]);
        v += 1;
    }
    assert_eq!(push(&q, 1, v, &[v]), [(2, vec![2])]);
}

#[test]
fn a_slot_claimed_by_a_stalled_push_is_passed_over_never_waited_for() {
    let q = FreeQueue::new();
    assert!(q.init(2, 1));
    // A push that claimed ring 0's next position and never finished (a thread parked by the
    // backtrace signal between its CAS and its publication).
    q.held.0.fetch_add(1, Ordering::Relaxed);
    q.ends(0).tail.fetch_add(1, Ordering::Relaxed);
    assert!(push(&q, 0, 1, &[1]).is_empty());
    // At the bound; ring 0's oldest is the stalled slot, so the pop gives up on ring 0 and no
    // other ring has anything: the pushed block leaves at once, and nothing waited.
    assert_eq!(push(&q, 0, 2, &[2]), [(2, vec![2])]);
    assert_eq!(held(&q), [(1, vec![1])]);
}

#[test]
fn an_unmapped_queue_hands_every_block_back() {
    let q = FreeQueue::<usize>::new();
    let mut left = Vec::new();
    q.push(7, &[1], |e, f| left.push((e, f.to_vec())));
    assert_eq!(left, [(7, vec![1])]);
    assert!(held(&q).is_empty());
}

#[test]
fn threads_never_hold_more_than_the_bound_and_every_block_leaves_once() {
    const THREADS: usize = 4;
    const PUSHES: usize = 20_000;
    static Q: FreeQueue<usize> = FreeQueue::new();
    assert!(Q.init(100, 2));
    let left = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let left = &left;
            s.spawn(move || {
                let mut mine = Vec::new();
                for i in 0..PUSHES {
                    let v = t * PUSHES + i + 1;
                    Q.push(v, &[v, v], |e, f| {
                        assert_eq!(f, [e, e]);
                        mine.push(e)
                    });
                    assert!(Q.held.0.load(Ordering::Relaxed) <= 100);
                }
                left.lock().unwrap().extend(mine);
            });
        }
    });
    let mut all = left.into_inner().unwrap();
    let still = held(&Q);
    assert!(still.len() <= 100);
    all.extend(still.iter().map(|(e, _)| *e));
    all.sort_unstable();
    assert_eq!(all, (1..=THREADS * PUSHES).collect::<Vec<_>>());
}

#[test]
fn an_exited_threads_entries_leave_when_another_thread_pushes_at_the_bound() {
    static Q: FreeQueue<usize> = FreeQueue::new();
    assert!(Q.init(10, 1));
    std::thread::spawn(|| {
        for v in 1..=10 {
            Q.push(v, &[v], |e, _| panic!("{e} left early"));
        }
    })
    .join()
    .unwrap();
    // The first push finds its own ring empty and takes the other's oldest; after that one
    // push in STEAL_EVERY takes from the other ring, so the exited thread's entries drain.
    let mut left = Vec::new();
    for v in 100..100 + 10 * STEAL_EVERY + 1 {
        Q.push(v, &[v], |e, _| left.push(e));
    }
    let theirs: Vec<usize> = left.iter().copied().filter(|&e| e <= 10).collect();
    assert_eq!(theirs, (1..=10).collect::<Vec<_>>());
    assert!(held(&Q).iter().all(|(e, _)| *e >= 100));
}

#[test]
fn a_ring_whose_owner_keeps_freeing_is_never_taken_from_on_a_stealing_turn() {
    let q = FreeQueue::new();
    assert!(q.init(4, 1));
    for v in 1..=4 {
        assert!(push(&q, 0, v, &[v]).is_empty());
    }
    // Ring 1 starts empty: its first push takes ring 0's oldest.
    assert_eq!(push(&q, 1, 100, &[100]), [(1, vec![1])]);
    // From then on both keep freeing: ring 1's pushes, stealing turns included, only ever
    // push out ring 1's own blocks, and ring 0's only ring 0's.
    for i in 0..4 * STEAL_EVERY {
        let left = push(&q, 0, 5 + i, &[5 + i]);
        assert!(left.iter().all(|(e, _)| *e < 100), "{left:?}");
        let left = push(&q, 1, 101 + i, &[101 + i]);
        assert_eq!(left, [(100 + i, vec![100 + i])]);
    }
}
