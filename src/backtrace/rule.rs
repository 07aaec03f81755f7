//! A CFI row reduced to what the cached walk needs, its packed cache form, and one step of the
//! walk with it.

use super::arch::{Regs, strip_pac};

const WORD: usize = core::mem::size_of::<usize>();

/// How the caller's frame pointer is recovered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FpRule {
    /// Not changed by this frame.
    Same,
    /// Saved at CFA + offset.
    At(i32),
    /// Not recoverable (treated as 0).
    Zero,
}

/// CFA = (fp if `cfa_fp` else sp) + `cfa_off`; return address at CFA + `ra_off`; caller's
/// frame pointer per `fp`; `ra_signed`: the saved return address carries a PAC (aarch64).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rule {
    pub cfa_fp: bool,
    pub cfa_off: i32,
    pub ra_off: i32,
    pub fp: FpRule,
    pub ra_signed: bool,
}

/// Saved-register slots further below the CFA than this are not cached (never seen in
/// practice; such frames go to the full unwinder).
const MAX_SLOT: i32 = 1 << 20;

impl Rule {
    /// Slots must be word-aligned and below the CFA (where every ABI saves registers) so that
    /// one range check per frame proves every read lies inside the frame.
    pub fn is_cacheable(&self) -> bool {
        let ok = |o: i32| (-MAX_SLOT..0).contains(&o) && (o as isize % WORD as isize) == 0;
        ok(self.ra_off)
            && if let FpRule::At(o) = self.fp {
                ok(o)
            } else {
                true
            }
    }

    /// Bytes below the CFA the rule reads: the frame must be at least this large.
    fn reach(&self) -> u32 {
        let fp = if let FpRule::At(o) = self.fp {
            o.unsigned_abs()
        } else {
            0
        };
        self.ra_off.unsigned_abs().max(fp)
    }
}

/// What the cache knows about a return address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry {
    Rule(Rule),
    /// Outermost frame, or no unwind information: the walk ends here.
    End,
    /// A row the cached walk cannot express (expressions, signal frames, other registers):
    /// the whole capture is redone by the full DWARF unwinder.
    Unsupported,
}

// Packed form in the cache: [flags | reach/WORD << 8, cfa_off, ra_off, fp_off].
pub const KIND_MASK: u32 = 3;
pub const KIND_RULE: u32 = 1;
pub const KIND_END: u32 = 2;
pub const KIND_UNSUPPORTED: u32 = 3;
const CFA_FP: u32 = 1 << 2;
const FP_AT: u32 = 1 << 3;
const FP_ZERO: u32 = 1 << 4;
const RA_SIGNED: u32 = 1 << 5;
const REACH_SHIFT: u32 = 8;

impl Entry {
    pub fn pack(self) -> [u32; 4] {
        match self {
            Entry::End => [KIND_END, 0, 0, 0],
            Entry::Rule(r) if r.is_cacheable() => {
                let mut flags = KIND_RULE | (r.reach() / WORD as u32) << REACH_SHIFT;
                if r.cfa_fp {
                    flags |= CFA_FP;
                }
                if r.ra_signed {
                    flags |= RA_SIGNED;
                }
                let fp_off = match r.fp {
                    FpRule::Same => 0,
                    FpRule::At(o) => {
                        flags |= FP_AT;
                        o
                    }
                    FpRule::Zero => {
                        flags |= FP_ZERO;
                        0
                    }
                };
                [flags, r.cfa_off as u32, r.ra_off as u32, fp_off as u32]
            }
            Entry::Rule(_) | Entry::Unsupported => [KIND_UNSUPPORTED, 0, 0, 0],
        }
    }

    #[cfg(test)]
    pub fn unpack(w: [u32; 4]) -> Option<Entry> {
        match w[0] & KIND_MASK {
            KIND_END => Some(Entry::End),
            KIND_UNSUPPORTED => Some(Entry::Unsupported),
            KIND_RULE => {
                let fp = if w[0] & FP_AT != 0 {
                    FpRule::At(w[3] as i32)
                } else if w[0] & FP_ZERO != 0 {
                    FpRule::Zero
                } else {
                    FpRule::Same
                };
                Some(Entry::Rule(Rule {
                    cfa_fp: w[0] & CFA_FP != 0,
                    cfa_off: w[1] as i32,
                    ra_off: w[2] as i32,
                    fp,
                    ra_signed: w[0] & RA_SIGNED != 0,
                }))
            }
            _ => None,
        }
    }
}

/// The packed words as two 64-bit halves (the cache's storage and the hot loop's registers).
pub type Packed = (u64, u64);

pub fn to_pair(w: [u32; 4]) -> Packed {
    (
        w[0] as u64 | (w[1] as u64) << 32,
        w[2] as u64 | (w[3] as u64) << 32,
    )
}

#[cfg(test)]
pub fn from_pair(p: Packed) -> [u32; 4] {
    [
        p.0 as u32,
        (p.0 >> 32) as u32,
        p.1 as u32,
        (p.1 >> 32) as u32,
    ]
}

// What a packed rule reads and writes: `step_packed` and the memos of whole walks (memo.rs)
// decode it through these, so that a memo records exactly the slots the step reads.

#[inline(always)]
pub fn cfa_from_fp(p: Packed) -> bool {
    p.0 as u32 & CFA_FP != 0
}

#[inline(always)]
pub fn zeroes_fp(p: Packed) -> bool {
    p.0 as u32 & FP_ZERO != 0
}

#[inline(always)]
pub fn ra_signed(p: Packed) -> bool {
    p.0 as u32 & RA_SIGNED != 0
}

#[inline(always)]
fn reads_fp(p: Packed) -> bool {
    p.0 as u32 & FP_AT != 0
}

/// The CFA's offset from its base register.
#[inline(always)]
fn cfa_offset(p: Packed) -> usize {
    (p.0 >> 32) as u32 as i32 as isize as usize
}

/// Where, relative to the CFA, the return address is saved.
#[inline(always)]
fn ra_offset(p: Packed) -> usize {
    p.1 as u32 as i32 as isize as usize
}

/// Where, relative to the CFA, the frame pointer is saved (when `reads_fp`).
#[inline(always)]
fn fp_offset(p: Packed) -> usize {
    (p.1 >> 32) as u32 as i32 as isize as usize
}

/// Where `step_packed` read the saved frame pointer, if it did, given the registers it produced.
#[inline(always)]
pub fn fp_slot(after: &Regs, p: Packed) -> Option<usize> {
    reads_fp(p).then(|| after.sp.wrapping_add(fp_offset(p)))
}

/// Where `step_packed` read the return address, given the registers it produced.
#[inline(always)]
pub fn ra_slot(after: &Regs, p: Packed) -> usize {
    after.sp.wrapping_add(ra_offset(p))
}

/// Largest plausible frame: a CFA further than this above the stack pointer means the rule or
/// the registers are wrong, and the walk stops rather than read wild memory.
const MAX_FRAME: usize = 64 << 20;

/// Applies a packed rule (kind RULE) to `regs`, the registers of the callee frame, giving the
/// caller's. Returns false when the result is implausible: the CFA must be word-aligned and lie
/// above the stack pointer by at least the rule's reach (so every slot read is inside
/// `[sp, cfa)`, the memory of this frame) and by at most `MAX_FRAME`.
#[inline(always)]
pub fn step_packed(regs: &mut Regs, p: Packed) -> bool {
    let base = if cfa_from_fp(p) { regs.fp } else { regs.sp };
    let cfa = base.wrapping_add(cfa_offset(p));
    let reach = ((p.0 as u32 >> REACH_SHIFT) as usize) * WORD;
    let size = cfa.wrapping_sub(regs.sp);
    if size.wrapping_sub(reach) > MAX_FRAME || cfa % WORD != 0 || reach == 0 {
        return false;
    }
    // SAFETY: [cfa - reach, cfa) lies inside [sp, cfa), the current frame of a live stack (sp
    // was a real stack pointer; the CFA is bounded above it by a plausible unwind rule), and
    // both offsets are word-aligned, negative and no further than `reach` below the CFA.
    let ra = unsafe { *(cfa.wrapping_add(ra_offset(p)) as *const usize) };
    let fp = if reads_fp(p) {
        // SAFETY: as above.
        unsafe { *(cfa.wrapping_add(fp_offset(p)) as *const usize) }
    } else if zeroes_fp(p) {
        0
    } else {
        regs.fp
    };
    regs.ra = if ra_signed(p) { strip_pac(ra) } else { ra };
    regs.sp = cfa;
    regs.fp = fp;
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pack_roundtrip() {
        let cases = [
            Entry::End,
            Entry::Unsupported,
            Entry::Rule(Rule {
                cfa_fp: false,
                cfa_off: 16,
                ra_off: -8,
                fp: FpRule::Same,
                ra_signed: false,
            }),
            Entry::Rule(Rule {
                cfa_fp: true,
                cfa_off: -4096,
                ra_off: -8,
                fp: FpRule::At(-16),
                ra_signed: true,
            }),
            Entry::Rule(Rule {
                cfa_fp: false,
                cfa_off: i32::MAX,
                ra_off: -MAX_SLOT,
                fp: FpRule::Zero,
                ra_signed: false,
            }),
        ];
        for e in cases {
            assert_eq!(Entry::unpack(e.pack()), Some(e));
            assert_eq!(from_pair(to_pair(e.pack())), e.pack());
        }
        assert_eq!(Entry::unpack([0; 4]), None);
        // Slots above the CFA or misaligned are not cacheable: the full unwinder handles them.
        for ra_off in [0, 8, -4, -MAX_SLOT - 8] {
            let r = Rule {
                cfa_fp: false,
                cfa_off: 16,
                ra_off,
                fp: FpRule::Same,
                ra_signed: false,
            };
            assert_eq!(
                Entry::unpack(Entry::Rule(r).pack()),
                Some(Entry::Unsupported)
            );
        }
        let r = Rule {
            cfa_fp: false,
            cfa_off: 16,
            ra_off: -8,
            fp: FpRule::At(8),
            ra_signed: false,
        };
        assert_eq!(
            Entry::unpack(Entry::Rule(r).pack()),
            Some(Entry::Unsupported)
        );
    }

    fn step(regs: &mut Regs, r: Rule) -> bool {
        step_packed(regs, to_pair(Entry::Rule(r).pack()))
    }

    #[test]
    fn step_reads_inside_frame_only() {
        // A fake frame: [sp] = saved fp, [sp+8] = return address; CFA = sp + 16.
        let frame: [usize; 4] = [0x1234, 0x5678, 0, 0];
        let sp = frame.as_ptr() as usize;
        let rule = Rule {
            cfa_fp: false,
            cfa_off: 16,
            ra_off: -8,
            fp: FpRule::At(-16),
            ra_signed: false,
        };
        let mut regs = Regs { ra: 1, sp, fp: 0 };
        assert!(step(&mut regs, rule));
        assert_eq!(
            regs,
            Regs {
                ra: 0x5678,
                sp: sp + 16,
                fp: 0x1234
            }
        );
        let mut regs = Regs {
            ra: 1,
            sp,
            fp: 0x99,
        };
        assert!(step(
            &mut regs,
            Rule {
                fp: FpRule::Same,
                ..rule
            }
        ));
        assert_eq!(
            regs,
            Regs {
                ra: 0x5678,
                sp: sp + 16,
                fp: 0x99
            }
        );
        let mut regs = Regs {
            ra: 1,
            sp,
            fp: 0x99,
        };
        assert!(step(
            &mut regs,
            Rule {
                fp: FpRule::Zero,
                ..rule
            }
        ));
        assert_eq!(regs.fp, 0);
        // CFA from the frame pointer.
        let mut regs = Regs {
            ra: 1,
            sp,
            fp: sp + 8,
        };
        assert!(step(
            &mut regs,
            Rule {
                cfa_fp: true,
                cfa_off: 8,
                ..rule
            }
        ));
        assert_eq!(
            regs,
            Regs {
                ra: 0x5678,
                sp: sp + 16,
                fp: 0x1234
            }
        );
        // Refused: CFA at or below sp, frame smaller than the slots read, misaligned CFA,
        // absurdly large frame.
        let refused = [
            Rule { cfa_off: 0, ..rule },
            Rule {
                cfa_off: -8,
                ..rule
            },
            Rule { cfa_off: 8, ..rule },
            Rule {
                cfa_off: 20,
                ..rule
            },
            Rule {
                cfa_off: i32::MAX & !7,
                ..rule
            },
        ];
        for r in refused {
            let mut regs = Regs { ra: 1, sp, fp: 0 };
            assert!(!step(&mut regs, r), "{r:?}");
            assert_eq!(regs, Regs { ra: 1, sp, fp: 0 });
        }
        let mut regs = Regs { ra: 1, sp, fp: 0 };
        assert!(!step(
            &mut regs,
            Rule {
                cfa_fp: true,
                ..rule
            }
        ));
    }
}
