//! Demangling as current AOSP does it (docs/spec/android-versions.md#demangling; README.md,
//! "Differences from the reference"): names starting with `_Z` go through the process's `__cxa_demangle`, names starting with
//! `_R` (Rust v0 mangling) through the `rustc-demangle` crate in its alternate form (no
//! crate hashes), as libunwindstack's rustc-demangle C API prints them; any other name is
//! printed as is.
//!
//! `__cxa_demangle` is found by the symbolizer in the dynamic symbol table of a loaded C++
//! runtime (libstdc++ / libc++), never with `dlsym`: a failing `dlsym` makes glibc free its
//! previous error string, which was allocated through this library, while the thread is marked
//! as inside it (issue 20.1). `__cxa_demangle` itself mallocs and frees while the thread is
//! marked, so both go to the native allocator.

use core::ffi::{c_char, c_int};
use core::fmt::Write;

/// Longest name demangled; longer ones are printed raw (as the reference's buffer did).
pub const NAME_MAX: usize = 512;

type CxaDemangle =
    unsafe extern "C" fn(*const c_char, *mut c_char, *mut usize, *mut c_int) -> *mut c_char;

/// `name` demangled into `buf`, or `name` itself. `cxa` is `__cxa_demangle`'s address in a
/// module loaded now (0 when the process has none).
pub fn demangle<'a>(name: &'a [u8], cxa: usize, buf: &'a mut [u8; NAME_MAX]) -> &'a [u8] {
    if name.len() >= NAME_MAX {
        return name;
    }
    if name.starts_with(b"_Z") {
        return cxx(name, cxa, buf).unwrap_or(name);
    }
    if name.starts_with(b"_R") {
        return rust(name, buf).unwrap_or(name);
    }
    name
}

fn cxx<'a>(name: &[u8], cxa: usize, buf: &'a mut [u8; NAME_MAX]) -> Option<&'a [u8]> {
    if cxa == 0 {
        return None;
    }
    let mut cname = [0u8; NAME_MAX];
    cname[..name.len()].copy_from_slice(name);
    // SAFETY: `cxa` is the address of `__cxa_demangle` in a module mapped now (the symbolizer
    // found it in that module's dynamic symbol table).
    let func: CxaDemangle = unsafe { core::mem::transmute::<usize, CxaDemangle>(cxa) };
    let mut status: c_int = 0;
    // SAFETY: NUL-terminated input; a NULL output buffer makes it malloc the result.
    let out = unsafe {
        func(
            cname.as_ptr().cast(),
            core::ptr::null_mut(),
            core::ptr::null_mut(),
            &mut status,
        )
    };
    if out.is_null() {
        return None;
    }
    // SAFETY: a successful result is a NUL-terminated malloc'd string, freed right after (the
    // thread is marked, so both went to the native allocator).
    let len = unsafe {
        let s = crate::fmt::c_str_bytes(out);
        let n = s.len().min(buf.len());
        buf[..n].copy_from_slice(&s[..n]);
        libc::free(out.cast());
        n
    };
    (status == 0).then_some(&buf[..len])
}

/// Rust v0 (`_R`) names, printed like rustc-demangle's C API (`{:#}`). The crate is `no_std`
/// and formats without allocating; a name that does not fit the buffer is printed raw.
fn rust<'a>(name: &[u8], buf: &'a mut [u8; NAME_MAX]) -> Option<&'a [u8]> {
    let s = core::str::from_utf8(name).ok()?;
    let d = rustc_demangle::try_demangle(s).ok()?;
    let mut out = crate::fmt::StackBuf::<NAME_MAX>::new();
    write!(out, "{d:#}").ok()?;
    if out.truncated() {
        return None;
    }
    let n = out.len();
    buf[..n].copy_from_slice(out.as_bytes());
    Some(&buf[..n])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(name: &str) -> String {
        let mut buf = [0u8; NAME_MAX];
        String::from_utf8(demangle(name.as_bytes(), 0, &mut buf).to_vec()).unwrap()
    }

    #[test]
    fn rust_v0_names_are_demangled_as_rust() {
        assert_eq!(
            d("_RNvCs1234_7mycrate3foo"),
            "mycrate::foo",
            "crate hashes are left out, as rustc-demangle's C API does"
        );
        assert_eq!(
            d(
                "_RINbNbCskIICzLVDPPb_5alloc5alloc8box_freeDINbNiB4_5boxed5FnBoxuEp6OutputuEL_ECs1iopQbuBiw2_3std"
            ),
            "alloc::alloc::box_free::<dyn alloc::boxed::FnBox<(), Output = ()>>"
        );
    }

    #[test]
    fn other_names_are_printed_as_is() {
        for raw in [
            "i",
            "main",
            "_ZN3foo3barEv_without_demangler",
            "_Rbogus",
            "R_x",
            "__Z3foov",
        ] {
            assert_eq!(d(raw), raw);
        }
        let long = format!("_RNvCs1234_7mycrate{}{}", 600, "a".repeat(600));
        assert_eq!(d(&long), long);
    }
}
