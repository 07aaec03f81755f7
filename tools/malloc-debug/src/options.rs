//! The option string is checked by the library's own parser before anything runs: the CLI
//! `dlopen`s the libc_malloc_debug.so it is about to preload and calls its host-only extension
//! `malloc_debug_check_options` (README "Differences from the reference"), which parses as
//! `debug_initialize` does and initialises nothing. So an option error is reported with the
//! library's exact lines, and the CLI never keeps a second copy of the option table.

use std::ffi::{CStr, CString};
use std::path::Path;

use crate::{Result, err};

/// The option bits (the library's `config::bits`) the CLI needs.
pub const BACKTRACE: u64 = 0x4;

/// What the library said about an option string.
pub enum Checked {
    /// Valid: the option bits and the heap-dump prefix the options select.
    Valid { bits: u64, dump_prefix: String },
    /// Invalid: the ERROR lines the library would log, each ending in a newline.
    Invalid(String),
}

type CheckFn = unsafe extern "C" fn(
    options: *const libc::c_char,
    progname: *const libc::c_char,
    out: *mut libc::c_char,
    size: usize,
) -> i64;

fn dlerror() -> String {
    // SAFETY: dlerror returns null or a NUL-terminated string valid until the next dl* call,
    // copied out at once.
    unsafe {
        let e = libc::dlerror();
        if e.is_null() {
            "unknown error".to_string()
        } else {
            CStr::from_ptr(e).to_string_lossy().into_owned()
        }
    }
}

/// Checks `options` with the parser of the library at `lib`; `progname` is the name the
/// messages carry (the program's, as the library would log it).
pub fn check(lib: &Path, options: &str, progname: &str) -> Result<Checked> {
    use std::os::unix::ffi::OsStrExt;
    let c_lib = CString::new(lib.as_os_str().as_bytes())
        .map_err(|_| err!("{}: NUL in path", lib.display()))?;
    let c_options =
        CString::new(options).map_err(|_| err!("--options: NUL in the option string"))?;
    let c_prog = CString::new(progname.replace('\0', "")).unwrap_or_default();
    // SAFETY: NUL-terminated path. The library has no constructors: loading it only maps it.
    // RTLD_LOCAL keeps its symbols out of the CLI's global scope.
    let handle = unsafe { libc::dlopen(c_lib.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        return Err(err!(
            "cannot load {} to check the options: {}",
            lib.display(),
            dlerror()
        ));
    }
    // SAFETY: valid handle and NUL-terminated name.
    let sym = unsafe { libc::dlsym(handle, c"malloc_debug_check_options".as_ptr()) };
    if sym.is_null() {
        return Err(err!(
            "{} has no malloc_debug_check_options (a build of another project or an older \
             one?): cannot check the options",
            lib.display()
        ));
    }
    // SAFETY: the symbol is the library's export with exactly this signature (src/config/check.rs).
    let check: CheckFn = unsafe { std::mem::transmute::<*mut libc::c_void, CheckFn>(sym) };
    let mut out = vec![0u8; 4096];
    // SAFETY: NUL-terminated strings and a writable buffer of out.len() bytes.
    let rc = unsafe {
        check(
            c_options.as_ptr(),
            c_prog.as_ptr(),
            out.as_mut_ptr().cast(),
            out.len(),
        )
    };
    // The library stays loaded: unloading buys nothing in a short-lived CLI.
    let text = CStr::from_bytes_until_nul(&out)
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    Ok(if rc < 0 {
        Checked::Invalid(text)
    } else {
        Checked::Valid {
            bits: rc as u64,
            dump_prefix: text,
        }
    })
}
