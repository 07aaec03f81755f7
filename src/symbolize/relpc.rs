//! The pc relative to its ELF file (docs/spec/errors.md#fast-format, the reference's
//! CalculateRelPc), computed from the ELF header found at a map's start. The header is read with
//! `process_vm_readv`, which fails cleanly when the memory is gone: a map listed by an older read
//! of /proc/self/maps may belong to a module unloaded since (issue 20.2: a heap dump after
//! `dlclose` read a freed mapping).

use crate::symbolize::maps::{MapLine, Maps, PROT_EXEC, PROT_READ};

#[cfg(target_pointer_width = "32")]
use libc::Elf32_Phdr as Phdr;
#[cfg(target_pointer_width = "64")]
use libc::Elf64_Phdr as Phdr;

// ElfW(Ehdr) field offsets (the libc crate has no Ehdr type on every target).
#[cfg(target_pointer_width = "64")]
const E_PHOFF: usize = 32;
#[cfg(target_pointer_width = "64")]
const E_PHNUM: usize = 56;
#[cfg(target_pointer_width = "32")]
const E_PHOFF: usize = 28;
#[cfg(target_pointer_width = "32")]
const E_PHNUM: usize = 44;

/// Copies `out.len()` bytes of map `e` at `addr` (inside it, checked by the caller) into `out`;
/// false if they cannot be read. Through `process_vm_readv`, which answers EFAULT for memory
/// unmapped meanwhile. Where that system call does not exist or is refused (qemu's user mode,
/// sandboxes), the bytes are read directly, as the reference always reads them: they lie in a
/// readable map of this report's own /proc/self/maps read. Without that fallback every rel pc
/// there lost its load bias and named a wrong function.
fn read_memory(e: &MapLine, addr: usize, out: &mut [u8]) -> bool {
    if crate::platform::read_foreign(addr, out) {
        return true;
    }
    if crate::platform::can_read_foreign() || e.flags & PROT_READ == 0 {
        return false;
    }
    // SAFETY: [addr, addr + len) lies inside `e` (the caller checked), a readable mapping.
    unsafe { core::ptr::copy_nonoverlapping(addr as *const u8, out.as_mut_ptr(), out.len()) };
    true
}

/// Reads a value from inside map `e`, with the reference's bounds and alignment checks.
fn get<T: Copy + Default>(e: &MapLine, addr: usize) -> Option<T> {
    let size = core::mem::size_of::<T>();
    if addr < e.start || addr.checked_add(size)? > e.end || !addr.is_multiple_of(size) {
        return None;
    }
    let mut v = T::default();
    // SAFETY: T is a plain integer type: any bytes are a valid value.
    let bytes = unsafe { core::slice::from_raw_parts_mut((&mut v as *mut T).cast::<u8>(), size) };
    read_memory(e, addr, bytes).then_some(v)
}

/// What the ELF header at a map's start says: (is an ELF start, load bias = p_vaddr − p_offset
/// of the first executable PT_LOAD).
#[derive(Clone, Copy, Default)]
pub struct ElfStart {
    pub valid: bool,
    pub bias: usize,
}

pub fn elf_start(e: &MapLine) -> ElfStart {
    if e.flags & PROT_READ == 0 || e.start.checked_add(4).is_none_or(|x| x >= e.end) {
        return ElfStart::default();
    }
    let mut magic = [0u8; 4];
    if !read_memory(e, e.start, &mut magic) || &magic != b"\x7fELF" {
        return ElfStart::default();
    }
    let s = e.start;
    let bias = (|| {
        let phnum: u16 = get(e, s + E_PHNUM)?;
        let phoff: usize = get(e, s + E_PHOFF)?;
        let mut addr = s.checked_add(phoff)?;
        for _ in 0..phnum {
            let p_type: u32 = get(e, addr + core::mem::offset_of!(Phdr, p_type))?;
            let p_flags: u32 = get(e, addr + core::mem::offset_of!(Phdr, p_flags))?;
            if p_type == libc::PT_LOAD && p_flags & 1 != 0 {
                let off: usize = get(e, addr + core::mem::offset_of!(Phdr, p_offset))?;
                let vaddr: usize = get(e, addr + core::mem::offset_of!(Phdr, p_vaddr))?;
                return Some(vaddr.wrapping_sub(off));
            }
            addr = addr.checked_add(core::mem::size_of::<Phdr>())?;
        }
        None
    })()
    .unwrap_or(0);
    ElfStart { valid: true, bias }
}

/// (rel_pc, ELF start offset) for `pc` in map `i`, given the [`ElfStart`] of that map and of
/// the one before it (cached by the caller: one header read per map and report).
pub fn rel_pc(maps: &Maps, i: usize, pc: usize, here: ElfStart, prev: ElfStart) -> (usize, usize) {
    let v = maps.entries();
    let Some(e) = v.get(i) else { return (0, 0) };
    if !here.valid && i > 0 {
        let p = &v[i - 1];
        if p.flags & (PROT_READ | PROT_EXEC) == PROT_READ
            && p.offset < e.offset
            && maps.name(p) == maps.name(e)
            && prev.valid
        {
            return (
                pc.wrapping_sub(e.start)
                    .wrapping_add(e.offset)
                    .wrapping_add(prev.bias),
                p.offset,
            );
        }
    }
    (pc.wrapping_sub(e.start).wrapping_add(here.bias), 0)
}

/// `p_vaddr` of the PT_LOAD segment loaded from file offset 0, read from the ELF header at map
/// `e`'s start (where the module's load bias is measured from).
pub fn first_load_vaddr(e: &MapLine) -> Option<usize> {
    let s = e.start;
    let phnum: u16 = get(e, s + E_PHNUM)?;
    let phoff: usize = get(e, s + E_PHOFF)?;
    let mut addr = s.checked_add(phoff)?;
    for _ in 0..phnum {
        let p_type: u32 = get(e, addr + core::mem::offset_of!(Phdr, p_type))?;
        let off: usize = get(e, addr + core::mem::offset_of!(Phdr, p_offset))?;
        if p_type == libc::PT_LOAD && off == 0 {
            return get(e, addr + core::mem::offset_of!(Phdr, p_vaddr));
        }
        addr = addr.checked_add(core::mem::size_of::<Phdr>())?;
    }
    None
}
