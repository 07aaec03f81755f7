//! The allocation pipeline in process, over the host's allocator (`state::for_tests`): block
//! geometry, guards, fills, the size and errno rules, realloc's cases. Options that need the
//! library's global structures (tracking, free_track, record_allocs) are tested through the
//! built library (tests/).

use super::*;
use crate::config::{FRONT_GUARD_BYTE, REAR_GUARD_BYTE};
use crate::entry::enter_for_test;
use crate::platform::errno;
use std::vec::Vec;

fn bytes_at(pointer: usize, len: usize) -> Vec<u8> {
    // SAFETY: the tests read only inside blocks (and their guards) they own.
    unsafe { core::slice::from_raw_parts(pointer as *const u8, len) }.to_vec()
}

fn header_of(state: &State, pointer: usize) -> Header {
    header(state, pointer)
}

#[test]
fn malloc_with_guards_lays_out_header_guards_and_fill() {
    let state = crate::state::for_tests("guard=16 fill");
    let cx = enter_for_test(state);
    let p = malloc(&cx, 10) as usize;
    assert_ne!(p, 0);
    assert_eq!(p % MIN_ALIGN, 0);
    let h = header_of(state, p);
    assert_eq!((h.tag, h.size, h.usable_size), (DEBUG_TAG, 10, 10));
    assert_eq!(bytes_at(p - 16, 16), [FRONT_GUARD_BYTE; 16]);
    assert_eq!(bytes_at(p + 10, 16), [REAR_GUARD_BYTE; 16]);
    assert_eq!(bytes_at(p, 10), [FILL_ALLOC_BYTE; 10]);
    assert_eq!(malloc_usable_size(&cx, p as *const c_void), 10);
    free(&cx, p as *mut c_void);
}

#[test]
fn calloc_zeroes_instead_of_filling() {
    let state = crate::state::for_tests("rear_guard=8 fill_on_alloc");
    let cx = enter_for_test(state);
    let p = calloc(&cx, 3, 7) as usize;
    assert_ne!(p, 0);
    assert_eq!({ header_of(state, p).size }, 21);
    assert_eq!(bytes_at(p, 21), [0; 21]);
    assert_eq!(bytes_at(p + 21, 8), [REAR_GUARD_BYTE; 8]);
    free(&cx, p as *mut c_void);
}

#[test]
fn memalign_in_header_mode_aligns_the_user_pointer() {
    let state = crate::state::for_tests("front_guard=32");
    let cx = enter_for_test(state);
    // A non-power-of-two alignment is rounded up, as the reference does.
    for (asked, expected) in [
        (64, 64),
        (4096, 4096),
        (48, 64),
        (1, MIN_ALIGN),
        (0, MIN_ALIGN),
    ] {
        let p = memalign(&cx, asked, 100) as usize;
        assert_ne!(p, 0, "{asked}");
        assert_eq!(p % expected, 0, "{asked}");
        let h = header_of(state, p);
        assert_eq!((h.tag, h.size), (DEBUG_TAG, 100));
        assert!(h.orig_pointer <= p - 32 - size_of::<Header>(), "{asked}");
        assert_eq!(bytes_at(p - 32, 32), [FRONT_GUARD_BYTE; 32]);
        free(&cx, p as *mut c_void);
    }
}

#[test]
fn sizes_past_the_limit_fail_with_enomem_and_touch_nothing() {
    for options in ["guard", "fill_on_alloc", "expand_alloc=64"] {
        let state = crate::state::for_tests(options);
        let cx = enter_for_test(state);
        for attempt in [
            &|| malloc(&cx, MAX_SIZE + 1) as usize,
            &|| calloc(&cx, 1 << 20, 1 << 20) as usize,
            &|| calloc(&cx, usize::MAX, 2) as usize,
            &|| memalign(&cx, 16, MAX_SIZE + 1) as usize,
        ] as [&dyn Fn() -> usize; 4]
        {
            set_errno(0);
            assert_eq!(attempt(), 0, "{options}");
            assert_eq!(errno(), libc::ENOMEM, "{options}");
        }
        // calloc's limit counts the library's extra bytes; malloc's does not.
        let extra = state.layout.extra_bytes;
        if extra > 0 {
            set_errno(0);
            assert_eq!(
                calloc(&cx, 1, MAX_SIZE - extra + 1) as usize,
                0,
                "{options}"
            );
            assert_eq!(errno(), libc::ENOMEM);
        }
    }
}

#[test]
fn aligned_alloc_and_posix_memalign_check_their_arguments() {
    let state = crate::state::for_tests("guard");
    let cx = enter_for_test(state);
    set_errno(0);
    assert!(aligned_alloc(&cx, 0, 16).is_null());
    assert_eq!(errno(), libc::EINVAL);
    assert!(aligned_alloc(&cx, 16, 24).is_null());
    let mut out = core::ptr::null_mut();
    assert_eq!(posix_memalign(&cx, &mut out, 3, 8), libc::EINVAL);
    set_errno(1234);
    assert_eq!(posix_memalign(&cx, &mut out, 256, 8), 0);
    assert_eq!(errno(), 1234, "posix_memalign leaves errno alone");
    assert_eq!(out as usize % 256, 0);
    free(&cx, out);
}

#[test]
fn realloc_shrinks_in_place_and_grows_by_moving_with_the_tail_filled() {
    let state = crate::state::for_tests("guard=16 fill_on_alloc");
    let cx = enter_for_test(state);
    let p = malloc(&cx, 64) as usize;
    // SAFETY: 64 bytes of our block.
    unsafe { core::ptr::write_bytes(p as *mut u8, 0x11, 64) };
    // Smaller: the same block, its rear guard moved.
    assert_eq!(realloc(&cx, p as *mut c_void, 40) as usize, p);
    assert_eq!({ header_of(state, p).size }, 40);
    assert_eq!(bytes_at(p + 40, 16), [REAR_GUARD_BYTE; 16]);
    // Larger: a new block with the old bytes, the rest filled with 0xeb.
    let q = realloc(&cx, p as *mut c_void, 200) as usize;
    assert_ne!(q, 0);
    assert_eq!(bytes_at(q, 40), [0x11; 40]);
    assert_eq!(bytes_at(q + 40, 160), [FILL_ALLOC_BYTE; 160]);
    assert_eq!(bytes_at(q + 200, 16), [REAR_GUARD_BYTE; 16]);
    // realloc to 0 frees and returns null; realloc of null allocates.
    assert!(realloc(&cx, q as *mut c_void, 0).is_null());
    let r = realloc(&cx, core::ptr::null_mut(), 5) as usize;
    assert_eq!({ header_of(state, r).size }, 5);
    free(&cx, r as *mut c_void);
}

#[test]
fn realloc_past_the_limit_keeps_the_old_block() {
    let state = crate::state::for_tests("rear_guard");
    let cx = enter_for_test(state);
    let p = malloc(&cx, 8) as usize;
    set_errno(0);
    assert!(realloc(&cx, p as *mut c_void, MAX_SIZE + 1).is_null());
    assert_eq!(errno(), libc::ENOMEM);
    assert_eq!({ header_of(state, p).size }, 8);
    free(&cx, p as *mut c_void);
}

#[test]
fn without_a_header_the_native_block_is_the_users_and_expand_alloc_adds_room() {
    let state = crate::state::for_tests("expand_alloc=100 fill_on_alloc=8");
    let cx = enter_for_test(state);
    let p = malloc(&cx, 10) as usize;
    assert!(malloc_usable_size(&cx, p as *const c_void) >= 110);
    // Only the first 8 bytes are filled (the option's limit).
    assert_eq!(bytes_at(p, 8), [FILL_ALLOC_BYTE; 8]);
    let q = realloc(&cx, p as *mut c_void, 300) as usize;
    assert!(malloc_usable_size(&cx, q as *const c_void) >= 400);
    free(&cx, q as *mut c_void);
}
