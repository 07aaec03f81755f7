//! Function names from an ELF file's `.symtab` (static functions, unexported symbols of
//! executables: what `dladdr` cannot see), read through a private read-only mapping of the
//! file. Error and report paths only. Every offset read from the file is bounds-checked: a
//! truncated or hostile file yields "no symbol", never a fault.

use core::ffi::c_int;

const SHT_SYMTAB: u32 = 2;
const STT_FUNC: u8 = 2;
const STT_GNU_IFUNC: u8 = 10;
const SHN_UNDEF: u16 = 0;
/// Files mapped at once; a leak report touches few modules, and each mapping is only address
/// space backed by the page cache.
const OPEN_FILES: usize = 4;
const PATH_MAX: usize = 512;

#[cfg(target_pointer_width = "64")]
mod layout {
    pub const ELF_CLASS: u8 = 2;
    pub const E_SHOFF: usize = 40;
    pub const E_SHENTSIZE: usize = 58;
    pub const E_SHNUM: usize = 60;
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

/// One mapped file: its path (to find it again) and its bytes.
struct Mapped {
    path: [u8; PATH_MAX],
    path_len: usize,
    base: *const u8,
    len: usize,
}

impl Mapped {
    fn bytes(&self) -> &[u8] {
        // SAFETY: `base..base+len` is a live PROT_READ mapping owned by this value (unmapped
        // only in `Drop`).
        unsafe { core::slice::from_raw_parts(self.base, self.len) }
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: the mapping was created by `map_file` and nothing borrows it past `self`.
        unsafe { libc::munmap(self.base as *mut _, self.len) };
    }
}

/// The files of recent lookups, mapped; a miss evicts the oldest.
pub struct SymtabFiles {
    files: [Option<Mapped>; OPEN_FILES],
    next: usize,
}

// SAFETY: the raw pointers are private read-only mappings with no thread affinity; the owner
// serializes access (a resolver is used by one thread at a time).
unsafe impl Send for SymtabFiles {}

impl SymtabFiles {
    pub const fn new() -> Self {
        SymtabFiles {
            files: [None, None, None, None],
            next: 0,
        }
    }

    /// The function of `path`'s `.symtab` containing ELF virtual address `vaddr`: its raw name
    /// and `vaddr` − its start.
    pub fn lookup(&mut self, path: &[u8], vaddr: u64) -> Option<(&[u8], u64)> {
        let i = match self.position(path) {
            Some(i) => i,
            None => {
                let i = self.next;
                self.files[i] = None;
                self.files[i] = Some(map_file(path)?);
                self.next = (i + 1) % OPEN_FILES;
                i
            }
        };
        function_at(self.files[i].as_ref()?.bytes(), vaddr)
    }

    fn position(&self, path: &[u8]) -> Option<usize> {
        self.files
            .iter()
            .position(|f| f.as_ref().is_some_and(|m| &m.path[..m.path_len] == path))
    }
}

fn map_file(path: &[u8]) -> Option<Mapped> {
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
    let base = if stat_ok && st.st_mode & libc::S_IFMT == libc::S_IFREG && len > 0 {
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
    if base == libc::MAP_FAILED {
        return None;
    }
    let mut m = Mapped {
        path: [0; PATH_MAX],
        path_len: path.len(),
        base: base as *const u8,
        len,
    };
    m.path[..path.len()].copy_from_slice(path);
    Some(m)
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

/// The `.symtab` function symbol containing `vaddr` in the ELF image `elf` (a whole file).
fn function_at(elf: &[u8], vaddr: u64) -> Option<(&[u8], u64)> {
    if elf.get(..4)? != b"\x7fELF" || *elf.get(4)? != ELF_CLASS {
        return None;
    }
    let shoff = word_at(elf, E_SHOFF)? as usize;
    let shentsize = u16_at(elf, E_SHENTSIZE)? as usize;
    let shnum = u16_at(elf, E_SHNUM)? as usize;
    let section = |i: usize| shoff.checked_add(i.checked_mul(shentsize)?);
    for i in 0..shnum {
        let sh = section(i)?;
        if u32_at(elf, sh + SH_TYPE)? != SHT_SYMTAB {
            continue;
        }
        let symbols = slice(elf, sh)?;
        let strtab = slice(elf, section(u32_at(elf, sh + SH_LINK)? as usize)?)?;
        return containing(symbols, strtab, vaddr);
    }
    None
}

/// The bytes a section header at `sh` describes.
fn slice(elf: &[u8], sh: usize) -> Option<&[u8]> {
    let off = word_at(elf, sh + SH_OFFSET)? as usize;
    let size = word_at(elf, sh + SH_SIZE)? as usize;
    elf.get(off..off.checked_add(size)?)
}

fn containing<'a>(symbols: &[u8], strtab: &'a [u8], vaddr: u64) -> Option<(&'a [u8], u64)> {
    for sym in symbols.chunks_exact(SYM_SIZE) {
        let kind = *sym.get(ST_INFO)? & 0xf;
        if (kind != STT_FUNC && kind != STT_GNU_IFUNC) || u16_at(sym, ST_SHNDX)? == SHN_UNDEF {
            continue;
        }
        let value = word_at(sym, ST_VALUE)?;
        let size = word_at(sym, ST_SIZE)?;
        if vaddr < value || vaddr - value >= size {
            continue;
        }
        let name = strtab.get(u32_at(sym, ST_NAME)? as usize..)?;
        let name = &name[..name.iter().position(|&c| c == 0)?];
        if !name.is_empty() {
            return Some((name, vaddr - value));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This test binary's own `.symtab` names one of its static functions.
    #[test]
    fn finds_a_static_function_of_this_executable() {
        #[inline(never)]
        fn marker() -> usize {
            core::hint::black_box(7)
        }
        let mut path = [0u8; PATH_MAX];
        // SAFETY: readlink into a local buffer, one byte left for the NUL.
        let n = unsafe {
            libc::readlink(
                c"/proc/self/exe".as_ptr(),
                path.as_mut_ptr().cast(),
                PATH_MAX - 1,
            )
        };
        assert!(n > 0);
        let exe = &path[..n as usize];
        let maps = super::super::maps::Maps::read_self().unwrap();
        let pc = marker as *const () as usize + 1;
        let i = maps.find(pc).unwrap();
        let (rel, _) = super::super::symbols::rel_pc(&maps, i, pc);
        assert_eq!(marker(), 7);
        let mut files = SymtabFiles::new();
        let (name, off) = files.lookup(exe, rel as u64).expect("symbol");
        let name = core::str::from_utf8(name).unwrap();
        assert!(name.contains("marker"), "{name}");
        assert_eq!(off, 1);
    }

    #[test]
    fn malformed_files_yield_nothing() {
        assert!(function_at(b"", 0).is_none());
        assert!(function_at(b"\x7fELF", 0).is_none());
        let mut elf = [0u8; 64];
        elf[..4].copy_from_slice(b"\x7fELF");
        elf[4] = ELF_CLASS;
        // Section headers claimed far outside the file.
        elf[E_SHOFF] = 0xff;
        elf[E_SHNUM] = 3;
        elf[E_SHENTSIZE] = 64;
        assert!(function_at(&elf, 0).is_none());
        let mut files = SymtabFiles::new();
        assert!(files.lookup(b"/nonexistent/file", 0).is_none());
        assert!(files.lookup(b"/proc/self", 0).is_none());
    }
}
