//! `MallocDispatch`: the native allocator's entry points, as libc hands them to
//! `debug_initialize` (abi-and-dumps §2.1). Field order and the 32-byte alignment are ABI.
//!
//! The library keeps the *pointer* it was given and reads one field at a time: Android 9's table
//! ends before `malloc_info`, so copying the whole struct could read past its end.

use core::ffi::{c_int, c_void};

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

#[repr(C, align(32))]
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
    #[cfg(target_pointer_width = "32")]
    pub valloc: unsafe extern "C" fn(usize) -> *mut c_void,
    pub malloc_iterate: unsafe extern "C" fn(usize, usize, IterateCallback, *mut c_void) -> c_int,
    pub malloc_disable: unsafe extern "C" fn(),
    pub malloc_enable: unsafe extern "C" fn(),
    pub mallopt: unsafe extern "C" fn(c_int, c_int) -> c_int,
    pub aligned_alloc: unsafe extern "C" fn(usize, usize) -> *mut c_void,
    pub malloc_info: unsafe extern "C" fn(c_int, *mut libc::FILE) -> c_int,
}

/// `mallopt` parameters the library issues itself (abi-and-dumps §3).
pub const M_PURGE_ALL: c_int = -104;
pub const M_LOG_STATS: c_int = -205;

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::{align_of, offset_of, size_of};

    #[test]
    fn layout_matches_bionic() {
        let p = size_of::<usize>();
        assert_eq!(align_of::<MallocDispatch>(), 32);
        assert_eq!(offset_of!(MallocDispatch, calloc), 0);
        assert_eq!(offset_of!(MallocDispatch, free), p);
        assert_eq!(offset_of!(MallocDispatch, malloc_usable_size), 4 * p);
        assert_eq!(offset_of!(MallocDispatch, posix_memalign), 6 * p);
        if p == 8 {
            assert_eq!(offset_of!(MallocDispatch, realloc), 56);
            assert_eq!(offset_of!(MallocDispatch, malloc_iterate), 64);
            assert_eq!(offset_of!(MallocDispatch, malloc_info), 104);
            assert_eq!(size_of::<MallocDispatch>(), 128);
        }
    }
}
