//! Capture tests on the real stack of the test process, and the capture benchmark
//! (`scripts/bench-unwind`; an ignored test, never part of the normal run).

use super::cache::CACHE;
use super::memo;
use super::*;
use crate::symbolize::format::Resolver;
use crate::symbolize::maps::{Maps, PROT_EXEC};
use core::ffi::c_void;
use core::sync::atomic::Ordering;
use std::hint::black_box;

unsafe extern "C" {
    fn _Unwind_FindEnclosingFunction(pc: *mut c_void) -> *mut c_void;
}

/// Start of the function containing `pc` according to its FDE.
fn function_of(pc: usize) -> usize {
    // SAFETY: the unwinder only looks the address up.
    unsafe { _Unwind_FindEnclosingFunction(pc as *mut c_void) as usize }
}

/// Same frame layout as `capture`, through the `unwinding` crate only.
#[inline(never)]
fn capture_full(frames: &mut [usize]) -> usize {
    black_box(walk::full_walk(frames))
}

#[derive(Debug)]
struct Shot {
    cold: Vec<usize>,
    warm: Vec<usize>,
    full: Vec<usize>,
}

#[inline(never)]
fn level3(clear: bool) -> Shot {
    let mut f = [0usize; 64];
    if clear {
        CACHE.clear();
        super::memo::MEMOS.clear();
    }
    let n = capture(&mut f);
    let cold = f[..n].to_vec();
    let n = capture(&mut f);
    let warm = f[..n].to_vec();
    let n = capture_full(&mut f);
    let full = f[..n].to_vec();
    black_box(Shot { cold, warm, full })
}

#[inline(never)]
fn level2(clear: bool) -> Shot {
    black_box(level3(black_box(clear)))
}

#[inline(never)]
fn level1(clear: bool) -> Shot {
    black_box(level2(black_box(clear)))
}

#[test]
fn first_frames_are_the_callers() {
    let shot = level1(false);
    for frames in [&shot.cold, &shot.warm, &shot.full] {
        assert!(frames.len() >= 4, "{frames:x?}");
        assert_eq!(function_of(frames[0]), level3 as *const () as usize);
        assert_eq!(function_of(frames[1]), level2 as *const () as usize);
        assert_eq!(function_of(frames[2]), level1 as *const () as usize);
        assert_eq!(
            function_of(frames[3]),
            first_frames_are_the_callers as *const () as usize
        );
    }
}

#[test]
fn warm_cold_and_full_unwinder_agree() {
    let shot = level1(true);
    // The three captures sit at different call sites inside level3; the rest is identical.
    assert_eq!(shot.cold[1..], shot.warm[1..]);
    assert_eq!(shot.cold.len(), shot.full.len(), "{shot:x?}");
    assert_eq!(shot.cold[1..], shot.full[1..]);
    // Steady state: the same stack (same call sites) gives the same frames again.
    let mut shots = vec![];
    for i in 0..black_box(3) {
        shots.push(level1(black_box(i == 0)));
    }
    for s in &shots {
        assert_eq!(s.cold, shots[0].cold);
        assert_eq!(s.warm, shots[0].warm);
        assert_eq!(s.full, shots[0].full);
    }
}

/// Two shapes of recursion that reach the same stack depth through different functions, so
/// that their captures pass the same stack depths but differ in their frames.
#[inline(never)]
fn shape_a(depth: usize, at_bottom: &mut dyn FnMut()) {
    if depth == 0 {
        at_bottom();
    } else {
        shape_a(black_box(depth - 1), at_bottom);
    }
    black_box(());
}

#[inline(never)]
fn shape_b(depth: usize, at_bottom: &mut dyn FnMut()) {
    if depth == 0 {
        at_bottom();
    } else {
        shape_b(black_box(depth - 1), at_bottom);
    }
    black_box(());
}

/// Mixes of shapes: (which, depth, then the other at depth2) so that chains share a prefix.
fn capture_in_shape(shape: usize, depth: usize, len: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let mut grab = || {
        let mut f = [0usize; 64];
        let n = capture(&mut f[..len]);
        out = f[..n].to_vec();
    };
    match shape % 4 {
        0 => shape_a(depth, &mut grab),
        1 => shape_b(depth, &mut grab),
        2 => shape_a(depth, &mut || shape_b(3, &mut grab)),
        _ => shape_b(depth, &mut || shape_a(3, &mut grab)),
    }
    out
}

/// Captures in a shape four times from one call site: first with the memos bypassed (the
/// plain walk), then with them (the first may create the memo, the next ones replay it).
/// (`OFF` is process-wide: other tests' captures meanwhile merely skip memos.)
#[inline(never)]
fn shots(shape: usize, depth: usize, len: usize) -> Vec<Vec<usize>> {
    let mut out = Vec::new();
    // Not unrolled (black_box): one call site for all four.
    for i in 0..black_box(4) {
        memo::OFF.store(i == 0, Ordering::Relaxed);
        out.push(capture_in_shape(shape, depth, len));
    }
    memo::OFF.store(false, Ordering::Relaxed);
    out
}

fn memo_agrees_on(shapes: &[(usize, usize, usize)]) {
    for &(shape, depth, len) in shapes {
        let shots = shots(shape, depth, len);
        for (round, got) in shots.iter().enumerate().skip(1) {
            assert_eq!(
                got, &shots[0],
                "shape {shape} depth {depth} len {len} round {round}"
            );
        }
    }
}

#[test]
fn memos_replay_exactly_what_the_walk_finds() {
    let hits = memo::HITS.load(Ordering::Relaxed);
    let mut shapes = Vec::new();
    for depth in [0, 1, 2, 5, 9] {
        for shape in 0..4 {
            for len in [1, 3, 16, 40] {
                shapes.push((shape, depth, len));
            }
        }
    }
    memo_agrees_on(&shapes);
    // Same shapes again in another order: memos made with a small buffer are not used for a
    // larger one, and the ones of other shapes at the same depth are told apart.
    shapes.reverse();
    memo_agrees_on(&shapes);
    assert!(
        memo::HITS.load(Ordering::Relaxed) > hits + shapes.len(),
        "memos were used"
    );
}

/// Two frame functions that call each other in the order the bits of `path` say: 2^depth
/// different stacks above one start (benches/stack_mix.c's shape).
#[inline(never)]
fn branch_a(path: usize, depth: usize, at_bottom: &mut dyn FnMut()) {
    branch_next(path, depth, at_bottom);
    black_box(());
}

#[inline(never)]
fn branch_b(path: usize, depth: usize, at_bottom: &mut dyn FnMut()) {
    branch_next(path, depth, at_bottom);
    black_box(());
}

#[inline(always)]
fn branch_next(path: usize, depth: usize, at_bottom: &mut dyn FnMut()) {
    if depth == 0 {
        at_bottom();
    } else if path & 1 == 0 {
        branch_a(black_box(path >> 1), depth - 1, at_bottom);
    } else {
        branch_b(black_box(path >> 1), depth - 1, at_bottom);
    }
}

#[test]
fn branching_stacks_give_the_plain_walks_frames_whether_memos_thrash_or_not() {
    // 256 stacks that share their first frames: far more continuations of one memo start than
    // a set holds, so the set's memos thrash and are left alone, with a probe now and then.
    // Round 0 walks without memos; one call site for every round, so that the frames above
    // the branching part are the same.
    let mut plain: Vec<Vec<usize>> = Vec::new();
    let left_alone = memo::LEFT_ALONE.load(Ordering::Relaxed);
    for round in 0..black_box(11) {
        for p in 0..PATHS {
            let path = (p * 37 + round) % PATHS;
            let got = capture_on_path(path, round != 0);
            if round == 0 {
                plain.push(got);
            } else {
                assert_eq!(got, plain[path], "round {round} path {path}");
            }
        }
        if round == 0 {
            let i0 = plain.iter().position(|f| f.is_empty());
            assert_eq!(i0, None);
            for p in 1..PATHS {
                assert_ne!(plain[p], plain[0], "path {p} is a stack of its own");
            }
            // Stored by path, not by the order walked.
            let mut by_path = vec![Vec::new(); PATHS];
            for (p, f) in plain.drain(..).enumerate() {
                by_path[(p * 37) % PATHS] = f;
            }
            plain = by_path;
        }
    }
    assert!(
        memo::LEFT_ALONE.load(Ordering::Relaxed) > left_alone,
        "the memos thrashed and were left alone"
    );
}

/// Stacks of `branching_stacks_...`: 2^8, so that each memo start has dozens of continuations.
const PATHS: usize = 256;

#[inline(never)]
fn capture_on_path(path: usize, memos: bool) -> Vec<usize> {
    memo::OFF.store(!memos, Ordering::Relaxed);
    let mut out = Vec::new();
    branch_a(path, PATHS.trailing_zeros() as usize, &mut || {
        let mut f = [0usize; 32];
        let n = capture(&mut f);
        out = f[..n].to_vec();
    });
    memo::OFF.store(false, Ordering::Relaxed);
    black_box(out)
}

#[test]
fn memos_under_concurrent_captures_and_rewrites() {
    let threads: Vec<_> = (0..4)
        .map(|t| {
            std::thread::spawn(move || {
                let mut shapes = Vec::new();
                for i in 0..200 {
                    shapes.push(((i + t) % 4, (i * 7 + t) % 11, [2, 16, 40][i % 3]));
                }
                memo_agrees_on(&shapes);
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn frames_are_in_executable_maps() {
    let shot = level1(false);
    let maps = Maps::read_self().unwrap();
    for &pc in &shot.warm {
        let i = maps.find(pc).unwrap_or_else(|| panic!("{pc:x} not mapped"));
        assert!(
            maps.entries()[i].flags & PROT_EXEC != 0,
            "{pc:x} not executable"
        );
    }
    // The pc is adjusted into the call instruction: one byte before a return address.
    let ret_site = shot.warm[0] + arch::CALL_ADJUST;
    assert_eq!(function_of(ret_site), level3 as *const () as usize);
}

#[test]
fn small_buffers_and_truncation() {
    let mut one = [0usize; 1];
    assert_eq!(capture(&mut one), 1);
    assert_eq!(
        function_of(one[0]),
        small_buffers_and_truncation as *const () as usize
    );
    assert_eq!(capture(&mut []), 0);
    let mut many = [0usize; MAX_FRAMES];
    let n = capture(&mut many);
    assert!(n > 2 && n < MAX_FRAMES);
    assert!(many[n..].iter().all(|&x| x == 0));
}

#[inline(never)]
fn skip_inner(frames: &mut [usize]) -> usize {
    black_box(capture(frames))
}

#[inline(never)]
fn skip_outer(frames: &mut [usize]) -> usize {
    black_box(skip_inner(frames))
}

#[test]
fn own_range_is_skipped_anywhere() {
    let mut f = [0usize; 32];
    let n = skip_outer(&mut f);
    assert!(n >= 3);
    assert_eq!(function_of(f[1]), skip_outer as *const () as usize);
    // Pretend skip_inner's call site is the library's code: that frame disappears, the rest
    // shifts up. Only skip_inner/skip_outer frames can fall in this range.
    let pc = f[0];
    walk::OWN_START.store(pc, core::sync::atomic::Ordering::Relaxed);
    walk::OWN_END.store(pc + 1, core::sync::atomic::Ordering::Relaxed);
    let mut g = [0usize; 32];
    let m = skip_outer(&mut g);
    walk::OWN_START.store(0, core::sync::atomic::Ordering::Relaxed);
    walk::OWN_END.store(0, core::sync::atomic::Ordering::Relaxed);
    assert_eq!(m, n - 1);
    // g = [skip_outer, this test (second call site), ...], f = [skip_inner, skip_outer, ...].
    assert_eq!(g[0], f[1]);
    assert_eq!(g[2..m], f[3..n]);
}

#[test]
fn startup_learns_own_code_range() {
    let (start, end) = cfi::module_code_range(capture as *const () as usize).unwrap();
    assert!(start <= capture as *const () as usize && (capture as *const () as usize) < end);
    assert!(start <= level1 as *const () as usize && (level1 as *const () as usize) < end);
    assert!(
        cfi::module_code_range(libc::getpid as *const () as usize)
            .is_some_and(|r| r != (start, end))
    );
}

#[test]
fn threads_capture_concurrently() {
    let threads: Vec<_> = (0..4)
        .map(|_| {
            std::thread::spawn(|| {
                for _ in 0..2000 {
                    let shot = level1(false);
                    assert_eq!(function_of(shot.warm[0]), level3 as *const () as usize);
                    assert_eq!(shot.warm[1..], shot.full[1..]);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn generation_changes_on_dlopen_and_dlclose() {
    let g1 = cfi::generation();
    assert_eq!(g1, cfi::generation());
    // SAFETY: loading and unloading a plain system library.
    let h = unsafe {
        libc::dlopen(
            c"libresolv.so.2".as_ptr(),
            libc::RTLD_NOW | libc::RTLD_LOCAL,
        )
    };
    if h.is_null() {
        return; // not on this system
    }
    let g2 = cfi::generation();
    // SAFETY: handle from dlopen above.
    unsafe { libc::dlclose(h) };
    let g3 = cfi::generation();
    // Other tests may load libraries concurrently: only inequality is meaningful.
    assert_ne!(g1, g2);
    assert_ne!(g2, g3);
    // A rule cached under the old generation is not served under the new one.
    let key = 0x7777_0000;
    CACHE.put(key, g1, rule::Entry::End);
    assert_eq!(CACHE.get(key, g1), Some(rule::Entry::End));
    assert_eq!(CACHE.get(key, g3), None);
}

#[test]
fn quarantined_lookup_knows_startup_code_only() {
    cfi::record_permanent_modules();
    // Code recorded at startup: the same rule as through the loader.
    let ra = level1 as *const () as usize + 1;
    assert!(matches!(cfi::lookup(ra), rule::Entry::Rule(_)));
    assert_eq!(cfi::quarantined_lookup(ra - 1), cfi::lookup(ra));
    // Code loaded later: the walk ends there.
    // SAFETY: loading and unloading a plain system library.
    let h = unsafe {
        libc::dlopen(
            c"libresolv.so.2".as_ptr(),
            libc::RTLD_NOW | libc::RTLD_LOCAL,
        )
    };
    if h.is_null() {
        return; // not on this system
    }
    // The library's code, found from its dynamic section (its functions may live in libc).
    let mut map: *mut libc::c_void = core::ptr::null_mut();
    // SAFETY: RTLD_DI_LINKMAP stores a `struct link_map *` (whose third word is l_ld).
    let l_ld = unsafe {
        assert_eq!(
            libc::dlinfo(h, libc::RTLD_DI_LINKMAP, (&raw mut map).cast()),
            0
        );
        *map.cast::<usize>().add(2)
    };
    let (code, _) = cfi::module_code_range(l_ld).expect("libresolv's code");
    assert!(!cfi::is_permanent(code));
    assert_eq!(cfi::quarantined_lookup(code), rule::Entry::End);
    // SAFETY: handle from dlopen above.
    unsafe { libc::dlclose(h) };
}

#[test]
fn permanent_modules_cover_startup_code() {
    cfi::record_permanent_modules();
    assert!(cfi::is_permanent(level1 as *const () as usize));
    assert!(cfi::is_permanent(libc::getpid as *const () as usize));
    assert!(!cfi::is_permanent(16));
    let x = 0usize;
    assert!(!cfi::is_permanent(&x as *const usize as usize));
    // Captures through permanent code still agree with the full unwinder.
    let shot = level1(true);
    assert_eq!(shot.cold[1..], shot.full[1..]);
    assert_eq!(shot.warm[1..], shot.full[1..]);
}

#[test]
fn live_resolver_on_libc_symbol() {
    let pc = libc::getpid as *const () as usize + 1;
    // SAFETY: Dl_info is plain data (pointers and integers); all zeros is a valid value.
    let mut info: libc::Dl_info = unsafe { core::mem::zeroed() };
    // SAFETY: valid out-parameter.
    assert!(unsafe { libc::dladdr(pc as *const c_void, &mut info) } != 0);
    let base = info.dli_fbase as usize;
    let mut res = crate::symbolize::Symbolizer::new();
    let mut seen = false;
    res.resolve(pc, &mut |r| {
        let m = r.map.expect("libc map");
        assert!(
            String::from_utf8_lossy(m.name).contains("libc"),
            "{:?}",
            String::from_utf8_lossy(m.name)
        );
        // For a shared library the relative pc is the address inside the ELF file.
        assert_eq!(r.rel_pc as usize, pc - base);
        let (name, off) = r.symbol.expect("symbol");
        assert!(
            name.ends_with(b"getpid"),
            "{}",
            String::from_utf8_lossy(name)
        );
        assert_eq!(off, 1);
        let mut line = crate::fmt::StackBuf::<512>::new();
        format::fast_line(&mut line, 3, r);
        let s = String::from_utf8_lossy(line.as_bytes()).into_owned();
        assert!(
            s.starts_with(&format!("          #03  pc {:016x}  /", pc - base)),
            "{s}"
        );
        assert!(s.ends_with("getpid+1)\n"), "{s}");
        seen = true;
    });
    assert!(seen);
    // An address in no map at all.
    res.resolve(8, &mut |r| {
        assert!(r.map.is_none() && r.symbol.is_none() && r.file.is_none());
        assert_eq!(r.rel_pc, 0);
    });
}

#[test]
fn describe_frame_fields() {
    let pc = libc::getpid as *const () as usize + 4;
    let mut got = None;
    describe_frame(pc, &mut |d| {
        got = Some((
            d.map_name.to_vec(),
            d.rel_pc,
            d.map_start,
            d.function.to_vec(),
            d.function_offset,
        ));
    });
    let (name, rel_pc, start, function, off) = got.unwrap();
    assert!(!name.is_empty() && start != 0 && rel_pc != 0);
    assert!(function.ends_with(b"getpid"));
    assert_eq!(off, 4);
    // A pc in no map: libunwindstack's values (the absolute pc).
    describe_frame(16, &mut |d| {
        assert!(d.map_name.is_empty() && d.function.is_empty());
        assert_eq!((d.rel_pc, d.map_start, d.function_offset), (16, 0, 0));
    });
    {
        let _session = SymbolSession::begin();
        describe_frame(pc, &mut |d| assert!(d.function.ends_with(b"getpid")));
        describe_frame(pc, &mut |d| assert!(d.function.ends_with(b"getpid")));
    }
    lock_raw();
    unlock_raw();
    describe_frame(pc, &mut |d| assert!(d.function.ends_with(b"getpid")));
}

#[test]
fn log_functions_do_not_crash() {
    let shot = level1(false);
    log_frames(&shot.warm);
    log_frames_full(&shot.warm);
    log_frames(&[0, 1, 4096, usize::MAX]);
    log_frames_full(&[0, 1, 4096, usize::MAX]);
}

// ---------------------------------------------------------------------------------------------
// Benchmark: `scripts/bench-unwind` (release, frame pointers forced) runs it with --ignored.

const DEPTH: usize = 20;

#[inline(never)]
fn recurse(depth: usize, at_bottom: &mut dyn FnMut()) {
    if depth == 0 {
        at_bottom();
    } else {
        recurse(black_box(depth - 1), at_bottom);
    }
    black_box(());
}

/// Plain frame-pointer walk (x86_64: [rbp] = caller's rbp, [rbp+8] = return address).
#[cfg(target_arch = "x86_64")]
#[inline(never)]
fn fp_walk(frames: &mut [usize]) -> usize {
    let mut fp: usize;
    // SAFETY: reads rbp only.
    unsafe { core::arch::asm!("mov {}, rbp", out(reg) fp, options(nomem, nostack)) };
    let mut n = 0;
    while n < frames.len() && fp != 0 && fp.is_multiple_of(8) {
        // SAFETY: the benchmark's stack is built with frame pointers.
        let (next, ra) = unsafe { (*(fp as *const usize), *((fp + 8) as *const usize)) };
        frames[n] = ra;
        n += 1;
        if next <= fp {
            break;
        }
        fp = next;
    }
    n
}

#[cfg(target_arch = "aarch64")]
#[inline(never)]
fn fp_walk(frames: &mut [usize]) -> usize {
    let mut fp: usize;
    // SAFETY: reads x29 only.
    unsafe { core::arch::asm!("mov {}, x29", out(reg) fp, options(nomem, nostack)) };
    let mut n = 0;
    while n < frames.len() && fp != 0 && fp.is_multiple_of(8) {
        // SAFETY: the benchmark's stack is built with frame pointers.
        let (next, ra) = unsafe { (*(fp as *const usize), *((fp + 8) as *const usize)) };
        frames[n] = ra;
        n += 1;
        if next <= fp {
            break;
        }
        fp = next;
    }
    n
}

type GccTrace = extern "C" fn(*mut c_void, *mut c_void) -> i32;
type GccBacktrace = unsafe extern "C" fn(GccTrace, *mut c_void) -> i32;
type GccGetIp = unsafe extern "C" fn(*mut c_void) -> usize;

struct GccState {
    get_ip: GccGetIp,
    frames: [usize; 16],
    n: usize,
}

extern "C" fn gcc_trace(ctx: *mut c_void, arg: *mut c_void) -> i32 {
    // SAFETY: arg is the GccState below; ctx is libgcc's context.
    let st = unsafe { &mut *arg.cast::<GccState>() };
    // SAFETY: get_ip is libgcc's _Unwind_GetIP, called with the context libgcc passed to this
    // trace callback, during the walk.
    let ip = unsafe { (st.get_ip)(ctx) };
    if st.n < st.frames.len() {
        st.frames[st.n] = ip;
        st.n += 1;
    }
    if st.n == st.frames.len() { 5 } else { 0 }
}

/// Best of five timed runs (the machine may be shared), in ns per call.
fn time_ns(iters: usize, mut f: impl FnMut()) -> f64 {
    (0..5)
        .map(|_| {
            let t = std::time::Instant::now();
            for _ in 0..iters {
                f();
            }
            t.elapsed().as_nanos() as f64 / iters as f64
        })
        .fold(f64::INFINITY, f64::min)
}

#[test]
#[ignore = "benchmark: scripts/bench-unwind"]
fn bench_unwind() {
    const WARM: usize = 100_000;
    // SAFETY: dlopen/dlsym of libgcc's unwinder, used with its own context type only.
    let gcc = unsafe {
        let h = libc::dlopen(c"libgcc_s.so.1".as_ptr(), libc::RTLD_NOW);
        assert!(!h.is_null(), "libgcc_s.so.1 not found");
        let bt = libc::dlsym(h, c"_Unwind_Backtrace".as_ptr());
        let ip = libc::dlsym(h, c"_Unwind_GetIP".as_ptr());
        assert!(!bt.is_null() && !ip.is_null());
        (
            core::mem::transmute::<*mut c_void, GccBacktrace>(bt),
            core::mem::transmute::<*mut c_void, GccGetIp>(ip),
        )
    };
    let mut report = String::new();
    recurse(DEPTH, &mut || {
        let mut f = [0usize; 16];
        assert_eq!(capture(&mut f), 16);
        let mut fp = [0usize; 16];
        assert_eq!(fp_walk(&mut fp), 16);
        memo::OFF.store(true, Ordering::Relaxed);
        let cold = time_ns(2_000, || {
            CACHE.clear();
            black_box(capture(black_box(&mut f)));
        });
        // Frames in code loaded after startup (dlopen'd libraries): generation check each time.
        let warm = time_ns(WARM, || {
            black_box(capture(black_box(&mut f)));
        });
        // Frames in code loaded before startup (executable, its libraries): no check.
        cfi::record_permanent_modules();
        CACHE.clear();
        let warm_permanent = time_ns(WARM, || {
            black_box(capture(black_box(&mut f)));
        });
        memo::OFF.store(false, Ordering::Relaxed);
        let hits = memo::HITS.load(Ordering::Relaxed);
        let memo_permanent = time_ns(WARM, || {
            black_box(capture(black_box(&mut f)));
        });
        eprintln!("memo hits {}", memo::HITS.load(Ordering::Relaxed) - hits);
        let full = time_ns(2_000, || {
            black_box(capture_full(black_box(&mut f)));
        });
        let mut st = GccState {
            get_ip: gcc.1,
            frames: [0; 16],
            n: 0,
        };
        let libgcc = time_ns(20_000, || {
            st.n = 0;
            // SAFETY: libgcc's own unwinder with its own callback types.
            unsafe { (gcc.0)(gcc_trace, (&raw mut st).cast()) };
            black_box(st.n);
        });
        let fpw = time_ns(WARM, || {
            black_box(fp_walk(black_box(&mut fp)));
        });
        let generation = time_ns(WARM, || {
            black_box(cfi::generation());
        });
        let target = 2.0 * fpw + 100.0;
        report = format!(
            "ns per 16-frame capture:\n  \
             cached DWARF, cold (cache cleared) {cold:>9.0}\n  \
             cached DWARF, warm, startup code   {warm_permanent:>9.1}\n  \
             cached DWARF, warm, dlopen'd code  {warm:>9.1}   (of which generation check {generation:.1})\n  \
             memo hit, startup code             {memo_permanent:>9.1}\n  \
             unwinding crate _Unwind_Backtrace  {full:>9.0}\n  \
             libgcc _Unwind_Backtrace           {libgcc:>9.0}\n  \
             frame-pointer walk                 {fpw:>9.1}\n\
             target warm <= 2 x fp walk + 100 ns = {target:.1} ns: {}\n",
            if warm_permanent <= target {
                "met"
            } else {
                "NOT met"
            }
        );
    });
    println!("{report}");
}
