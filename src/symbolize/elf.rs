//! Function names from a module's ELF file: its `.symtab` (static functions, unexported symbols:
//! what `dladdr` cannot see, read as libunwindstack reads them) and its `.dynsym` searched the
//! way the C library's `dladdr` searches the loaded module, so that `dladdr` itself is needed
//! only when the file cannot be read. Each table is read once per report into an index sorted by
//! start address and binary-searched (docs/performance.md, "Symbolization"); the file is read
//! through a private read-only mapping. Every offset read from the file is bounds-checked: a
//! truncated or hostile file yields "no symbol", never a fault.

use super::lines::{LineIndex, Sections};
use super::symindex::{Pick, SymbolIndex, Table};
use crate::fmt::StackBuf;
use core::ffi::c_int;

const SHT_SYMTAB: u32 = 2;
const SHT_HASH: u32 = 5;
const SHT_DYNSYM: u32 = 11;
const SHT_GNU_HASH: u32 = 0x6fff_fff6;
const STT_FUNC: u8 = 2;
const STT_TLS: u8 = 6;
const STT_GNU_IFUNC: u8 = 10;
#[cfg(not(target_os = "android"))]
const STB_GLOBAL: u8 = 1;
#[cfg(not(target_os = "android"))]
const STB_WEAK: u8 = 2;
const SHN_UNDEF: u16 = 0;
#[cfg(not(target_os = "android"))]
const SHN_ABS: u16 = 0xfff1;
pub const PATH_MAX: usize = 512;

#[cfg(target_pointer_width = "64")]
mod layout {
    pub const ELF_CLASS: u8 = 2;
    pub const E_SHOFF: usize = 40;
    pub const E_SHENTSIZE: usize = 58;
    pub const E_SHNUM: usize = 60;
    pub const E_SHSTRNDX: usize = 62;
    pub const SH_NAME: usize = 0;
    pub const SH_FLAGS: usize = 8;
    pub const SH_TYPE: usize = 4;
    pub const SH_OFFSET: usize = 24;
    pub const SH_SIZE: usize = 32;
    pub const SH_LINK: usize = 40;
    pub const SYM_SIZE: usize = 24;
    pub const ST_NAME: usize = 0;
    pub const ST_INFO: usize = 4;
    pub const ST_SHNDX: usize = 6;
    pub const ST_VALUE: usize = 8;
    pub const ST_SIZE: usize = 16;
}
#[cfg(target_pointer_width = "32")]
mod layout {
    pub const ELF_CLASS: u8 = 1;
    pub const E_SHOFF: usize = 32;
    pub const E_SHENTSIZE: usize = 46;
    pub const E_SHNUM: usize = 48;
    pub const E_SHSTRNDX: usize = 50;
    pub const SH_NAME: usize = 0;
    pub const SH_FLAGS: usize = 8;
    pub const SH_TYPE: usize = 4;
    pub const SH_OFFSET: usize = 16;
    pub const SH_SIZE: usize = 20;
    pub const SH_LINK: usize = 24;
    pub const SYM_SIZE: usize = 16;
    pub const ST_NAME: usize = 0;
    pub const ST_VALUE: usize = 4;
    pub const ST_SIZE: usize = 8;
    pub const ST_INFO: usize = 12;
    pub const ST_SHNDX: usize = 14;
}
use layout::*;

/// One symbol table's index and where its names are.
struct Indexed {
    index: SymbolIndex,
    strtab: (usize, usize),
    /// Symbols with an empty name never win (libunwindstack's `.symtab` reading).
    skip_empty_names: bool,
}

/// One module's file, mapped, and the indexes of its symbol tables.
pub struct ModuleSymbols {
    base: *const u8,
    len: usize,
    symtab: Option<Indexed>,
    dynsym: Option<Indexed>,
    /// The line-table index, built on the first source-file question (`Some(None)`: none).
    lines: Option<Option<LineIndex>>,
}

// SAFETY: the pointer is a private read-only mapping owned by the value.
unsafe impl Send for ModuleSymbols {}

impl Drop for ModuleSymbols {
    fn drop(&mut self) {
        // SAFETY: the mapping was created by `open` and nothing borrows it past `self`.
        unsafe { libc::munmap(self.base as *mut _, self.len) };
    }
}

impl ModuleSymbols {
    /// Maps `path` and indexes its symbol tables; `None` when the file cannot be read.
    pub fn open(path: &[u8]) -> Option<ModuleSymbols> {
        let (base, len) = map_file(path)?;
        let mut m = ModuleSymbols {
            base,
            len,
            symtab: None,
            dynsym: None,
            lines: None,
        };
        m.index();
        Some(m)
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: `base..base+len` is a live PROT_READ mapping owned by self.
        unsafe { core::slice::from_raw_parts(self.base, self.len) }
    }

    /// Writes the source file of ELF virtual address `vaddr` (from the module's own
    /// `.debug_line`, see lines.rs) to `out`; false when unknown.
    pub fn source_file(&mut self, vaddr: u64, out: &mut StackBuf<1024>) -> bool {
        if self.lines.is_none() {
            let built = self.line_sections().and_then(|s| LineIndex::build(&s));
            self.lines = Some(built);
        }
        match (&self.lines, self.line_sections()) {
            (Some(Some(index)), Some(s)) => index.file_of(&s, vaddr, out),
            _ => false,
        }
    }

    fn line_sections(&self) -> Option<Sections<'_>> {
        let elf = self.bytes();
        let line = section_named(elf, b".debug_line")?;
        Some(Sections {
            line,
            line_str: section_named(elf, b".debug_line_str").unwrap_or(&[]),
            str: section_named(elf, b".debug_str").unwrap_or(&[]),
        })
    }

    /// True when the file has a dynamic symbol table this module can search like `dladdr`.
    pub fn has_dynsym(&self) -> bool {
        self.dynsym.is_some()
    }

    /// The `.symtab` function containing ELF virtual address `vaddr`: raw name, `vaddr` − start.
    pub fn symtab_function(&self, vaddr: u64) -> Option<(&[u8], u64)> {
        self.lookup(self.symtab.as_ref()?, vaddr)
    }

    /// The symbol `dladdr` would return for `vaddr` (in the same module): raw name and offset.
    pub fn dladdr_symbol(&self, vaddr: u64) -> Option<(&[u8], u64)> {
        self.lookup(self.dynsym.as_ref()?, vaddr)
    }

    fn lookup(&self, table: &Indexed, vaddr: u64) -> Option<(&[u8], u64)> {
        let (off, len) = table.strtab;
        let strtab = self.bytes().get(off..off + len)?;
        let empty = |name: u32| strtab.get(name as usize) == Some(&0);
        let (name, offset) = table
            .index
            .find(vaddr, |n| table.skip_empty_names && empty(n))?;
        let name = strtab.get(name as usize..)?;
        let name = &name[..name.iter().position(|&c| c == 0)?];
        Some((name, offset))
    }

    /// The value of the defined function `name` in the dynamic symbol table.
    pub fn exported_function(&self, name: &[u8]) -> Option<u64> {
        let elf = self.bytes();
        let (sh, _) = find_section(elf, SHT_DYNSYM)?;
        let symbols = section_bytes(elf, sh)?;
        let strtab = section_bytes(
            elf,
            section_header(elf, u32_at(elf, sh + SH_LINK)? as usize)?,
        )?;
        symbols.chunks_exact(SYM_SIZE).find_map(|sym| {
            let kind = sym[ST_INFO] & 0xf;
            if (kind != STT_FUNC && kind != STT_GNU_IFUNC) || u16_at(sym, ST_SHNDX)? == SHN_UNDEF {
                return None;
            }
            let s = strtab.get(u32_at(sym, ST_NAME)? as usize..)?;
            (s.get(..name.len())? == name && s.get(name.len()) == Some(&0))
                .then(|| word_at(sym, ST_VALUE))
                .flatten()
        })
    }

    fn index(&mut self) {
        let elf = self.bytes();
        if elf.get(..4) != Some(b"\x7fELF") || elf.get(4) != Some(&ELF_CLASS) {
            return;
        }
        let symtab = find_section(elf, SHT_SYMTAB).and_then(|(sh, _)| build_symtab(elf, sh));
        let dynsym = find_section(elf, SHT_DYNSYM).and_then(|(sh, _)| build_dynsym(elf, sh));
        self.symtab = symtab;
        self.dynsym = dynsym;
    }
}

/// `.symtab` as libunwindstack reads it: defined functions (and ifuncs) of non-zero size; a
/// symbol with an empty name is skipped, one whose name is out of bounds ends the search.
fn build_symtab(elf: &[u8], sh: usize) -> Option<Indexed> {
    let symbols = section_bytes(elf, sh)?;
    let strtab_sh = section_header(elf, u32_at(elf, sh + SH_LINK)? as usize)?;
    let strtab = section_range(elf, strtab_sh)?;
    let range = |sym: &[u8]| {
        let kind = sym[ST_INFO] & 0xf;
        let size = word_at(sym, ST_SIZE)?;
        if (kind != STT_FUNC && kind != STT_GNU_IFUNC) || u16_at(sym, ST_SHNDX)? == SHN_UNDEF {
            return None;
        }
        let name = u32_at(sym, ST_NAME)?;
        let value = word_at(sym, ST_VALUE)?;
        Some((value, value.checked_add(size)?, name))
    };
    let table = Table {
        symbols,
        entry_size: SYM_SIZE,
        strtab_len: strtab.1,
        first_order: 0,
        range,
    };
    Some(Indexed {
        index: SymbolIndex::build(table, Pick::First)?,
        strtab,
        // Left out at lookup, not here: see SymbolIndex::find.
        skip_empty_names: true,
    })
}

/// `.dynsym` as the C library's `dladdr` searches a loaded module.
fn build_dynsym(elf: &[u8], sh: usize) -> Option<Indexed> {
    let symbols = section_bytes(elf, sh)?;
    let strtab_sh = section_header(elf, u32_at(elf, sh + SH_LINK)? as usize)?;
    let strtab = section_range(elf, strtab_sh)?;
    let count = symbols.len() / SYM_SIZE;
    // The symbols `dladdr` visits: with a GNU hash table, those it references (from its
    // `symoffset` on, in table order, which is bucket order); with a SysV table, its `nchain`
    // first ones; without either, all of them.
    let gnu = find_section(elf, SHT_GNU_HASH)
        .and_then(|(h, _)| section_bytes(elf, h))
        .and_then(|h| u32_at(h, 4));
    let sysv = find_section(elf, SHT_HASH)
        .and_then(|(h, _)| section_bytes(elf, h))
        .and_then(|h| u32_at(h, 4));
    let (first, last, any_binding) = match (gnu, sysv) {
        (Some(symoffset), _) => (symoffset as usize, count, true),
        (None, Some(nchain)) => (0, (nchain as usize).min(count), false),
        (None, None) => (0, count, false),
    };
    #[cfg(target_os = "android")]
    let _ = any_binding;
    let symbols = symbols.get(first * SYM_SIZE..last * SYM_SIZE)?;
    #[cfg(not(target_os = "android"))]
    let pick = Pick::Closest;
    #[cfg(target_os = "android")]
    let pick = Pick::First;
    let strtab_len = strtab.1;
    let range = |sym: &[u8]| {
        let info = sym[ST_INFO];
        let shndx = u16_at(sym, ST_SHNDX)?;
        let value = word_at(sym, ST_VALUE)?;
        let size = word_at(sym, ST_SIZE)?;
        let name = u32_at(sym, ST_NAME)?;
        if info & 0xf == STT_TLS {
            return None;
        }
        #[cfg(target_os = "android")]
        {
            // bionic's soinfo::find_symbol_by_address: defined, and containing the address.
            let _ = strtab_len;
            (shndx != SHN_UNDEF && size != 0).then_some((value, value.checked_add(size)?, name))
        }
        #[cfg(not(target_os = "android"))]
        {
            // glibc's _dl_addr (elf/dl-addr.c): the SysV walk takes global and weak symbols
            // only; an undefined or zero-size symbol matches its own address only.
            let binding = info >> 4;
            if !any_binding && binding != STB_GLOBAL && binding != STB_WEAK {
                return None;
            }
            if (shndx == SHN_UNDEF && value == 0) || shndx == SHN_ABS || name as usize >= strtab_len
            {
                return None;
            }
            let end = if shndx == SHN_UNDEF || size == 0 {
                value.checked_add(1)?
            } else {
                value.checked_add(size)?
            };
            Some((value, end, name))
        }
    };
    let table = Table {
        symbols,
        entry_size: SYM_SIZE,
        strtab_len,
        first_order: first,
        range,
    };
    Some(Indexed {
        index: SymbolIndex::build(table, pick)?,
        strtab,
        skip_empty_names: false,
    })
}

fn map_file(path: &[u8]) -> Option<(*const u8, usize)> {
    if path.is_empty() || path.len() >= PATH_MAX || path.contains(&0) {
        return None;
    }
    let mut cpath = [0u8; PATH_MAX];
    cpath[..path.len()].copy_from_slice(path);
    // SAFETY: NUL-terminated path in a local buffer.
    let fd: c_int = unsafe { libc::open(cpath.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    // SAFETY: an all-zero `stat` is a valid out-parameter.
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    // SAFETY: fd is open; st is a valid out-parameter.
    let stat_ok = unsafe { libc::fstat(fd, &mut st) } == 0;
    let len = st.st_size as usize;
    let base = if stat_ok && crate::platform::is_file_type(&st, libc::S_IFREG) && len > 0 {
        // SAFETY: a fresh private read-only mapping of a regular file; nothing else aliases it.
        unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                fd,
                0,
            )
        }
    } else {
        libc::MAP_FAILED
    };
    // SAFETY: fd is ours; the mapping outlives it.
    unsafe { libc::close(fd) };
    (base != libc::MAP_FAILED).then_some((base as *const u8, len))
}

fn read<const N: usize>(b: &[u8], at: usize) -> Option<[u8; N]> {
    b.get(at..at.checked_add(N)?)?.try_into().ok()
}
fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    read::<2>(b, at).map(u16::from_ne_bytes)
}
fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    read::<4>(b, at).map(u32::from_ne_bytes)
}
fn word_at(b: &[u8], at: usize) -> Option<u64> {
    #[cfg(target_pointer_width = "64")]
    return read::<8>(b, at).map(u64::from_ne_bytes);
    #[cfg(target_pointer_width = "32")]
    return u32_at(b, at).map(u64::from);
}

/// Offset of section header `i`.
fn section_header(elf: &[u8], i: usize) -> Option<usize> {
    let shoff = word_at(elf, E_SHOFF)? as usize;
    let shentsize = u16_at(elf, E_SHENTSIZE)? as usize;
    let shnum = u16_at(elf, E_SHNUM)? as usize;
    (i < shnum).then_some(())?;
    shoff.checked_add(i.checked_mul(shentsize)?)
}

/// The first section of type `kind`: (header offset, index).
fn find_section(elf: &[u8], kind: u32) -> Option<(usize, usize)> {
    let shnum = u16_at(elf, E_SHNUM)? as usize;
    (0..shnum).find_map(|i| {
        let sh = section_header(elf, i)?;
        (u32_at(elf, sh + SH_TYPE)? == kind).then_some((sh, i))
    })
}

/// The bytes of the section called `name`; `None` when absent or compressed (`SHF_COMPRESSED`:
/// the library has no inflater).
pub(super) fn section_named<'a>(elf: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
    const SHF_COMPRESSED: u64 = 0x800;
    let shnum = u16_at(elf, E_SHNUM)? as usize;
    let names = section_bytes(elf, section_header(elf, u16_at(elf, E_SHSTRNDX)? as usize)?)?;
    let sh = (0..shnum).find_map(|i| {
        let sh = section_header(elf, i)?;
        let at = u32_at(elf, sh + SH_NAME)? as usize;
        let rest = names.get(at..)?;
        (rest.starts_with(name) && rest.get(name.len()) == Some(&0)).then_some(sh)
    })?;
    if word_at(elf, sh + SH_FLAGS)? & SHF_COMPRESSED != 0 {
        return None;
    }
    section_bytes(elf, sh)
}

/// (offset, size) of the bytes a section header describes, checked against the file.
fn section_range(elf: &[u8], sh: usize) -> Option<(usize, usize)> {
    let off = word_at(elf, sh + SH_OFFSET)? as usize;
    let size = word_at(elf, sh + SH_SIZE)? as usize;
    elf.get(off..off.checked_add(size)?)?;
    Some((off, size))
}

fn section_bytes(elf: &[u8], sh: usize) -> Option<&[u8]> {
    let (off, size) = section_range(elf, sh)?;
    elf.get(off..off + size)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exe() -> Vec<u8> {
        std::fs::read_link("/proc/self/exe")
            .unwrap()
            .into_os_string()
            .into_encoded_bytes()
    }

    /// This test binary's own `.symtab` names one of its static functions.
    #[test]
    fn finds_a_static_function_of_this_executable() {
        #[inline(never)]
        fn marker() -> usize {
            core::hint::black_box(7)
        }
        let maps = crate::symbolize::maps::Maps::read_self().unwrap();
        let pc = marker as *const () as usize + 1;
        let i = maps.find(pc).unwrap();
        let here = super::super::relpc::elf_start(&maps.entries()[i]);
        let prev = super::super::relpc::elf_start(&maps.entries()[i - 1]);
        let (rel, _) = super::super::relpc::rel_pc(&maps, i, pc, here, prev);
        assert_eq!(marker(), 7);
        let m = ModuleSymbols::open(&exe()).expect("module");
        let (name, off) = m.symtab_function(rel as u64).expect("symbol");
        let name = core::str::from_utf8(name).unwrap();
        assert!(name.contains("marker"), "{name}");
        assert_eq!(off, 1);
    }

    /// The `.dynsym` search agrees with the C library's own `dladdr` on every exported
    /// function of the C library.
    #[test]
    fn dynsym_search_agrees_with_dladdr() {
        let pc = libc::getpid as *const () as usize;
        // SAFETY: Dl_info is plain data (pointers and integers); all zeros is a valid value.
        let mut info: libc::Dl_info = unsafe { core::mem::zeroed() };
        // SAFETY: valid out-parameter.
        assert!(unsafe { libc::dladdr(pc as *const _, &mut info) } != 0);
        // SAFETY: dladdr succeeded, so dli_fname is the loader's NUL-terminated file name, which
        // lives as long as the module (the C library, never unloaded).
        let path = unsafe { crate::fmt::c_str_bytes(info.dli_fname) };
        let base = info.dli_fbase as usize;
        let m = ModuleSymbols::open(path).expect("libc");
        let mut checked = 0;
        for f in [
            libc::getpid as *const () as usize,
            libc::malloc as *const () as usize,
            libc::open as *const () as usize,
        ] {
            for delta in [0usize, 1, 7, 40] {
                let pc = f + delta;
                // SAFETY: Dl_info is plain data; all zeros is a valid value.
                let mut info: libc::Dl_info = unsafe { core::mem::zeroed() };
                // SAFETY: valid out-parameter.
                unsafe { libc::dladdr(pc as *const _, &mut info) };
                let want = (!info.dli_sname.is_null()).then(|| {
                    // SAFETY: the loader's NUL-terminated name.
                    let n = unsafe { crate::fmt::c_str_bytes(info.dli_sname) };
                    (n.to_vec(), (pc - info.dli_saddr as usize) as u64)
                });
                let got = m
                    .symtab_function((pc - base) as u64)
                    .or_else(|| m.dladdr_symbol((pc - base) as u64))
                    .map(|(n, o)| (n.to_vec(), o));
                assert_eq!(got, want, "pc {pc:#x}");
                checked += 1;
            }
        }
        assert_eq!(checked, 12);
    }

    /// A `.symtab` function with an empty name never wins: the named function around it
    /// answers, as libunwindstack reads the table (a synthetic file: null symbol, an empty-named
    /// function first in table order, then a named one containing it).
    #[cfg(target_pointer_width = "64")]
    #[test]
    fn symtab_functions_with_empty_names_never_win() {
        let strtab = b"\0outer\0";
        let mut symtab = vec![0u8; SYM_SIZE];
        for (name, value, size) in [(0u32, 0x1000u64, 0x100u64), (1, 0x800, 0x1000)] {
            let mut sym = [0u8; SYM_SIZE];
            sym[ST_NAME..ST_NAME + 4].copy_from_slice(&name.to_le_bytes());
            sym[ST_INFO] = STT_FUNC;
            sym[ST_SHNDX..ST_SHNDX + 2].copy_from_slice(&1u16.to_le_bytes());
            sym[ST_VALUE..ST_VALUE + 8].copy_from_slice(&value.to_le_bytes());
            sym[ST_SIZE..ST_SIZE + 8].copy_from_slice(&size.to_le_bytes());
            symtab.extend_from_slice(&sym);
        }
        let mut elf = vec![0u8; 64];
        elf[..4].copy_from_slice(b"\x7fELF");
        elf[4] = ELF_CLASS;
        let symtab_at = elf.len();
        elf.extend_from_slice(&symtab);
        let strtab_at = elf.len();
        elf.extend_from_slice(strtab);
        let shoff = elf.len();
        elf[E_SHOFF..E_SHOFF + 8].copy_from_slice(&(shoff as u64).to_le_bytes());
        elf[E_SHENTSIZE..E_SHENTSIZE + 2].copy_from_slice(&64u16.to_le_bytes());
        elf[E_SHNUM..E_SHNUM + 2].copy_from_slice(&3u16.to_le_bytes());
        // Section headers: null, .symtab (linked to 2), .strtab.
        for (kind, at, size, link) in [
            (0u32, 0usize, 0usize, 0u32),
            (SHT_SYMTAB, symtab_at, symtab.len(), 2),
            (3, strtab_at, strtab.len(), 0),
        ] {
            let mut sh = [0u8; 64];
            sh[SH_TYPE..SH_TYPE + 4].copy_from_slice(&kind.to_le_bytes());
            sh[SH_OFFSET..SH_OFFSET + 8].copy_from_slice(&(at as u64).to_le_bytes());
            sh[SH_SIZE..SH_SIZE + 8].copy_from_slice(&(size as u64).to_le_bytes());
            sh[SH_LINK..SH_LINK + 4].copy_from_slice(&link.to_le_bytes());
            elf.extend_from_slice(&sh);
        }
        let path = std::env::temp_dir().join(format!("elf-empty-names-{}", std::process::id()));
        std::fs::write(&path, &elf).unwrap();
        let m = ModuleSymbols::open(path.as_os_str().as_encoded_bytes()).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(m.symtab_function(0x1010), Some((&b"outer"[..], 0x810)));
        assert_eq!(m.symtab_function(0x900), Some((&b"outer"[..], 0x100)));
        assert_eq!(m.symtab_function(0x1800), None);
    }

    #[test]
    fn malformed_files_yield_nothing() {
        assert!(ModuleSymbols::open(b"/nonexistent/file").is_none());
        assert!(ModuleSymbols::open(b"/proc/self").is_none());
        assert!(ModuleSymbols::open(b"").is_none());
        let dir = std::env::temp_dir().join(format!("elf-malformed-{}", std::process::id()));
        let mut elf = vec![0u8; 64];
        elf[..4].copy_from_slice(b"\x7fELF");
        elf[4] = ELF_CLASS;
        // Section headers claimed far outside the file.
        elf[E_SHOFF] = 0xff;
        elf[E_SHNUM] = 3;
        elf[E_SHENTSIZE] = 64;
        std::fs::write(&dir, &elf).unwrap();
        let m = ModuleSymbols::open(dir.as_os_str().as_encoded_bytes()).unwrap();
        assert!(m.symtab_function(0).is_none() && m.dladdr_symbol(0).is_none());
        assert!(m.exported_function(b"x").is_none());
        std::fs::remove_file(&dir).unwrap();
    }
}
