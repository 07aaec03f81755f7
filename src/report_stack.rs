//! A stack of the library's own for deep work (docs/design.md, "Reports run on a stack of
//! their own").
//!
//! A report runs on whatever thread asks for it: the exit report on the thread that calls
//! `exit`, a heap dump on the thread whose allocation call notices the signal's request, an
//! error report inside the allocation call that found the error. Such a thread may have a small
//! stack (glibc and bionic accept 16 KiB), and a report is deep: it symbolizes (ELF and DWARF
//! line tables), formats records of up to a few kilobytes, sorts. A thread with a 40 KiB stack
//! that called `exit` under `backtrace leak_track` crashed in the exit report, and a 16 KiB one
//! in any report. The unwinder's search of a module's CFI tables for a pc it has not seen (rare:
//! its results are cached) is deep too. So that work runs here instead: a mapping of
//! [`STACK_BYTES`] (reserved, not committed: only the pages the work touches cost memory) with
//! an inaccessible page below it, so that even an overflow of this stack faults instead of
//! writing over another mapping. Stacks are kept for reuse (`SPARE`), so a switch costs two
//! atomic swaps, not a mapping.
//!
//! The switch itself is three instructions around a call (x86-64 and arm64; elsewhere the work
//! runs on the caller's stack). Nothing about the thread changes but its stack pointer: thread
//! locals, the signal mask, errno are the caller's. Frame-pointer chains lead from the
//! trampoline back into the caller's frames, so a debugger's backtrace still shows who asked;
//! the library's own walks, which need the caller's frames, are taken before the switch. The
//! mapping is one of the library's (`pages`), so the unreachable-memory scan does not take the
//! report's temporaries for references; the scan of the calling thread's own stack starts where
//! the caller spilled its registers, before the switch (`leaks::report`).

/// The report stack's size. Reports use tens of kilobytes; the rest is never touched and costs
/// nothing but address space.
#[cfg(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    target_arch = "x86",
    target_arch = "arm"
))]
const STACK_BYTES: usize = 1 << 20;

/// Runs `f` on a stack of its own, or on the caller's when no mapping can be had (then a deep
/// report on a small stack may still overflow, as it would have anyway) or when the caller
/// already runs on a report stack (an exit report logging 20,000 backtraces maps one stack,
/// not 20,000).
pub fn run<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(any(
        target_arch = "x86_64",
        target_arch = "aarch64",
        target_arch = "x86",
        target_arch = "arm"
    ))]
    if !on_a_report_stack()
        && let Some(stack) = Stack::map()
    {
        let mut work = Some(f);
        let mut result = None;
        let mut call = || {
            if let Some(f) = work.take() {
                result = Some(f());
            }
        };
        let mut call: &mut dyn FnMut() = &mut call;
        // SAFETY: `stack.top()` is the 16-byte-aligned end of a writable mapping that lives
        // until after the call; the context is a `&mut dyn FnMut()` that outlives it.
        unsafe { switch_and_call(stack.top(), (&mut call as *mut &mut dyn FnMut()).cast()) };
        drop(stack);
        return match result {
            Some(r) => r,
            // The trampoline always runs the closure once.
            None => crate::platform::abort_with_message("malloc_debug: report stack not run"),
        };
    }
    f()
}

/// The report stacks in use, by base address (0: free slot). Lock-free, as everything a signal
/// handler or a fork child may meet. A stack that finds no free slot works unlisted (nested
/// reports on it then map a stack each).
#[cfg(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    target_arch = "x86",
    target_arch = "arm"
))]
static IN_USE: [core::sync::atomic::AtomicUsize; 16] =
    [const { core::sync::atomic::AtomicUsize::new(0) }; 16];

/// Whether this thread runs on one of the report stacks (its stack pointer is inside one: a
/// stack in use belongs to one thread).
#[cfg(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    target_arch = "x86",
    target_arch = "arm"
))]
#[inline(never)]
fn on_a_report_stack() -> bool {
    let marker = 0u8;
    let here = core::hint::black_box(&marker) as *const u8 as usize;
    let len = STACK_BYTES + crate::platform::page_size();
    IN_USE.iter().any(|base| {
        let base = base.load(core::sync::atomic::Ordering::Acquire);
        base != 0 && here.wrapping_sub(base) < len
    })
}

/// One report stack: `STACK_BYTES` usable, above a guard page.
#[cfg(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    target_arch = "x86",
    target_arch = "arm"
))]
struct Stack {
    base: core::ptr::NonNull<u8>,
    /// Its slot in `IN_USE`, if it found one.
    listed: Option<usize>,
}

/// Stacks mapped earlier and not in use (base address; 0: empty), kept for the next report or
/// table search: a mapping and its first page faults cost more than the search they would
/// serve. Taken and given back with one swap each, never locked.
#[cfg(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    target_arch = "x86",
    target_arch = "arm"
))]
static SPARE: [core::sync::atomic::AtomicUsize; 8] =
    [const { core::sync::atomic::AtomicUsize::new(0) }; 8];

#[cfg(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    target_arch = "x86",
    target_arch = "arm"
))]
impl Stack {
    /// A spare stack, or a new one.
    fn map() -> Option<Stack> {
        use core::sync::atomic::Ordering;
        let spare = SPARE
            .iter()
            .map(|slot| slot.swap(0, Ordering::AcqRel))
            .find(|&base| base != 0);
        let base = match spare {
            Some(base) => core::ptr::NonNull::new(base as *mut u8)?,
            None => Self::map_new()?,
        };
        let at = base.as_ptr() as usize;
        let listed = IN_USE.iter().position(|slot| {
            slot.compare_exchange(0, at, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        });
        Some(Stack { base, listed })
    }

    fn map_new() -> Option<core::ptr::NonNull<u8>> {
        let guard = crate::platform::page_size();
        let base = crate::pages::map(STACK_BYTES + guard)?;
        let saved = crate::platform::errno();
        // SAFETY: the lowest page of the mapping just made, used by nobody yet.
        let rc = unsafe { libc::mprotect(base.as_ptr().cast(), guard, libc::PROT_NONE) };
        crate::platform::set_errno(saved);
        if rc != 0 {
            // SAFETY: the mapping just made, with its size; nothing uses it.
            unsafe { crate::pages::unmap(base, STACK_BYTES + guard) };
            return None;
        }
        Some(base)
    }

    fn top(&self) -> usize {
        // Page-aligned, so 16-byte aligned as both ABIs want the stack at a call.
        self.base.as_ptr() as usize + crate::platform::page_size() + STACK_BYTES
    }
}

#[cfg(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    target_arch = "x86",
    target_arch = "arm"
))]
impl Drop for Stack {
    fn drop(&mut self) {
        use core::sync::atomic::Ordering;
        if let Some(slot) = self.listed {
            IN_USE[slot].store(0, Ordering::Release);
        }
        let at = self.base.as_ptr() as usize;
        let kept = SPARE.iter().any(|slot| {
            slot.compare_exchange(0, at, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        });
        if !kept {
            // SAFETY: the mapping `map_new` made with this size; no frame lives on it any more
            // and no list holds it.
            unsafe { crate::pages::unmap(self.base, STACK_BYTES + crate::platform::page_size()) };
        }
    }
}

/// Calls the `&mut dyn FnMut()` behind `context`, on the new stack.
#[cfg(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    target_arch = "x86",
    target_arch = "arm"
))]
extern "C" fn trampoline(context: *mut core::ffi::c_void) {
    // SAFETY: `run` passes a pointer to its live `&mut dyn FnMut()`, used by nobody else
    // during the call.
    let call = unsafe { &mut *context.cast::<&mut dyn FnMut()>() };
    call();
}

/// Moves the stack pointer to `top`, calls `trampoline(context)` and moves it back.
///
/// # Safety
/// `top` must be the 16-byte-aligned end of a writable region, large enough for the call, that
/// nothing else uses meanwhile; `context` must be what `trampoline` expects.
#[cfg(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    target_arch = "x86",
    target_arch = "arm"
))]
unsafe fn switch_and_call(top: usize, context: *mut core::ffi::c_void) {
    // One shape for the 64-bit architectures: keep the stack pointer in a callee-saved register
    // (which the trampoline returns intact), load the new one, call, restore. Every register
    // the C ABI lets a call clobber (the link register included) is declared so.
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    macro_rules! switch {
        ($keep:literal, $load:literal, $call:literal, $restore:literal, $arg:tt, $kept:tt) => {
            core::arch::asm!(
                $keep, $load, $call, $restore,
                top = in(reg) top,
                tramp = sym trampoline,
                in($arg) context,
                out($kept) _,
                clobber_abi("C"),
            )
        };
    }
    // SAFETY: the caller's contract; the asm leaves every register it does not declare as the
    // call found it.
    unsafe {
        #[cfg(target_arch = "x86_64")]
        switch!(
            "mov r12, rsp",
            "mov rsp, {top}",
            "call {tramp}",
            "mov rsp, r12",
            "rdi",
            "r12"
        );
        #[cfg(target_arch = "aarch64")]
        switch!(
            "mov x20, sp",
            "mov sp, {top}",
            "bl {tramp}",
            "mov sp, x20",
            "x0",
            "x20"
        );
        // i386's C ABI passes the argument on the stack, kept 16-byte aligned at the call.
        // `edi` keeps the stack pointer (callee-saved; `esi` and `ebx` are LLVM's own there).
        #[cfg(target_arch = "x86")]
        core::arch::asm!(
            "mov edi, esp",
            "mov esp, {top}",
            "sub esp, 12",
            "push {context}",
            "call {tramp}",
            "mov esp, edi",
            top = in(reg) top,
            context = in(reg) context,
            tramp = sym trampoline,
            out("edi") _,
            clobber_abi("C"),
        );
        // 32-bit arm: the argument in r0; `r5` keeps the stack pointer (callee-saved; `r6`,
        // `r7` and `r11` are LLVM's own there). `bl` reaches the trampoline in either mode.
        #[cfg(target_arch = "arm")]
        core::arch::asm!(
            "mov r5, sp",
            "mov sp, {top}",
            "bl {tramp}",
            "mov sp, r5",
            top = in(reg) top,
            tramp = sym trampoline,
            in("r0") context,
            out("r5") _,
            clobber_abi("C"),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An address in the current frame.
    #[inline(never)]
    fn here() -> usize {
        let marker = 0u8;
        core::hint::black_box(&marker) as *const u8 as usize
    }

    #[test]
    fn the_work_runs_on_another_stack_and_returns_its_value() {
        let caller = here();
        let (inside, value) = run(|| (here(), 41 + 1));
        assert_eq!(value, 42);
        assert!(
            caller.abs_diff(inside) > STACK_BYTES / 2,
            "{caller:#x} and {inside:#x} look like one stack"
        );
        // And back on the caller's stack afterwards.
        assert!(caller.abs_diff(here()) < 64 * 1024);
    }

    #[test]
    fn a_report_inside_a_report_stays_on_its_stack() {
        let (outer, inner) = run(|| (here(), run(here)));
        assert!(outer.abs_diff(inner) < 64 * 1024, "{outer:#x} {inner:#x}");
        assert!(!on_a_report_stack());
    }

    #[test]
    fn deep_work_fits_where_a_small_thread_stack_would_not() {
        // 200 KiB of frames, in a thread of 64 KiB.
        #[inline(never)]
        fn deep(n: usize) -> usize {
            let buf = core::hint::black_box([n as u8; 1024]);
            if n == 0 {
                buf[0] as usize
            } else {
                deep(n - 1) + buf[1] as usize
            }
        }
        let t = std::thread::Builder::new()
            .stack_size(64 * 1024)
            .spawn(|| run(|| deep(200)))
            .unwrap();
        assert_eq!(t.join().unwrap(), (1..=200).sum::<usize>());
    }
}
