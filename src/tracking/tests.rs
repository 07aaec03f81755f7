//! The live table as the allocation paths use it: track, untrack, restore, and what is stored
//! for a block. Each test tracks blocks of its own (heap addresses), so the tests can share
//! the process-wide table.

use super::*;
use crate::backtrace::Origin;

fn block() -> (Box<[u8; 16]>, usize) {
    let b = Box::new([0u8; 16]);
    let p = b.as_ptr() as usize;
    (b, p)
}

#[test]
fn a_tracked_block_is_live_until_untracked() {
    let state = crate::state::for_tests("leak_track");
    let (_b, p) = block();
    assert!(!is_live(p));
    assert!(untrack(p).is_none());
    track(state, &Origin::here(), p, 16);
    assert!(is_live(p));
    let info = LIVE_TABLE.get(p).unwrap();
    assert_eq!(decode_size(info.size), (16, false));
    assert_eq!(
        info.backtrace_id, BT_OFF,
        "no backtrace option: nothing captured"
    );
    assert!(untrack(p).is_some());
    assert!(!is_live(p));
}

#[test]
fn restore_puts_back_what_untrack_took() {
    let state = crate::state::for_tests("leak_track");
    let (_b, p) = block();
    track(state, &Origin::here(), p, 7);
    let record = untrack(p).unwrap();
    assert!(!is_live(p));
    restore(p, record);
    assert_eq!(decode_size(LIVE_TABLE.get(p).unwrap().size), (7, false));
    untrack(p);
}

#[test]
fn sizes_are_clamped_below_the_zygote_bit() {
    let state = crate::state::for_tests("leak_track");
    let (_b, p) = block();
    track(state, &Origin::here(), p, usize::MAX);
    let (size, zygote) = decode_size(LIVE_TABLE.get(p).unwrap().size);
    assert_eq!((size, zygote), (crate::header::MAX_SIZE, false));
    untrack(p);
    assert_eq!(decode_size(ZYGOTE_BIT | 5), (5, true));
}

#[test]
fn frame_buffers_copy_at_most_max_frames() {
    let mut buffer = FrameBuffer::new();
    assert!(buffer.frames().is_empty());
    buffer.copy_from(&[1, 2, 3]);
    assert_eq!(buffer.frames(), [1, 2, 3]);
    let many: Vec<usize> = (0..backtrace::MAX_FRAMES + 5).collect();
    buffer.copy_from(&many);
    assert_eq!(buffer.frames(), &many[..backtrace::MAX_FRAMES]);
}
