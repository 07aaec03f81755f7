//! The table layouts against the spec's numbers, and `detect`/`read` on fake libc tables.

use super::layout::{self, Field, TableLayout};
use super::*;

/// docs/spec/abi.md#mallocdispatch (both layouts; Android 17:
/// docs/spec/android-versions.md#android-17-reallocarray), offsets in bytes.
#[test]
fn offsets_match_the_spec_for_both_pointer_widths() {
    use Field::*;
    use TableLayout::*;
    let expect = |layout, pointer_size, table: &[(Field, usize)], size| {
        for &(field, off) in table {
            assert_eq!(
                layout::offset(layout, pointer_size, field),
                Some(off),
                "{layout:?} {pointer_size} {field:?}"
            );
        }
        assert_eq!(
            layout::size(layout, pointer_size),
            size,
            "{layout:?} {pointer_size}"
        );
    };
    expect(
        Android17,
        8,
        &[
            (Calloc, 0),
            (Free, 8),
            (PosixMemalign, 48),
            (Realloc, 56),
            (Reallocarray, 64),
            (MallocIterate, 72),
            (MallocDisable, 80),
            (MallocEnable, 88),
            (Mallopt, 96),
            (AlignedAlloc, 104),
            (MallocInfo, 112),
        ],
        128,
    );
    expect(
        Android17,
        4,
        &[
            (Calloc, 0),
            (PosixMemalign, 24),
            (Pvalloc, 28),
            (Realloc, 32),
            (Reallocarray, 36),
            (Valloc, 40),
            (MallocIterate, 44),
            (MallocDisable, 48),
            (MallocEnable, 52),
            (Mallopt, 56),
            (AlignedAlloc, 60),
            (MallocInfo, 64),
        ],
        96,
    );
    expect(
        Classic,
        8,
        &[
            (Realloc, 56),
            (MallocIterate, 64),
            (MallocDisable, 72),
            (MallocEnable, 80),
            (Mallopt, 88),
            (AlignedAlloc, 96),
            (MallocInfo, 104),
        ],
        128,
    );
    expect(
        Classic,
        4,
        &[
            (Pvalloc, 28),
            (Realloc, 32),
            (Valloc, 36),
            (MallocIterate, 40),
            (MallocInfo, 60),
        ],
        64,
    );
    for width in [4, 8] {
        assert_eq!(layout::slot(Classic, width, Reallocarray), None);
    }
    for layout in [Classic, Android17] {
        assert_eq!(layout::slot(layout, 8, Pvalloc), None);
        assert_eq!(layout::slot(layout, 8, Valloc), None);
    }
    // The probe slot is padding in the classic LP64 table and malloc_info in Android 17's.
    assert!(layout::fields(Classic, 8).len() <= layout::LP64_PROBE_SLOT);
    assert_eq!(
        layout::slot(Android17, 8, MallocInfo),
        Some(layout::LP64_PROBE_SLOT)
    );
}

/// A fake libc table: slot `i` of each present field holds a distinct fake address (never
/// called), the rest is zero like the padding of bionic's static tables.
#[repr(C, align(32))]
struct Fake([usize; 32]);

fn fake_address(field: Field) -> usize {
    0x10_0000 + 16 * field as usize
}

fn fake(layout: TableLayout, without: &[Field]) -> Fake {
    let mut t = Fake([0; 32]);
    for (i, &f) in layout::fields(layout, size_of::<usize>())
        .iter()
        .enumerate()
    {
        if !without.contains(&f) {
            t.0[i] = fake_address(f);
        }
    }
    t
}

fn addresses(d: &MallocDispatch) -> Vec<(Field, usize)> {
    let mut v = vec![
        (Field::Calloc, d.calloc as usize),
        (Field::Free, d.free as usize),
        (Field::Mallinfo, d.mallinfo as usize),
        (Field::Malloc, d.malloc as usize),
        (Field::MallocUsableSize, d.malloc_usable_size as usize),
        (Field::Memalign, d.memalign as usize),
        (Field::PosixMemalign, d.posix_memalign as usize),
        (Field::Realloc, d.realloc as usize),
        (Field::MallocIterate, d.malloc_iterate as usize),
        (Field::MallocDisable, d.malloc_disable as usize),
        (Field::MallocEnable, d.malloc_enable as usize),
        (Field::Mallopt, d.mallopt as usize),
        (Field::AlignedAlloc, d.aligned_alloc as usize),
        (Field::MallocInfo, d.malloc_info as usize),
    ];
    if let Some(f) = d.reallocarray {
        v.push((Field::Reallocarray, f as usize));
    }
    #[cfg(target_pointer_width = "32")]
    v.extend([
        (Field::Pvalloc, d.pvalloc as usize),
        (Field::Valloc, d.valloc as usize),
    ]);
    v
}

fn expected(layout: TableLayout) -> Vec<(Field, usize)> {
    let mut v: Vec<_> = layout::fields(layout, size_of::<usize>())
        .iter()
        .map(|&f| (f, fake_address(f)))
        .collect();
    v.sort_by_key(|&(f, _)| f as usize);
    v
}

fn sorted(mut v: Vec<(Field, usize)>) -> Vec<(Field, usize)> {
    v.sort_by_key(|&(f, _)| f as usize);
    v
}

#[test]
fn each_layout_is_read_by_field_not_by_position() {
    for layout in [TableLayout::Classic, TableLayout::Android17] {
        let t = fake(layout, &[]);
        // SAFETY: a complete fake table of that layout.
        let d = unsafe { read(core::ptr::from_ref(&t).cast(), layout) }.expect("complete table");
        assert_eq!(sorted(addresses(&d)), expected(layout), "{layout:?}");
    }
}

#[cfg(target_pointer_width = "64")]
#[test]
fn lp64_layout_is_told_by_the_padding_slot() {
    let classic = fake(TableLayout::Classic, &[]);
    let android17 = fake(TableLayout::Android17, &[]);
    let android9 = fake(TableLayout::Classic, &[Field::MallocInfo]);
    // SAFETY: fake tables of 128+ bytes.
    unsafe {
        assert_eq!(
            detect(core::ptr::from_ref(&classic).cast()),
            TableLayout::Classic
        );
        assert_eq!(
            detect(core::ptr::from_ref(&android17).cast()),
            TableLayout::Android17
        );
        assert_eq!(
            detect(core::ptr::from_ref(&android9).cast()),
            TableLayout::Classic
        );
    }
}

#[test]
fn android_9_table_gets_a_malloc_info_stand_in() {
    let t = fake(TableLayout::Classic, &[Field::MallocInfo]);
    // SAFETY: a fake classic table.
    let d = unsafe { read(core::ptr::from_ref(&t).cast(), TableLayout::Classic) }.expect("read");
    assert_eq!(d.malloc_info as usize, no_malloc_info as *const () as usize);
    crate::platform::set_errno(0);
    // SAFETY: the stand-in ignores its arguments.
    assert_eq!(unsafe { (d.malloc_info)(0, core::ptr::null_mut()) }, -1);
    assert_eq!(crate::platform::errno(), libc::ENOTSUP);
}

#[test]
fn a_table_missing_an_entry_point_is_refused() {
    for layout in [TableLayout::Classic, TableLayout::Android17] {
        for &f in layout::fields(layout, size_of::<usize>()) {
            if f == Field::MallocInfo {
                continue;
            }
            let t = fake(layout, &[f]);
            // SAFETY: a fake table of that layout.
            let d = unsafe { read(core::ptr::from_ref(&t).cast(), layout) };
            assert!(d.is_none(), "{layout:?} without {f:?}");
        }
    }
}

unsafe extern "C" fn fake_realloc(pointer: *mut c_void, size: usize) -> *mut c_void {
    // Returns its arguments folded together so the test sees what arrived.
    pointer.wrapping_byte_add(size)
}

#[test]
fn classic_reallocarray_is_built_from_realloc() {
    let mut t = fake(TableLayout::Classic, &[]);
    let realloc_slot = layout::slot(TableLayout::Classic, size_of::<usize>(), Field::Realloc);
    t.0[realloc_slot.unwrap()] = fake_realloc as *const () as usize;
    // SAFETY: a fake classic table whose realloc is callable.
    let d = unsafe { read(core::ptr::from_ref(&t).cast(), TableLayout::Classic) }.unwrap();
    let base = core::ptr::without_provenance_mut::<c_void>(0x1000);
    // SAFETY: fake_realloc never dereferences.
    unsafe {
        assert_eq!(d.reallocarray(base, 3, 5) as usize, 0x1000 + 15);
        crate::platform::set_errno(0);
        assert!(d.reallocarray(base, usize::MAX, 2).is_null());
        assert_eq!(crate::platform::errno(), libc::ENOMEM);
    }
}

#[test]
fn release_rule_for_ilp32() {
    assert!(!android17_or_later(None, b""));
    assert!(!android17_or_later(Some(34), b"REL"));
    assert!(!android17_or_later(Some(36), b"REL"));
    assert!(!android17_or_later(Some(36), b""));
    assert!(android17_or_later(Some(36), b"CinnamonBun"));
    assert!(!android17_or_later(Some(35), b"Baklava"));
    assert!(android17_or_later(Some(37), b"REL"));
    assert_eq!(parse_decimal(b"37"), Some(37));
    assert_eq!(parse_decimal(b""), None);
    assert_eq!(parse_decimal(b"3a"), None);
}
