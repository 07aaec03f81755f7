//! `MallocDispatch`: the native allocator's entry points, as libc hands them to
//! `debug_initialize` (docs/spec/abi.md#mallocdispatch), and the library's own copy of them.
//!
//! libc's table has two layouts (`layout`): Android 17 inserts `reallocarray` after `realloc`,
//! which moves every later field. Nothing in `debug_initialize` says which one libc passed, so
//! `adopt` decides once (`detect`) and copies every field it knows is there, by slot, into the
//! library's `MallocDispatch`; the rest of the library only ever calls through that copy, so no
//! call can go through a slot of the other layout. Reads stay inside the table in both layouts
//! (Android 9's ends before `malloc_info`: that slot is its padding, zero, and the copy gets a
//! stand-in). README "Android 17's dispatch table" describes the decision.

pub mod layout;

pub use layout::{Field, TableLayout};

use core::cell::UnsafeCell;
use core::ffi::{c_int, c_void};
use core::mem::MaybeUninit;
use core::sync::atomic::{AtomicPtr, Ordering};

/// `struct mallinfo` as the native allocator returns it. Bionic's has ten `size_t` fields;
/// glibc's (the host front passes glibc's `mallinfo`) has ten `int` fields.
#[cfg(target_os = "android")]
pub type MallinfoField = usize;
#[cfg(not(target_os = "android"))]
pub type MallinfoField = c_int;

#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct Mallinfo {
    pub arena: MallinfoField,
    pub ordblks: MallinfoField,
    pub smblks: MallinfoField,
    pub hblks: MallinfoField,
    pub hblkhd: MallinfoField,
    pub usmblks: MallinfoField,
    pub fsmblks: MallinfoField,
    pub uordblks: MallinfoField,
    pub fordblks: MallinfoField,
    pub keepcost: MallinfoField,
}

/// The callback `malloc_iterate` calls for every allocation: `(base, size, arg)`.
pub type IterateCallback = Option<unsafe extern "C" fn(usize, usize, *mut c_void)>;

pub type ReallocarrayFn = unsafe extern "C" fn(*mut c_void, usize, usize) -> *mut c_void;

/// The native entry points, copied out of libc's table by `adopt` (field names as in bionic).
pub struct MallocDispatch {
    pub calloc: unsafe extern "C" fn(usize, usize) -> *mut c_void,
    pub free: unsafe extern "C" fn(*mut c_void),
    pub mallinfo: unsafe extern "C" fn() -> Mallinfo,
    pub malloc: unsafe extern "C" fn(usize) -> *mut c_void,
    pub malloc_usable_size: unsafe extern "C" fn(*const c_void) -> usize,
    pub memalign: unsafe extern "C" fn(usize, usize) -> *mut c_void,
    pub posix_memalign: unsafe extern "C" fn(*mut *mut c_void, usize, usize) -> c_int,
    #[cfg(target_pointer_width = "32")]
    pub pvalloc: unsafe extern "C" fn(usize) -> *mut c_void,
    pub realloc: unsafe extern "C" fn(*mut c_void, usize) -> *mut c_void,
    /// Android 17's tables only: see `reallocarray`.
    reallocarray: Option<ReallocarrayFn>,
    #[cfg(target_pointer_width = "32")]
    pub valloc: unsafe extern "C" fn(usize) -> *mut c_void,
    pub malloc_iterate: unsafe extern "C" fn(usize, usize, IterateCallback, *mut c_void) -> c_int,
    pub malloc_disable: unsafe extern "C" fn(),
    pub malloc_enable: unsafe extern "C" fn(),
    pub mallopt: unsafe extern "C" fn(c_int, c_int) -> c_int,
    pub aligned_alloc: unsafe extern "C" fn(usize, usize) -> *mut c_void,
    /// Android 9 has none: `no_malloc_info` stands in.
    pub malloc_info: unsafe extern "C" fn(c_int, *mut libc::FILE) -> c_int,
}

impl MallocDispatch {
    /// The native `reallocarray`: the table's own on Android 17; elsewhere the same contract
    /// built from the native `realloc` (only our own export calls it there, libc never does).
    ///
    /// # Safety
    /// `realloc`'s contract: `pointer` is null or a live block of the native allocator.
    pub unsafe fn reallocarray(
        &self,
        pointer: *mut c_void,
        nmemb: usize,
        size: usize,
    ) -> *mut c_void {
        if let Some(f) = self.reallocarray {
            // SAFETY: the caller's arguments, to the table's own reallocarray.
            return unsafe { f(pointer, nmemb, size) };
        }
        match nmemb.checked_mul(size) {
            // SAFETY: as above, through realloc.
            Some(bytes) => unsafe { (self.realloc)(pointer, bytes) },
            None => {
                crate::platform::set_errno(libc::ENOMEM);
                core::ptr::null_mut()
            }
        }
    }
}

/// libc's table, opaque: which fields it has depends on `TableLayout`.
#[repr(C)]
pub struct LibcDispatch {
    _opaque: [usize; 0],
}

/// Which layout `table` has. LP64: the probe slot (inside both layouts' 128 bytes) is zero
/// padding in every classic table and `malloc_info` in Android 17's. ILP32 tables have no padding
/// to tell by (the classic one is exactly 64 bytes), so the device's release decides.
///
/// # Safety
/// `table` points to libc's table (either layout).
pub unsafe fn detect(table: *const LibcDispatch) -> TableLayout {
    if cfg!(target_pointer_width = "64") {
        // SAFETY: offset 112 lies inside the table in both layouts (sizeof is 128 in both).
        let probe = unsafe { table.cast::<usize>().add(layout::LP64_PROBE_SLOT).read() };
        if probe != 0 {
            TableLayout::Android17
        } else {
            TableLayout::Classic
        }
    } else if release_has_reallocarray_slot() {
        TableLayout::Android17
    } else {
        TableLayout::Classic
    }
}

/// ILP32: is this libc Android 17 or later? From the build properties libc itself reads
/// (`ro.build.version.sdk`, and the codename of pre-release builds).
#[cfg(all(target_os = "android", target_pointer_width = "32"))]
fn release_has_reallocarray_slot() -> bool {
    let mut sdk = [0u8; 92];
    let mut codename = [0u8; 92];
    // SAFETY: NUL-terminated names; 92 = PROP_VALUE_MAX, the most either call writes.
    let (sdk_len, codename_len) = unsafe {
        (
            libc::__system_property_get(c"ro.build.version.sdk".as_ptr(), sdk.as_mut_ptr().cast()),
            libc::__system_property_get(
                c"ro.build.version.codename".as_ptr(),
                codename.as_mut_ptr().cast(),
            ),
        )
    };
    let sdk = &sdk[..sdk_len.clamp(0, 91) as usize];
    let codename = &codename[..codename_len.clamp(0, 91) as usize];
    android17_or_later(parse_decimal(sdk), codename)
}

#[cfg(not(all(target_os = "android", target_pointer_width = "32")))]
fn release_has_reallocarray_slot() -> bool {
    false
}

/// (Used by ILP32 Android builds; tested everywhere.)
/// Android 17 is API level 37; its pre-release builds report the previous level (36) with a
/// codename other than "REL".
#[cfg_attr(
    not(all(target_os = "android", target_pointer_width = "32")),
    allow(dead_code)
)]
pub fn android17_or_later(sdk: Option<u32>, codename: &[u8]) -> bool {
    match sdk {
        Some(level) if level >= 37 => true,
        Some(36) => !codename.is_empty() && codename != b"REL",
        _ => false,
    }
}

#[cfg_attr(
    not(all(target_os = "android", target_pointer_width = "32")),
    allow(dead_code)
)]
pub fn parse_decimal(digits: &[u8]) -> Option<u32> {
    if digits.is_empty() || digits.len() > 9 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(digits.iter().fold(0, |n, d| n * 10 + u32::from(d - b'0')))
}

/// Copies libc's table (in `layout`) field by field. `None` when an entry point every libc
/// provides is missing (a null slot): calling it would crash.
///
/// # Safety
/// `table` points to a table of that layout.
pub unsafe fn read(table: *const LibcDispatch, layout: TableLayout) -> Option<MallocDispatch> {
    /// The field's entry point, `None` when the layout has no such field or its slot is null.
    ///
    /// # Safety
    /// `F` is the function-pointer type of `field` (so `Option<F>` is one nullable pointer).
    unsafe fn slot<F: Copy>(
        table: *const LibcDispatch,
        layout: TableLayout,
        field: Field,
    ) -> Option<F> {
        const { assert!(size_of::<Option<F>>() == size_of::<usize>()) };
        let i = layout::slot(layout, size_of::<usize>(), field)?;
        // SAFETY: the layout has the field, so its slot lies inside libc's table and holds that
        // field's entry point (or null), of the type `F` the caller names.
        unsafe { table.cast::<Option<F>>().add(i).read() }
    }
    macro_rules! entry {
        ($field:expr) => {
            // SAFETY: each field of `MallocDispatch` has the type of bionic's field.
            unsafe { slot(table, layout, $field) }?
        };
    }
    Some(MallocDispatch {
        calloc: entry!(Field::Calloc),
        free: entry!(Field::Free),
        mallinfo: entry!(Field::Mallinfo),
        malloc: entry!(Field::Malloc),
        malloc_usable_size: entry!(Field::MallocUsableSize),
        memalign: entry!(Field::Memalign),
        posix_memalign: entry!(Field::PosixMemalign),
        #[cfg(target_pointer_width = "32")]
        pvalloc: entry!(Field::Pvalloc),
        realloc: entry!(Field::Realloc),
        reallocarray: match layout {
            TableLayout::Classic => None,
            TableLayout::Android17 => Some(entry!(Field::Reallocarray)),
        },
        #[cfg(target_pointer_width = "32")]
        valloc: entry!(Field::Valloc),
        malloc_iterate: entry!(Field::MallocIterate),
        malloc_disable: entry!(Field::MallocDisable),
        malloc_enable: entry!(Field::MallocEnable),
        mallopt: entry!(Field::Mallopt),
        aligned_alloc: entry!(Field::AlignedAlloc),
        // SAFETY: as in `entry!`; Android 9's slot is zero padding.
        malloc_info: unsafe { slot(table, layout, Field::MallocInfo) }.unwrap_or(no_malloc_info),
    })
}

/// Android 9's missing `malloc_info` (its libc never calls ours there).
unsafe extern "C" fn no_malloc_info(_options: c_int, _fp: *mut libc::FILE) -> c_int {
    crate::platform::set_errno(libc::ENOTSUP);
    -1
}

struct Adopted(UnsafeCell<MaybeUninit<MallocDispatch>>);
// SAFETY: written once by the initialising thread before `ADOPTED_FROM` publishes it, only read
// afterwards.
unsafe impl Sync for Adopted {}
static ADOPTED: Adopted = Adopted(UnsafeCell::new(MaybeUninit::uninit()));
static ADOPTED_FROM: AtomicPtr<LibcDispatch> = AtomicPtr::new(core::ptr::null_mut());

/// The library's copy of libc's table, made on the first call; later calls (a `debug_initialize`
/// retried after a failure) get the same copy for the same table, and `None` for another one
/// (the copy may be in use) or for an incomplete table.
///
/// # Safety
/// `table` points to libc's table, valid for the process lifetime; calls are not concurrent
/// (`debug_initialize` runs them under its once-only guard).
pub unsafe fn adopt(table: *const LibcDispatch) -> Option<&'static MallocDispatch> {
    let from = ADOPTED_FROM.load(Ordering::Acquire);
    if !from.is_null() {
        // SAFETY: non-null only once ADOPTED was written.
        return (from.cast_const() == table)
            .then(|| unsafe { (*ADOPTED.0.get()).assume_init_ref() });
    }
    // SAFETY: the caller's table; `detect` picks the layout `read` is allowed to assume.
    let copy = unsafe { read(table, detect(table)) }?;
    // SAFETY: single writer (see above); nothing reads ADOPTED before the store below.
    let copy = unsafe { (*ADOPTED.0.get()).write(copy) };
    ADOPTED_FROM.store(table.cast_mut(), Ordering::Release);
    Some(copy)
}

/// Unit tests: the test process's own allocator as the native table.
#[cfg(test)]
pub fn for_tests() -> &'static MallocDispatch {
    unsafe extern "C" fn mallinfo() -> Mallinfo {
        // SAFETY: an all-zero Mallinfo is a valid value of the plain integer struct.
        unsafe { core::mem::zeroed() }
    }
    unsafe extern "C" fn no_iterate(
        _: usize,
        _: usize,
        _: IterateCallback,
        _: *mut c_void,
    ) -> c_int {
        0
    }
    unsafe extern "C" fn nothing() {}
    unsafe extern "C" fn usable(p: *const c_void) -> usize {
        // SAFETY: the caller's block of the test process's allocator.
        unsafe { libc::malloc_usable_size(p.cast_mut()) }
    }
    unsafe extern "C" fn mallopt(_: c_int, _: c_int) -> c_int {
        1
    }
    static TABLE: MallocDispatch = MallocDispatch {
        calloc: libc::calloc,
        free: libc::free,
        mallinfo,
        malloc: libc::malloc,
        malloc_usable_size: usable,
        memalign: libc::memalign,
        posix_memalign: libc::posix_memalign,
        #[cfg(target_pointer_width = "32")]
        pvalloc: libc::pvalloc,
        realloc: libc::realloc,
        reallocarray: None,
        #[cfg(target_pointer_width = "32")]
        valloc: libc::valloc,
        malloc_iterate: no_iterate,
        malloc_disable: nothing,
        malloc_enable: nothing,
        mallopt,
        aligned_alloc: libc::aligned_alloc,
        malloc_info: no_malloc_info,
    };
    &TABLE
}

/// `mallopt` parameters the library issues itself (docs/spec/abi.md#mallocdispatch).
pub const M_PURGE_ALL: c_int = -104;
pub const M_LOG_STATS: c_int = -205;

#[cfg(test)]
mod tests;
