//! The live [`Resolver`]: maps from /proc/self/maps, the relative pc computed from the ELF
//! header at the map start (abi §7.5), symbols from the mapped file's `.symtab` when it has one
//! (as libunwindstack reads them) and else from `dladdr`, names demangled with `__cxa_demangle`
//! when the process has it. Error/report paths only.

use super::format::{MapRef, Resolved, Resolver};
use super::maps::{Maps, PROT_EXEC, PROT_READ};
use super::symtab::SymtabFiles;
use core::ffi::{c_char, c_int, c_void};
use core::sync::atomic::{AtomicUsize, Ordering};

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

pub struct LiveResolver {
    maps: Option<Maps>,
    name: [u8; 512],
    symtab: SymtabFiles,
}

impl LiveResolver {
    /// Reads the maps now (the reference re-reads them for every logged backtrace).
    pub fn new() -> Self {
        LiveResolver {
            maps: Maps::read_self(),
            name: [0; 512],
            symtab: SymtabFiles::new(),
        }
    }

    /// Re-reads the maps if `pc` is in none of them (a library loaded since the last read).
    pub fn refresh_for(&mut self, pc: usize) {
        if self.maps.as_ref().and_then(|m| m.find(pc)).is_none() {
            self.maps = Maps::read_self();
        }
    }
}

impl Resolver for LiveResolver {
    fn resolve(&mut self, pc: usize, f: &mut dyn FnMut(&Resolved<'_>)) {
        let sym = dladdr(pc);
        let mut out = Resolved {
            rel_pc: sym.saddr as u64,
            file: sym.fname,
            ..Resolved::default()
        };
        let mut raw_symbol = sym.sname.map(|s| (s, pc.wrapping_sub(sym.saddr) as u64));
        let LiveResolver { maps, name, symtab } = self;
        if let Some(maps) = maps
            && let Some(i) = maps.find(pc)
        {
            let (rel_pc, elf_start_offset) = rel_pc(maps, i, pc);
            let e = &maps.entries()[i];
            out.rel_pc = rel_pc as u64;
            let map_name = maps.name(e);
            out.map = Some(MapRef {
                name: map_name,
                start: e.start as u64,
                offset: e.offset as u64,
                elf_start_offset: elf_start_offset as u64,
            });
            // An ELF embedded in an APK has no file of its own to read.
            if elf_start_offset == 0
                && map_name.first() == Some(&b'/')
                && let Some(found) = symtab.lookup(map_name, rel_pc as u64)
            {
                raw_symbol = Some(found);
            }
        }
        if let Some((sname, offset)) = raw_symbol {
            out.symbol = Some((demangle(sname, name), offset));
        }
        f(&out)
    }
}

struct Sym {
    fname: Option<&'static [u8]>,
    sname: Option<&'static [u8]>,
    saddr: usize,
}

fn dladdr(pc: usize) -> Sym {
    let mut info = libc::Dl_info {
        dli_fname: core::ptr::null(),
        dli_fbase: core::ptr::null_mut(),
        dli_sname: core::ptr::null(),
        dli_saddr: core::ptr::null_mut(),
    };
    // SAFETY: info is a valid out-parameter; dladdr does not retain it.
    let ok = unsafe { libc::dladdr(pc as *const c_void, &mut info) } != 0;
    if !ok {
        return Sym {
            fname: None,
            sname: None,
            saddr: 0,
        };
    }
    // SAFETY: the loader's strings live as long as their module; they are used only while
    // formatting this frame.
    let cstr = |p: *const c_char| (!p.is_null()).then(|| unsafe { crate::fmt::c_str_bytes(p) });
    let sname = cstr(info.dli_sname);
    Sym {
        fname: cstr(info.dli_fname),
        sname,
        saddr: if sname.is_some() {
            info.dli_saddr as usize
        } else {
            0
        },
    }
}

type DemangleFn =
    unsafe extern "C" fn(*const c_char, *mut c_char, *mut usize, *mut c_int) -> *mut c_char;
static DEMANGLE: AtomicUsize = AtomicUsize::new(0);
const DEMANGLE_ABSENT: usize = 1;

/// `__cxa_demangle(name)` copied into `buf`, or `name` itself when demangling is unavailable
/// or fails. (`__cxa_demangle` mallocs: callers run with debug calls disabled, so that goes to
/// the native allocator.)
fn demangle<'a>(name: &'a [u8], buf: &'a mut [u8; 512]) -> &'a [u8] {
    let mut f = DEMANGLE.load(Ordering::Relaxed);
    if f == 0 {
        // SAFETY: NUL-terminated symbol name; RTLD_DEFAULT searches the global scope.
        let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"__cxa_demangle".as_ptr()) };
        f = if p.is_null() {
            DEMANGLE_ABSENT
        } else {
            p as usize
        };
        DEMANGLE.store(f, Ordering::Relaxed);
    }
    if f == DEMANGLE_ABSENT || !name.starts_with(b"_Z") || name.len() >= buf.len() {
        return name;
    }
    let mut cname = [0u8; 512];
    cname[..name.len()].copy_from_slice(name);
    // SAFETY: f is __cxa_demangle's address (dlsym above).
    let func: DemangleFn = unsafe { core::mem::transmute::<usize, DemangleFn>(f) };
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
        return name;
    }
    // SAFETY: a successful result is a NUL-terminated malloc'd string, freed right after.
    let len = unsafe {
        let s = crate::fmt::c_str_bytes(out);
        let n = s.len().min(buf.len());
        buf[..n].copy_from_slice(&s[..n]);
        libc::free(out.cast());
        n
    };
    if status != 0 {
        return name;
    }
    &buf[..len]
}

/// Reads a value from inside a readable map, with the reference's bounds and alignment checks.
fn get<T: Copy>(start: usize, end: usize, addr: usize) -> Option<T> {
    let size = core::mem::size_of::<T>();
    if addr < start || addr.checked_add(size)? > end || !addr.is_multiple_of(size) {
        return None;
    }
    // SAFETY: inside a mapping /proc/self/maps lists as readable.
    Some(unsafe { (addr as *const T).read() })
}

/// (is an ELF start, load bias = p_vaddr − p_offset of the first executable PT_LOAD).
fn elf_info(maps: &Maps, i: usize) -> (bool, usize) {
    let Some(e) = maps.entries().get(i) else {
        return (false, 0);
    };
    if e.flags & PROT_READ == 0 || e.start.checked_add(4).is_none_or(|x| x >= e.end) {
        return (false, 0);
    }
    // SAFETY: at least 4 readable bytes at the map start (checked above).
    let magic = unsafe { core::slice::from_raw_parts(e.start as *const u8, 4) };
    if magic != b"\x7fELF" {
        return (false, 0);
    }
    let (s, end) = (e.start, e.end);
    let bias = (|| {
        let phnum: u16 = get(s, end, s + E_PHNUM)?;
        let phoff: usize = get::<usize>(s, end, s + E_PHOFF)?;
        let mut addr = s.checked_add(phoff)?;
        for _ in 0..phnum {
            let p_type: u32 = get(s, end, addr + core::mem::offset_of!(Phdr, p_type))?;
            let p_flags: u32 = get(s, end, addr + core::mem::offset_of!(Phdr, p_flags))?;
            if p_type == libc::PT_LOAD && p_flags & 1 != 0 {
                let off: usize = get(s, end, addr + core::mem::offset_of!(Phdr, p_offset))?;
                let vaddr: usize = get(s, end, addr + core::mem::offset_of!(Phdr, p_vaddr))?;
                return Some(vaddr.wrapping_sub(off));
            }
            addr = addr.checked_add(core::mem::size_of::<Phdr>())?;
        }
        None
    })()
    .unwrap_or(0);
    (true, bias)
}

/// (rel_pc, ELF start offset) for `pc` in map `i` (the reference's CalculateRelPc).
pub(super) fn rel_pc(maps: &Maps, i: usize, pc: usize) -> (usize, usize) {
    let v = maps.entries();
    let Some(e) = v.get(i) else { return (0, 0) };
    let (valid, bias) = elf_info(maps, i);
    if !valid && i > 0 {
        let p = &v[i - 1];
        if p.flags & (PROT_READ | PROT_EXEC) == PROT_READ
            && p.offset < e.offset
            && maps.name(p) == maps.name(e)
        {
            let (pvalid, pbias) = elf_info(maps, i - 1);
            if pvalid {
                return (
                    pc.wrapping_sub(e.start)
                        .wrapping_add(e.offset)
                        .wrapping_add(pbias),
                    p.offset,
                );
            }
        }
    }
    (pc.wrapping_sub(e.start).wrapping_add(bias), 0)
}
