//! Unit tests of the symbolizer (mod.rs).

use super::*;
use format::Resolver;

/// The cached fast-format line is the line `format::fast_line` renders, for one- to
/// three-digit frame numbers, first resolution and cache hits alike.
#[test]
fn cached_fast_lines_are_the_rendered_ones() {
    #[inline(never)]
    fn marker(x: usize) -> usize {
        x * 3 + 1
    }
    assert_eq!(marker(core::hint::black_box(2)), 7);
    let mut s = Symbolizer::new();
    for pc in [
        marker as *const () as usize + 1,
        libc::malloc as *const () as usize + 1,
        8,
    ] {
        for index in [0, 7, 10, 99, 100, 255, 0] {
            let mut cached = StackBuf::<1024>::new();
            s.fast_line(index, pc, &mut cached);
            let mut rendered = StackBuf::<1024>::new();
            s.resolve(pc, &mut |r| format::fast_line(&mut rendered, index, r));
            assert_eq!(cached.as_bytes(), rendered.as_bytes());
            assert!(cached.as_bytes().ends_with(b"\n"));
        }
    }
    let mut line = StackBuf::<1024>::new();
    s.fast_line(100, 8, &mut line);
    assert!(line.as_bytes().starts_with(b"          #100  pc "));
}

/// `__cxa_demangle` is found in a loaded C++ runtime without `dlsym`, at the address the
/// loader gives it.
#[test]
fn finds_cxa_demangle_in_a_loaded_cxx_runtime() {
    // SAFETY: plain dlopen/dlsym of a system library.
    let h = unsafe { libc::dlopen(c"libstdc++.so.6".as_ptr(), libc::RTLD_NOW) };
    if h.is_null() {
        return;
    }
    // SAFETY: as above.
    let want = unsafe { libc::dlsym(h, c"__cxa_demangle".as_ptr()) } as usize;
    let mut s = Symbolizer::new();
    s.read_maps();
    assert_eq!(s.cxa_demangle(), want);
    let mut buf = [0u8; NAME_MAX];
    assert_eq!(
        demangle::demangle(b"_ZN5outer6Leaker4makeEi", want, &mut buf),
        b"outer::Leaker::make(int)"
    );
}
