//! Leak suppressions in LeakSanitizer's format (the `leak_suppressions=FILE` extension, README
//! "Extensions"; docs/tools.md shows how to write one).
//!
//! A file holds one rule per line: `leak:PATTERN`; blank lines and lines starting with `#` are
//! ignored. A leak is suppressed when PATTERN matches the function name (demangled), the
//! module path or the source file of any frame of its allocation backtrace. Source files come
//! from the module's own DWARF line table (symbolize/lines.rs: not from separate
//! debug files, not from compressed sections), looked up only for frames whose name and module
//! matched no rule. As in LeakSanitizer, PATTERN matches
//! anywhere in the text unless it starts with `^` (anchored at the start) or ends with `$`
//! (anchored at the end), and `*` matches any run of characters. Without a backtrace (no
//! `backtrace` option) nothing can be suppressed.
//!
//! [`DEFAULTS`] are always applied with the extension: well-known one-time allocations of the
//! C and C++ run-times that are not leaks of the program.
//!
//! The file is read once, by `debug_initialize` (so a relative path means the directory the
//! program started in), into a private mapping that lives for the process.

use crate::fmt::{Bytes, StackBuf};
use core::sync::atomic::{AtomicUsize, Ordering};

/// The built-in rules (docs/tools.md "Suppressing leaks" lists them with the reasons).
pub const DEFAULTS: &str = "\
# glibc: dynamic TLS blocks, owned by the thread structures (glibc bug 12650)
leak:*tls_get_addr*
leak:^_dl_allocate_tls
leak:^_dl_resize_dtv
# libstdc++: the emergency exception-handling pool, allocated once at start-up
leak:^(anonymous namespace)::pool::pool
# glibc: per-process caches of locale data, iconv modules and NSS
leak:^_nl_find_locale
leak:^_nl_load_locale
leak:^__gconv_open
leak:^nss_load_library
";

/// Largest suppression file read.
const MAX_FILE: usize = 1 << 20;

/// The file's text (address and length in a mapping that is never unmapped).
static FILE_TEXT: AtomicUsize = AtomicUsize::new(0);
static FILE_LEN: AtomicUsize = AtomicUsize::new(0);

/// Called once by `debug_initialize` with the `leak_suppressions` option's value (empty: not
/// given). Problems are logged; the rules that could be read are kept.
pub fn load(path: &[u8]) {
    if path.is_empty() {
        return;
    }
    let Some(text) = read_file(path) else {
        crate::log::log_error!(
            "leak_suppressions: cannot read {}: {}",
            Bytes(path),
            crate::errors::strerror(crate::platform::errno())
        );
        return;
    };
    for (n, line) in text.split(|&b| b == b'\n').enumerate() {
        if rule(line).is_err() {
            crate::log::log_error!(
                "leak_suppressions: {}:{}: not a rule (expected leak:PATTERN): {}",
                Bytes(path),
                n + 1,
                Bytes(line)
            );
        }
    }
    FILE_TEXT.store(text.as_ptr() as usize, Ordering::Relaxed);
    FILE_LEN.store(text.len(), Ordering::Release);
}

/// Undoes [`load`] for a `debug_initialize` that gives up later: forgets the rules and gives
/// the file's mapping back.
pub fn unload() {
    FILE_LEN.store(0, Ordering::Release);
    let text = FILE_TEXT.swap(0, Ordering::AcqRel);
    if let Some(text) = core::ptr::NonNull::new(text as *mut u8) {
        // SAFETY: `read_file`'s mapping of MAX_FILE bytes; nothing reads it before initialize
        // succeeds, and it has not.
        unsafe { crate::pages::unmap(text, MAX_FILE) };
    }
}

fn read_file(path: &[u8]) -> Option<&'static [u8]> {
    let mut c_path = StackBuf::<4096>::new();
    c_path.push_bytes(path);
    if c_path.truncated() || c_path.len() == 4096 {
        return None;
    }
    // SAFETY: a NUL-terminated path on our stack.
    let fd = unsafe { libc::open(c_path.as_c_str(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    let buf = crate::pages::map(MAX_FILE);
    let mut len = 0;
    if let Some(buf) = buf {
        while len < MAX_FILE {
            // SAFETY: reads into the unused tail of our mapping.
            let n = unsafe { libc::read(fd, buf.as_ptr().add(len).cast(), MAX_FILE - len) };
            if n < 0 && crate::platform::errno() == libc::EINTR {
                continue;
            }
            if n <= 0 {
                break;
            }
            len += n as usize;
        }
    }
    // SAFETY: our descriptor.
    unsafe { libc::close(fd) };
    // SAFETY: `len` bytes read into a mapping that is never unmapped.
    buf.map(|b| unsafe { core::slice::from_raw_parts(b.as_ptr().cast_const(), len) })
}

/// The pattern of one line: `Ok(None)` for blanks and comments, `Err` for anything else that is
/// not `leak:PATTERN`.
fn rule(line: &[u8]) -> Result<Option<&[u8]>, ()> {
    let line = line.trim_ascii();
    if line.is_empty() || line.starts_with(b"#") {
        return Ok(None);
    }
    match line.strip_prefix(b"leak:") {
        Some(p) if !p.trim_ascii().is_empty() => Ok(Some(p.trim_ascii())),
        _ => Err(()),
    }
}

/// Every pattern: the defaults, then the file's.
pub fn for_each_pattern(mut f: impl FnMut(&[u8]) -> bool) -> bool {
    let len = FILE_LEN.load(Ordering::Acquire);
    let file: &[u8] = if len == 0 {
        &[]
    } else {
        // SAFETY: stored by `load` from a mapping that lives for the process.
        unsafe { core::slice::from_raw_parts(FILE_TEXT.load(Ordering::Relaxed) as *const u8, len) }
    };
    for text in [DEFAULTS.as_bytes(), file] {
        for line in text.split(|&b| b == b'\n') {
            if let Ok(Some(p)) = rule(line)
                && f(p)
            {
                return true;
            }
        }
    }
    false
}

/// Whether any frame of `frames` matches a rule: its function name, its module path, or its
/// source file (from the module's own line table; symbolize/lines.rs says what is read).
pub fn suppressed(frames: &[usize]) -> bool {
    frames.iter().any(|&pc| {
        let mut hit = false;
        crate::backtrace::describe_frame(pc, &mut |d| {
            hit = for_each_pattern(|p| {
                (!d.function.is_empty() && matches(p, d.function))
                    || (!d.map_name.is_empty() && matches(p, d.map_name))
            });
        });
        if !hit {
            crate::backtrace::frame_source_file(pc, &mut |file| {
                hit = !file.is_empty() && for_each_pattern(|p| matches(p, file));
            });
        }
        hit
    })
}

/// LeakSanitizer's template match: `*` is any run of bytes; the pattern may match anywhere
/// unless anchored with a leading `^` or a trailing `$`.
pub fn matches(pattern: &[u8], text: &[u8]) -> bool {
    let (anchored_start, p) = match pattern.strip_prefix(b"^") {
        Some(p) => (true, p),
        None => (false, pattern),
    };
    let (anchored_end, p) = match p.strip_suffix(b"$") {
        Some(p) => (true, p),
        None => (false, p),
    };
    // Unanchored ends behave as if a `*` were there.
    glob(p, text, !anchored_start, !anchored_end)
}

/// Glob match of `p` (only `*` is special) against all of `t`, with an implicit `*` before
/// and/or after `p`. Iterative with one backtrack point: linear in practice, never recursive.
fn glob(p: &[u8], t: &[u8], star_before: bool, star_after: bool) -> bool {
    let (mut pi, mut ti) = (0usize, 0usize);
    // After the last `*` seen: where in p, and the text position it is trying to absorb up to.
    let mut star: Option<(usize, usize)> = star_before.then_some((0, 0));
    loop {
        if pi == p.len() && (ti == t.len() || star_after) {
            return true;
        }
        if pi < p.len() && p[pi] == b'*' {
            pi += 1;
            star = Some((pi, ti));
            continue;
        }
        if pi < p.len() && ti < t.len() && p[pi] == t[ti] {
            pi += 1;
            ti += 1;
            continue;
        }
        match star {
            Some((sp, st)) if st < t.len() => {
                star = Some((sp, st + 1));
                pi = sp;
                ti = st + 1;
            }
            _ => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lsan_template_semantics() {
        // Unanchored: anywhere.
        assert!(matches(b"foo", b"foo"));
        assert!(matches(b"foo", b"xfooy"));
        assert!(!matches(b"foo", b"fo"));
        // Anchors.
        assert!(matches(b"^foo", b"foobar"));
        assert!(!matches(b"^foo", b"xfoo"));
        assert!(matches(b"bar$", b"foobar"));
        assert!(!matches(b"bar$", b"barx"));
        assert!(matches(b"^foo$", b"foo"));
        assert!(!matches(b"^foo$", b"foox"));
        // Stars.
        assert!(matches(b"a*c", b"xxabbbcyy"));
        assert!(matches(b"^a*c$", b"abbbc"));
        assert!(!matches(b"^a*c$", b"abbbcd"));
        assert!(matches(b"*tls_get_addr*", b"__tls_get_addr"));
        assert!(matches(b"^std::*::alloc", b"std::vector<int>::alloc"));
        assert!(matches(b"libfoo.so", b"/usr/lib/libfoo.so.1"));
        assert!(matches(b"/usr/lib/*foo*$", b"/usr/lib/libfoo.so"));
        assert!(!matches(b"^/lib/", b"/usr/lib/libfoo.so"));
        // Backtracking past a false start.
        assert!(!matches(b"^aab", b"aaab"));
        assert!(matches(b"aab", b"aaab"));
        assert!(matches(b"^*aab$", b"aaab"));
        assert!(matches(b"", b"anything"));
    }

    #[test]
    fn rule_lines() {
        assert_eq!(rule(b"leak:foo"), Ok(Some(&b"foo"[..])));
        assert_eq!(rule(b"  leak:  foo bar  "), Ok(Some(&b"foo bar"[..])));
        assert_eq!(rule(b"# comment"), Ok(None));
        assert_eq!(rule(b"   "), Ok(None));
        assert_eq!(rule(b"race:foo"), Err(()));
        assert_eq!(rule(b"leak:"), Err(()));
        assert_eq!(rule(b"foo"), Err(()));
    }

    #[test]
    fn defaults_are_all_rules() {
        for line in DEFAULTS.lines() {
            assert!(rule(line.as_bytes()).is_ok(), "{line}");
        }
        let mut n = 0;
        for_each_pattern(|_| {
            n += 1;
            false
        });
        assert!(n >= 5);
    }
}
