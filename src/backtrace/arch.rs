//! What the unwinder needs to know about the CPU: DWARF register numbers of the three registers
//! the cached walk tracks (stack pointer, frame pointer, return address), how to read them at a
//! known point of the capturing function, and how a return address is turned into the address
//! of its call instruction (docs/spec/allocation.md#allocation-backtraces).

/// The registers a cached unwind rule reads and writes. `ra` holds a *return address*: the
/// rule for a frame is looked up at `ra - 1` (inside the call instruction).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Regs {
    pub ra: usize,
    pub sp: usize,
    pub fp: usize,
}

/// How far back a return address is moved to land inside the call
/// (docs/spec/allocation.md#allocation-backtraces).
#[cfg(any(target_arch = "x86_64", target_arch = "x86"))]
pub const CALL_ADJUST: usize = 1;
#[cfg(target_arch = "aarch64")]
pub const CALL_ADJUST: usize = 4;
#[cfg(not(any(target_arch = "x86_64", target_arch = "x86", target_arch = "aarch64")))]
pub const CALL_ADJUST: usize = 2;

/// The pc recorded for a return address: stepped back into the call instruction when it is
/// not suspiciously low.
#[inline]
pub fn adjust_pc(ra: usize) -> usize {
    // 32-bit arm: the low bit of a Thumb return address is the mode, not part of the address.
    #[cfg(target_arch = "arm")]
    let ra = ra & !1;
    if ra >= 4096 { ra - CALL_ADJUST } else { ra }
}

#[cfg(target_arch = "x86_64")]
mod regs {
    use gimli::Register;
    pub const SP: Register = gimli::X86_64::RSP;
    pub const FP: Register = gimli::X86_64::RBP;
    pub const RA: Register = gimli::X86_64::RA;
}

#[cfg(target_arch = "x86")]
mod regs {
    use gimli::Register;
    pub const SP: Register = gimli::X86::ESP;
    pub const FP: Register = gimli::X86::EBP;
    pub const RA: Register = gimli::X86::RA;
}

#[cfg(target_arch = "aarch64")]
mod regs {
    use gimli::Register;
    pub const SP: Register = gimli::AArch64::SP;
    pub const FP: Register = gimli::AArch64::X29;
    pub const RA: Register = gimli::AArch64::X30;
    pub const RA_SIGN_STATE: Register = gimli::AArch64::RA_SIGN_STATE;
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64", target_arch = "x86"))]
pub use regs::*;

/// Reads the stack pointer, the frame pointer and an address inside the calling function, all
/// at the same instruction, so that the CFI row of that address describes the values read. The
/// returned `ra` is that address plus one instruction, so `ra - 1` (the lookup address of a
/// return address) lies inside the snapshot itself.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub fn snapshot() -> Regs {
    let pc: usize;
    let sp: usize;
    let fp: usize;
    // SAFETY: only reads registers; no memory access, no stack use.
    unsafe {
        core::arch::asm!(
            "lea {pc}, [rip]",
            "mov {sp}, rsp",
            "mov {fp}, rbp",
            pc = out(reg) pc,
            sp = out(reg) sp,
            fp = out(reg) fp,
            options(nomem, nostack, preserves_flags),
        );
    }
    // `lea r, [rip]` yields the address of the next instruction; one byte back is the `lea`.
    Regs { ra: pc, sp, fp }
}

/// i386 has no pc-relative `lea`: a call to the next instruction pushes its address, which is
/// popped at once (the stack pointer read after that is the function's own).
#[cfg(target_arch = "x86")]
#[inline(always)]
pub fn snapshot() -> Regs {
    let pc: usize;
    let sp: usize;
    let fp: usize;
    // SAFETY: pushes one word and pops it again; otherwise only reads registers.
    unsafe {
        core::arch::asm!(
            "call 2f",
            "2: pop {pc}",
            "mov {sp}, esp",
            "mov {fp}, ebp",
            pc = out(reg) pc,
            sp = out(reg) sp,
            fp = out(reg) fp,
            options(preserves_flags),
        );
    }
    // The popped address follows the 5-byte call: `ra - 1` is the call's last byte.
    Regs { ra: pc, sp, fp }
}

#[cfg(target_arch = "aarch64")]
#[inline(always)]
pub fn snapshot() -> Regs {
    let pc: usize;
    let sp: usize;
    let fp: usize;
    // SAFETY: only reads registers; no memory access, no stack use.
    unsafe {
        core::arch::asm!(
            "adr {pc}, .",
            "mov {sp}, sp",
            "mov {fp}, x29",
            pc = out(reg) pc,
            sp = out(reg) sp,
            fp = out(reg) fp,
            options(nomem, nostack, preserves_flags),
        );
    }
    // `adr` yields its own address; as a "return address" one instruction later, `ra - 1` is
    // the last byte of the `adr`.
    Regs { ra: pc + 4, sp, fp }
}

/// Removes a pointer-authentication code from a return address (a no-op on CPUs without
/// PAuth: `xpaclri` is in the hint space).
#[cfg(target_arch = "aarch64")]
#[inline(always)]
pub fn strip_pac(ra: usize) -> usize {
    let mut v = ra;
    // SAFETY: xpaclri only rewrites x30, which is declared clobbered.
    unsafe {
        core::arch::asm!(
            "mov x30, {v}",
            "hint #7",
            "mov {v}, x30",
            v = inout(reg) v,
            out("x30") _,
            options(nomem, nostack, preserves_flags),
        );
    }
    v
}

#[cfg(not(target_arch = "aarch64"))]
#[inline(always)]
pub fn strip_pac(ra: usize) -> usize {
    ra
}
