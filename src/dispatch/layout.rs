//! Where each native entry point sits in the `MallocDispatch` table libc hands to
//! `debug_initialize`, for both table layouts and both pointer widths (README "Android 17's
//! dispatch table"). Android 17 inserts `reallocarray` right after `realloc`, so every later
//! field moves one slot; the table is 32-byte aligned, so its size is the slots rounded up to 32.
//!
//! Pure data, no dependencies: tests/abi.rs includes this file to compare it with the C header
//! (names, offsets and sizes are for the tests; the library itself needs only the slots).
#![allow(dead_code)]

/// One entry point of the table.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Field {
    Calloc,
    Free,
    Mallinfo,
    Malloc,
    MallocUsableSize,
    Memalign,
    PosixMemalign,
    /// ILP32 only.
    Pvalloc,
    Realloc,
    /// Android 17 only.
    Reallocarray,
    /// ILP32 only.
    Valloc,
    MallocIterate,
    MallocDisable,
    MallocEnable,
    Mallopt,
    AlignedAlloc,
    /// Missing from Android 9's table (its slot is padding there).
    MallocInfo,
}

impl Field {
    /// The C field name (bionic's `MallocDispatch` and ffi/include/malloc_debug.h).
    pub const fn name(self) -> &'static str {
        match self {
            Field::Calloc => "calloc",
            Field::Free => "free",
            Field::Mallinfo => "mallinfo",
            Field::Malloc => "malloc",
            Field::MallocUsableSize => "malloc_usable_size",
            Field::Memalign => "memalign",
            Field::PosixMemalign => "posix_memalign",
            Field::Pvalloc => "pvalloc",
            Field::Realloc => "realloc",
            Field::Reallocarray => "reallocarray",
            Field::Valloc => "valloc",
            Field::MallocIterate => "malloc_iterate",
            Field::MallocDisable => "malloc_disable",
            Field::MallocEnable => "malloc_enable",
            Field::Mallopt => "mallopt",
            Field::AlignedAlloc => "aligned_alloc",
            Field::MallocInfo => "malloc_info",
        }
    }
}

/// Which table libc passed: decided at run time (`super::detect`), since nothing in the call
/// says so.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum TableLayout {
    /// Android 9 to 16: no `reallocarray` slot.
    Classic,
    /// Android 17: `reallocarray` right after `realloc`.
    Android17,
}

use Field::*;

const CLASSIC_LP64: &[Field] = &[
    Calloc,
    Free,
    Mallinfo,
    Malloc,
    MallocUsableSize,
    Memalign,
    PosixMemalign,
    Realloc,
    MallocIterate,
    MallocDisable,
    MallocEnable,
    Mallopt,
    AlignedAlloc,
    MallocInfo,
];
const ANDROID17_LP64: &[Field] = &[
    Calloc,
    Free,
    Mallinfo,
    Malloc,
    MallocUsableSize,
    Memalign,
    PosixMemalign,
    Realloc,
    Reallocarray,
    MallocIterate,
    MallocDisable,
    MallocEnable,
    Mallopt,
    AlignedAlloc,
    MallocInfo,
];
const CLASSIC_ILP32: &[Field] = &[
    Calloc,
    Free,
    Mallinfo,
    Malloc,
    MallocUsableSize,
    Memalign,
    PosixMemalign,
    Pvalloc,
    Realloc,
    Valloc,
    MallocIterate,
    MallocDisable,
    MallocEnable,
    Mallopt,
    AlignedAlloc,
    MallocInfo,
];
const ANDROID17_ILP32: &[Field] = &[
    Calloc,
    Free,
    Mallinfo,
    Malloc,
    MallocUsableSize,
    Memalign,
    PosixMemalign,
    Pvalloc,
    Realloc,
    Reallocarray,
    Valloc,
    MallocIterate,
    MallocDisable,
    MallocEnable,
    Mallopt,
    AlignedAlloc,
    MallocInfo,
];

/// The table's fields in order, for a pointer size of 8 (LP64) or 4 (ILP32).
pub const fn fields(layout: TableLayout, pointer_size: usize) -> &'static [Field] {
    match (layout, pointer_size == 8) {
        (TableLayout::Classic, true) => CLASSIC_LP64,
        (TableLayout::Android17, true) => ANDROID17_LP64,
        (TableLayout::Classic, false) => CLASSIC_ILP32,
        (TableLayout::Android17, false) => ANDROID17_ILP32,
    }
}

/// The field's slot (pointer index), `None` when the layout has no such field.
pub fn slot(layout: TableLayout, pointer_size: usize, field: Field) -> Option<usize> {
    fields(layout, pointer_size)
        .iter()
        .position(|&f| f == field)
}

/// The field's byte offset.
pub fn offset(layout: TableLayout, pointer_size: usize, field: Field) -> Option<usize> {
    slot(layout, pointer_size, field).map(|s| s * pointer_size)
}

/// `sizeof(MallocDispatch)`: the slots rounded up to the 32-byte alignment.
pub const fn size(layout: TableLayout, pointer_size: usize) -> usize {
    (fields(layout, pointer_size).len() * pointer_size).div_ceil(32) * 32
}

/// The LP64 slot that tells the layouts apart: padding (zero) in every classic table — 14
/// pointers, or 13 on Android 9, padded to 128 bytes — and `malloc_info` in Android 17's.
pub const LP64_PROBE_SLOT: usize = 14;
