//! Stack walks on 32-bit arm, through the ARM EHABI unwind tables.
//!
//! ## Model
//!
//! 32-bit arm code keeps no DWARF call-frame information and no reliable frame pointers: every
//! module has an exception index (`.ARM.exidx`, the `PT_ARM_EXIDX` segment), one 8-byte entry per
//! function sorted by address, whose second word either says the function cannot be unwound,
//! holds up to three unwind instructions inline, or points at a longer list in `.ARM.extab`. The
//! instructions describe how to undo the function's prologue: adjust the virtual stack pointer,
//! pop a set of core registers from it (the return address among them), skip saved floating-point
//! registers. Undoing one frame gives the caller's registers; its `pc` (the popped one, else the
//! link register) is the next return address. ("Exception Handling ABI for the Arm
//! Architecture", section 10.)
//!
//! bionic's own `_Unwind_Backtrace` reads the same tables, but Android 10's 32-bit libc traps in
//! it (its copy of the personality routine it calls is a stub), so the library walks itself:
//! nothing but loads, and every load checked first — stack words inside this thread's stack,
//! table words inside the module's loaded segments — so that a damaged stack or table ends the
//! walk instead of faulting inside malloc. The decoder below works on any host (its unit tests
//! run there); the register snapshot and the module lookup are arm's.

/// Core registers r0-r15 of one frame.
pub type Regs = [u32; 16];
const SP: usize = 13;
const LR: usize = 14;
const PC: usize = 15;

/// `.ARM.exidx`'s marker for a function that cannot be unwound.
const CANTUNWIND: u32 = 1;
/// Most instruction bytes one function's entry may hold here (real ones use a few).
pub const MAX_CODE: usize = 64;

/// Loads a walk may make; `None` where a load would not be safe.
pub trait Memory {
    /// A word of the thread's stack.
    fn stack_word(&self, addr: u32) -> Option<u32>;
    /// A word of the module's unwind tables.
    fn table_word(&self, addr: u32) -> Option<u32>;
}

/// A module's exception index: `entries` entries at `exidx`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Index {
    pub exidx: u32,
    pub entries: u32,
}

/// A prel31 field: a 31-bit signed offset from the field's own address.
fn prel31(place: u32, word: u32) -> u32 {
    place.wrapping_add((((word << 1) as i32) >> 1) as u32)
}

/// The address of the index entry covering `pc` (the last one starting at or before it).
pub fn find_entry(index: &Index, pc: u32, mem: &impl Memory) -> Option<u32> {
    let start = |i: u32| -> Option<u32> {
        let at = index.exidx.wrapping_add(i * 8);
        Some(prel31(at, mem.table_word(at)?))
    };
    if index.entries == 0 || start(0)? > pc {
        return None;
    }
    // Invariant: start(lo) <= pc, and every entry from hi on starts after it.
    let (mut lo, mut hi) = (0, index.entries);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if start(mid)? <= pc {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Some(index.exidx.wrapping_add(lo * 8))
}

/// The unwind instructions of the entry at `entry`, copied into `code`; how many. `None`: the
/// function cannot be unwound, or its entry is one this walk does not read (a personality
/// routine's own format, more than `MAX_CODE` bytes).
pub fn instructions(entry: u32, mem: &impl Memory, code: &mut [u8; MAX_CODE]) -> Option<usize> {
    let word = mem.table_word(entry.wrapping_add(4))?;
    if word == CANTUNWIND {
        return None;
    }
    let mut n = 0;
    let mut push = |bytes: &[u8]| -> Option<()> {
        code.get_mut(n..n + bytes.len())?.copy_from_slice(bytes);
        n += bytes.len();
        Some(())
    };
    let b = |w: u32| w.to_be_bytes();
    if word & 0x8000_0000 != 0 {
        // Inline: the compact model with personality 0, three instruction bytes.
        if (word >> 24) & 0x0f != 0 {
            return None;
        }
        push(&b(word)[1..])?;
        return Some(n);
    }
    let table = prel31(entry.wrapping_add(4), word);
    let head = mem.table_word(table)?;
    let (more, words) = if head & 0x8000_0000 != 0 {
        match (head >> 24) & 0x0f {
            0 => {
                push(&b(head)[1..])?;
                (0, table)
            }
            // Personalities 1 and 2: a count of further words, then two instruction bytes.
            1 | 2 => {
                push(&b(head)[2..])?;
                ((head >> 16) & 0xff, table.wrapping_add(4))
            }
            _ => return None,
        }
    } else {
        // The generic model (`__gxx_personality_v0` and the like): after the routine's address,
        // a word with the count of further words and three instruction bytes, as compilers emit.
        let first = mem.table_word(table.wrapping_add(4))?;
        push(&b(first)[1..])?;
        (first >> 24, table.wrapping_add(8))
    };
    for i in 0..more {
        push(&b(mem.table_word(words.wrapping_add(i * 4))?))?;
    }
    Some(n)
}

/// What a function's unwind instructions restored besides the stack pointer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Restored {
    pub pc: bool,
    pub lr: bool,
}

/// Runs unwind instructions on `regs` (the frame's registers; `regs[SP]` is where the virtual
/// stack pointer starts). Returns which of pc and lr they set; `None` when they refuse to
/// unwind, use a spare encoding or read outside the stack.
pub fn execute(code: &[u8], regs: &mut Regs, mem: &impl Memory) -> Option<Restored> {
    let mut vsp = regs[SP];
    let mut pc_set = false;
    let mut lr_set = false;
    let mut sp_set = false;
    let mut bytes = code.iter().copied();
    let pop = |regs: &mut Regs, vsp: &mut u32, r: usize| -> Option<()> {
        regs[r] = mem.stack_word(*vsp)?;
        *vsp = vsp.wrapping_add(4);
        Some(())
    };
    while let Some(op) = bytes.next() {
        let low = u32::from(op & 0x0f);
        match op {
            0x00..=0x3f => vsp = vsp.wrapping_add((u32::from(op & 0x3f) << 2) + 4),
            0x40..=0x7f => vsp = vsp.wrapping_sub((u32::from(op & 0x3f) << 2) + 4),
            0x80..=0x8f => {
                let mask = (low << 8) | u32::from(bytes.next()?);
                if mask == 0 {
                    return None; // "refuse to unwind"
                }
                for bit in 0..12 {
                    if mask & (1 << bit) != 0 {
                        pop(regs, &mut vsp, 4 + bit)?;
                    }
                }
                pc_set |= mask & (1 << (PC - 4)) != 0;
                lr_set |= mask & (1 << (LR - 4)) != 0;
                sp_set |= mask & (1 << (SP - 4)) != 0;
            }
            0x90..=0x9f if low != 13 && low != 15 => vsp = regs[low as usize],
            0xa0..=0xaf => {
                for r in 4..=4 + (op & 0x07) as usize {
                    pop(regs, &mut vsp, r)?;
                }
                if op & 0x08 != 0 {
                    pop(regs, &mut vsp, LR)?;
                    lr_set = true;
                }
            }
            0xb0 => break, // finish
            0xb1 => {
                let mask = bytes.next()?;
                if mask == 0 || mask & 0xf0 != 0 {
                    return None;
                }
                for r in 0..4 {
                    if mask & (1 << r) != 0 {
                        pop(regs, &mut vsp, r)?;
                    }
                }
            }
            0xb2 => {
                let mut value = 0u32;
                let mut shift = 0;
                loop {
                    let byte = bytes.next()?;
                    value |= u32::from(byte & 0x7f).checked_shl(shift)?;
                    shift += 7;
                    if byte & 0x80 == 0 {
                        break;
                    }
                }
                vsp = vsp.wrapping_add(0x204).wrapping_add(value << 2);
            }
            // Saved VFP registers (FSTMFDX: one more word) and iWMMXt ones are skipped.
            0xb3 => vsp = vsp.wrapping_add(8 * (u32::from(bytes.next()? & 0x0f) + 1) + 4),
            0xb8..=0xbf => vsp = vsp.wrapping_add(8 * ((low & 7) + 1) + 4),
            0xc0..=0xc5 | 0xd0..=0xd7 => vsp = vsp.wrapping_add(8 * ((low & 7) + 1)),
            0xc6 | 0xc8 | 0xc9 => vsp = vsp.wrapping_add(8 * (u32::from(bytes.next()? & 0x0f) + 1)),
            0xc7 => {
                let mask = bytes.next()?;
                if mask == 0 || mask & 0xf0 != 0 {
                    return None;
                }
                vsp = vsp.wrapping_add(4 * mask.count_ones());
            }
            _ => return None, // spare encodings
        }
    }
    // A popped stack pointer is the caller's; otherwise the virtual one is.
    if !sp_set {
        regs[SP] = vsp;
    }
    Some(Restored {
        pc: pc_set,
        lr: lr_set,
    })
}

/// Undoes one frame: `regs` (the frame's, `regs[PC]` inside its function) become the caller's,
/// `regs[PC]` the return address (Thumb bit kept). `None` where the walk must stop.
/// `innermost`: the frame is the walk's first, whose link register is still live; a function
/// further up that restores neither pc nor lr would hand back the return address just used.
pub fn step(
    index: &Index,
    regs: &mut Regs,
    lookup_pc: u32,
    innermost: bool,
    mem: &impl Memory,
) -> Option<()> {
    let entry = find_entry(index, lookup_pc, mem)?;
    let mut code = [0u8; MAX_CODE];
    let n = instructions(entry, mem, &mut code)?;
    let sp = regs[SP];
    let restored = execute(&code[..n], regs, mem)?;
    if !restored.pc {
        if !restored.lr && !innermost {
            return None;
        }
        regs[PC] = regs[LR];
    }
    // The caller's frame is above this one; a walk that does not climb would loop.
    (regs[SP] > sp || (regs[SP] == sp && regs[PC] & !1 != lookup_pc & !1)).then_some(())
}

#[cfg(target_arch = "arm")]
pub use arm::walk;

#[cfg(target_arch = "arm")]
mod arm {
    use super::{Index, Memory, PC, Regs, SP, step};
    use crate::backtrace::walk::{MAX_STEPS, Sink};

    const PT_ARM_EXIDX: u32 = 0x7000_0001;
    /// Loaded segments remembered per module (table reads must fall inside one).
    const SEGMENTS: usize = 8;

    /// A module's index and where its segments are mapped.
    #[derive(Clone, Copy, Default)]
    struct Module {
        index: Option<Index>,
        segments: [(u32, u32); SEGMENTS],
    }

    impl Module {
        fn contains(&self, addr: u32) -> bool {
            self.segments
                .iter()
                .any(|&(lo, hi)| addr >= lo && addr < hi)
        }
    }

    struct Loads<'a> {
        stack: (u32, u32),
        module: &'a Module,
    }

    impl Memory for Loads<'_> {
        fn stack_word(&self, addr: u32) -> Option<u32> {
            let (lo, hi) = self.stack;
            (addr.is_multiple_of(4) && addr >= lo && addr < hi.wrapping_sub(3))
                // SAFETY: inside this thread's stack, at or above the walk's starting point.
                .then(|| unsafe { core::ptr::read_volatile(addr as usize as *const u32) })
        }

        fn table_word(&self, addr: u32) -> Option<u32> {
            (addr.is_multiple_of(4) && self.module.contains(addr) && self.module.contains(addr + 3))
                // SAFETY: inside one of the module's loaded segments.
                .then(|| unsafe { core::ptr::read_volatile(addr as usize as *const u32) })
        }
    }

    /// A module's segments and index, from its program headers.
    fn module_from(base: u32, phdrs: &[libc::Elf32_Phdr]) -> Module {
        let mut module = Module::default();
        let mut loads = 0;
        for ph in phdrs {
            let lo = base.wrapping_add(ph.p_vaddr);
            if ph.p_type == libc::PT_LOAD && loads < SEGMENTS {
                module.segments[loads] = (lo, lo.wrapping_add(ph.p_memsz));
                loads += 1;
            } else if ph.p_type == PT_ARM_EXIDX {
                module.index = Some(Index {
                    exidx: lo,
                    entries: ph.p_memsz / 8,
                });
            }
        }
        module
    }

    /// The module whose code contains `pc`: one recorded at start-up (never unloaded, so its
    /// headers stay valid; no lock), else asked of the loader (its lock, briefly).
    fn module_of(pc: u32) -> Option<Module> {
        if let Some((base, phdrs)) = crate::backtrace::cfi::permanent_module(pc as usize) {
            let module = module_from(base as u32, phdrs);
            return module.contains(pc).then_some(module);
        }
        struct Search {
            pc: u32,
            found: Option<Module>,
        }
        unsafe extern "C" fn visit(
            info: *mut libc::dl_phdr_info,
            _size: usize,
            data: *mut core::ffi::c_void,
        ) -> core::ffi::c_int {
            // SAFETY: `data` is the Search passed below; `info` is the loader's, valid here.
            let (search, info) = unsafe { (&mut *data.cast::<Search>(), &*info) };
            // SAFETY: inside the callback.
            let module = module_from(info.dlpi_addr, unsafe {
                crate::backtrace::cfi::phdrs(info)
            });
            if !module.contains(search.pc) {
                return 0;
            }
            search.found = Some(module);
            1
        }
        let mut search = Search { pc, found: None };
        // SAFETY: `visit` reads `data` as the Search it is.
        unsafe { crate::backtrace::cfi::iterate_modules(visit, (&raw mut search).cast()) };
        search.found
    }

    /// Walks the calling thread's stack from this function's own frame; the library's frames
    /// are dropped by the sink. Never faults: see the module docs.
    #[inline(never)]
    pub fn walk(frames: &mut [usize]) -> usize {
        let mut regs: Regs = [0; 16];
        // SAFETY: stores r4-r11, sp, lr and the pc of this very function into `regs`; reads
        // the reserved registers (r6, r7, r11) without changing them.
        unsafe {
            core::arch::asm!(
                "str r4, [{r}, #16]",
                "str r5, [{r}, #20]",
                "str r6, [{r}, #24]",
                "str r7, [{r}, #28]",
                "str r8, [{r}, #32]",
                "str r9, [{r}, #36]",
                "str r10, [{r}, #40]",
                "str r11, [{r}, #44]",
                "mov {t}, sp",
                "str {t}, [{r}, #52]",
                "mov {t}, lr",
                "str {t}, [{r}, #56]",
                "mov {t}, pc",
                "str {t}, [{r}, #60]",
                r = in(reg) regs.as_mut_ptr(),
                t = out(reg) _,
                options(nostack, preserves_flags),
            );
        }
        let mut sink = Sink::new(frames);
        let Some((lo, hi)) = crate::backtrace::stack::bounds(regs[SP] as usize) else {
            return 0;
        };
        let stack = (lo as u32, hi as u32);
        let mut module = Module::default();
        let mut lookup = regs[PC] & !1;
        let mut innermost = true;
        for _ in 0..MAX_STEPS {
            if !module.contains(lookup) {
                match module_of(lookup) {
                    Some(m) => module = m,
                    None => break,
                }
            }
            let Some(index) = module.index else { break };
            let loads = Loads {
                stack,
                module: &module,
            };
            if step(&index, &mut regs, lookup, innermost, &loads).is_none() {
                break;
            }
            innermost = false;
            let ra = regs[PC];
            if ra & !1 == 0 || !sink.push(ra as usize) {
                break;
            }
            // The call is the instruction before the return address (2 bytes at least).
            lookup = (ra & !1).wrapping_sub(2);
        }
        sink.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Words by address, for both the stack and the tables.
    #[derive(Default)]
    struct Words(HashMap<u32, u32>);

    impl Memory for Words {
        fn stack_word(&self, addr: u32) -> Option<u32> {
            self.0.get(&addr).copied()
        }
        fn table_word(&self, addr: u32) -> Option<u32> {
            self.0.get(&addr).copied()
        }
    }

    fn prel(from: u32, to: u32) -> u32 {
        to.wrapping_sub(from) & 0x7fff_ffff
    }

    /// An index at 0x1000 of functions starting at `starts`, each with its second word.
    fn index(mem: &mut Words, entries: &[(u32, u32)]) -> Index {
        for (i, &(start, second)) in entries.iter().enumerate() {
            let at = 0x1000 + 8 * i as u32;
            mem.0.insert(at, prel(at, start));
            mem.0.insert(at + 4, second);
        }
        Index {
            exidx: 0x1000,
            entries: entries.len() as u32,
        }
    }

    #[test]
    fn prel31_reaches_backwards_and_forwards() {
        assert_eq!(prel31(0x1000, prel(0x1000, 0x8000)), 0x8000);
        assert_eq!(prel31(0x9000, prel(0x9000, 0x100)), 0x100);
    }

    #[test]
    fn the_entry_is_the_last_one_starting_at_or_before_the_pc() {
        let mut mem = Words::default();
        let idx = index(
            &mut mem,
            &[
                (0x8000, CANTUNWIND),
                (0x8100, CANTUNWIND),
                (0x8400, CANTUNWIND),
            ],
        );
        assert_eq!(find_entry(&idx, 0x7fff, &mem), None);
        assert_eq!(find_entry(&idx, 0x8000, &mem), Some(0x1000));
        assert_eq!(find_entry(&idx, 0x80ff, &mem), Some(0x1000));
        assert_eq!(find_entry(&idx, 0x8100, &mem), Some(0x1008));
        assert_eq!(find_entry(&idx, 0x9000, &mem), Some(0x1010));
    }

    #[test]
    fn inline_extab_and_generic_entries_yield_their_bytes() {
        let mut mem = Words::default();
        // Inline: personality 0 with `vsp += 16; pop {r4, lr}; finish`-like bytes.
        let idx = index(
            &mut mem,
            &[
                (0x8000, 0x8003_a8b0),
                (0x8100, prel(0x100c, 0x2000)),
                (0x8200, prel(0x1014, 0x3000)),
                (0x8300, CANTUNWIND),
            ],
        );
        let _ = idx;
        // Compact personality 1 in .ARM.extab: one more word.
        mem.0.insert(0x2000, 0x8101_b0b0);
        mem.0.insert(0x2004, 0x0102_0304);
        // Generic model: personality address, then a count of 1 more word and 3 bytes.
        mem.0.insert(0x3000, 0x1234);
        mem.0.insert(0x3004, 0x01aa_bbcc);
        mem.0.insert(0x3008, 0x0506_0708);
        let mut code = [0u8; MAX_CODE];
        let n = instructions(0x1000, &mem, &mut code).unwrap();
        assert_eq!(&code[..n], &[0x03, 0xa8, 0xb0]);
        let n = instructions(0x1008, &mem, &mut code).unwrap();
        assert_eq!(&code[..n], &[0xb0, 0xb0, 1, 2, 3, 4]);
        let n = instructions(0x1010, &mem, &mut code).unwrap();
        assert_eq!(&code[..n], &[0xaa, 0xbb, 0xcc, 5, 6, 7, 8]);
        assert_eq!(instructions(0x1018, &mem, &mut code), None, "cantunwind");
    }

    #[test]
    fn a_prologue_is_undone() {
        // push {r4-r7, lr}; sub sp, #8  ==>  vsp += 8; pop {r4-r7, lr}
        let mut mem = Words::default();
        let sp = 0x7000;
        for (i, v) in [0x44, 0x55, 0x66, 0x77, 0x1235].iter().enumerate() {
            mem.0.insert(sp + 8 + 4 * i as u32, *v);
        }
        let mut regs: Regs = [0; 16];
        regs[SP] = sp;
        let restored = execute(&[0x01, 0xab, 0xb0], &mut regs, &mem).unwrap();
        assert_eq!(
            restored,
            Restored {
                pc: false,
                lr: true
            }
        );
        assert_eq!(&regs[4..8], &[0x44, 0x55, 0x66, 0x77]);
        assert_eq!(regs[LR], 0x1235);
        assert_eq!(regs[SP], sp + 28);
    }

    #[test]
    fn a_frame_pointer_restores_the_stack_pointer_and_a_popped_pc_is_the_return() {
        // mov sp, r7 then pop {r4, r7, pc} (mask 0x80 0x... : r4 bit0, r7 bit3, r15 bit11)
        let mut mem = Words::default();
        let r7 = 0x7100;
        mem.0.insert(r7, 0x4444);
        mem.0.insert(r7 + 4, 0x7777);
        mem.0.insert(r7 + 8, 0x2001);
        let mut regs: Regs = [0; 16];
        regs[SP] = 0x7000;
        regs[7] = r7;
        let code = [0x97, 0x88, 0x09];
        assert_eq!(
            execute(&code, &mut regs, &mem),
            Some(Restored {
                pc: true,
                lr: false
            })
        );
        assert_eq!(regs[4], 0x4444);
        assert_eq!(regs[7], 0x7777);
        assert_eq!(regs[PC], 0x2001);
        assert_eq!(regs[SP], r7 + 12);
    }

    #[test]
    fn vfp_and_long_adjustments_move_the_stack_pointer() {
        let mem = Words::default();
        let mut regs: Regs = [0; 16];
        regs[SP] = 0x1000;
        // vpush {d8-d9} (0xd1: 2 registers), then vsp += 0x204 + (2 << 2).
        execute(&[0xd1, 0xb2, 0x02], &mut regs, &mem).unwrap();
        assert_eq!(regs[SP], 0x1000 + 16 + 0x204 + 8);
        // FSTMFDX d8 (0xb8): 8 + 4 bytes; vsp -= 4 (0x40).
        regs[SP] = 0x1000;
        execute(&[0xb8, 0x40], &mut regs, &mem).unwrap();
        assert_eq!(regs[SP], 0x1000 + 12 - 4);
    }

    #[test]
    fn refusals_spares_and_unreadable_stacks_stop_the_walk() {
        let mem = Words::default();
        let mut regs: Regs = [0; 16];
        regs[SP] = 0x1000;
        assert_eq!(execute(&[0x80, 0x00], &mut regs, &mem), None, "refuse");
        assert_eq!(execute(&[0xb4], &mut regs, &mem), None, "spare");
        assert_eq!(
            execute(&[0x9d], &mut regs, &mem),
            None,
            "vsp = sp is reserved"
        );
        assert_eq!(execute(&[0xa8], &mut regs, &mem), None, "no stack there");
        assert_eq!(execute(&[0xb1, 0x00], &mut regs, &mem), None);
    }

    #[test]
    fn a_step_climbs_to_the_caller_and_a_step_that_does_not_climb_stops() {
        let mut mem = Words::default();
        // One function at 0x8000: pop {r4, lr} (0xa8), inline.
        let idx = index(&mut mem, &[(0x8000, 0x80a8_b0b0)]);
        let sp = 0x7000;
        mem.0.insert(sp, 0x4);
        mem.0.insert(sp + 4, 0x9001);
        let mut regs: Regs = [0; 16];
        regs[SP] = sp;
        regs[PC] = 0x8010;
        assert_eq!(step(&idx, &mut regs, 0x8010, false, &mem), Some(()));
        assert_eq!(regs[PC], 0x9001, "lr becomes the pc");
        assert_eq!(regs[SP], sp + 8);
        // A function whose instructions leave sp and pc where they were: stop.
        let mut mem = Words::default();
        let idx = index(&mut mem, &[(0x8000, 0x80b0_b0b0)]);
        let mut regs: Regs = [0; 16];
        regs[SP] = sp;
        regs[LR] = 0x8011;
        assert_eq!(step(&idx, &mut regs, 0x8010, true, &mem), None);
    }

    #[test]
    fn only_the_innermost_frame_may_return_through_a_live_lr() {
        // `vsp += 8; finish`: nothing saved, as in a leaf function.
        let mut mem = Words::default();
        let idx = index(&mut mem, &[(0x8000, 0x8001_b0b0)]);
        let fresh = || {
            let mut regs: Regs = [0; 16];
            regs[SP] = 0x7000;
            regs[LR] = 0x9001;
            regs
        };
        let mut regs = fresh();
        assert_eq!(step(&idx, &mut regs, 0x8010, true, &mem), Some(()));
        assert_eq!(regs[PC], 0x9001);
        // Further up, lr holds the return address already used: the walk would repeat it.
        let mut regs = fresh();
        assert_eq!(step(&idx, &mut regs, 0x8010, false, &mem), None);
    }
}
