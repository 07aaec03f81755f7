//! Symbolization of dump frames through the dump's MAPS: the frame's map gives the file and the
//! file offset, the ELF program headers turn that into a virtual address, and then DWARF line
//! info (addr2line, inlined frames included) or else the ELF symbol tables (.symtab, .dynsym)
//! name it. With `--symbols DIR`, `DIR/<device path>` (a tree mirroring the device, like
//! `$ANDROID_PRODUCT_OUT/symbols`) is tried before the path itself.
//!
//! A module without DWARF gets it from its separate debug file, found the way gdb finds it: by
//! build id (`.build-id/xx/rest.debug` under `--symbols DIR` then /usr/lib/debug), then by
//! `.gnu_debuglink` (next to the module, in its `.debug/`, under /usr/lib/debug/<its dir>, then
//! in DIR), the link's CRC checked.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol, SymbolKind};

use crate::dump::Map;

type Reader = gimli::EndianSlice<'static, gimli::RunTimeEndian>;

struct Segment {
    file_offset: u64,
    file_size: u64,
    vaddr: u64,
}

#[derive(Clone)]
struct Symbol {
    addr: u64,
    size: u64,
    /// As the symbol table spells it, checked as UTF-8 and demangled only for the frames
    /// printed (a module has thousands of symbols, cc1 29,000, and a report names a few
    /// hundred).
    name: &'static [u8],
}

struct Module {
    segments: Vec<Segment>,
    /// The module and its separate debug file, for the symbols.
    file: object::File<'static>,
    debug: Option<object::File<'static>>,
    /// Sorted by address; read at the first lookup that needs a name from them. A log's frame
    /// lines never do (they carry their symbol, and only a pc with a source location is
    /// resolved), and reading and sorting libc's 10,000 or cc1's 29,000 was most of the time a
    /// module took to load.
    symbols: std::cell::OnceCell<Vec<Symbol>>,
    dwarf: Option<addr2line::Context<Reader>>,
}

/// One logical frame (a pc may expand into several when functions were inlined).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Resolved {
    pub function: Option<String>,
    pub file: Option<String>,
    pub line: Option<u32>,
}

#[derive(Clone, Debug)]
pub struct PcInfo {
    /// The map's name ("" for anonymous or unknown memory).
    pub module: String,
    /// Offset of the pc in the mapped file (pc itself when no map holds it).
    pub rel: u64,
    /// Innermost first; at least one entry.
    pub frames: Vec<Resolved>,
}

pub struct Symbolizer {
    symbols_dir: Option<PathBuf>,
    modules: HashMap<String, Option<Rc<Module>>>,
    pub missing: Vec<String>,
}

impl Symbolizer {
    pub fn new(symbols_dir: Option<PathBuf>) -> Symbolizer {
        Symbolizer {
            symbols_dir,
            modules: HashMap::new(),
            missing: Vec::new(),
        }
    }

    /// `pc` is a return address (every frame of a dump is): the call instruction is at pc - 1.
    pub fn resolve(&mut self, pc: u64, map: Option<&Map>) -> PcInfo {
        let Some(map) = map else {
            return PcInfo {
                module: String::new(),
                rel: pc,
                frames: vec![Resolved::default()],
            };
        };
        let rel = pc.wrapping_sub(map.start).wrapping_add(map.offset);
        let module = map.name.clone();
        let frames = self
            .module(&map.name)
            .and_then(|m| m.lookup(rel))
            .unwrap_or_else(|| vec![Resolved::default()]);
        PcInfo {
            module,
            rel,
            frames,
        }
    }

    /// The logical frames of `vaddr`, an address in `module`'s own address space (the `pc` of a
    /// log's backtrace line), innermost first; `None` when the module cannot be read. A pc
    /// without any source location comes back as one unnamed frame: a log line names its
    /// symbol already, and demangling a name nobody prints was most of the time a report of a
    /// C++ program without debug info took here.
    pub fn resolve_vaddr(&mut self, module: &str, vaddr: u64) -> Option<Vec<Resolved>> {
        self.module(module).map(|m| m.lookup_vaddr(vaddr, false))
    }

    /// Whether `module` has DWARF line information (in itself or a separate debug file);
    /// `None` when it cannot be read.
    pub fn has_line_info(&mut self, module: &str) -> Option<bool> {
        self.module(module).map(|m| m.dwarf.is_some())
    }

    fn module(&mut self, name: &str) -> Option<Rc<Module>> {
        if name.is_empty() || name.starts_with('[') {
            return None;
        }
        if let Some(m) = self.modules.get(name) {
            return m.clone();
        }
        let loaded = load_named(name, self.symbols_dir.as_deref()).map(Rc::new);
        if loaded.is_none() {
            self.missing.push(name.to_string());
        }
        self.modules.insert(name.to_string(), loaded.clone());
        loaded
    }
}

/// The module a log or dump names `name`: `DIR/<name>` and `DIR/<file name>` under
/// `--symbols DIR` first, then `name` itself.
fn load_named(name: &str, symbols_dir: Option<&Path>) -> Option<Module> {
    let mut candidates = Vec::new();
    if let Some(dir) = symbols_dir {
        candidates.push(dir.join(name.trim_start_matches('/')));
        if let Some(base) = Path::new(name).file_name() {
            candidates.push(dir.join(base));
        }
    }
    candidates.push(PathBuf::from(name));
    candidates.iter().find_map(|p| load(p, symbols_dir))
}

/// The file mapped for the process lifetime: the CLI runs once and exits, and a mapping that is
/// never unmapped lets the DWARF readers borrow it without self-referential structs. Mapped, not
/// read: a module and its debug file are megabytes of which a report touches a few pages, and
/// reading them whole was most of the time a short program's exit report took to symbolize.
fn read_leaked(path: &Path) -> Option<object::File<'static>> {
    object::File::parse(map_leaked(path)?).ok()
}

fn map_leaked(path: &Path) -> Option<&'static [u8]> {
    use std::os::fd::AsRawFd;
    let file = std::fs::File::open(path).ok()?;
    let len = usize::try_from(file.metadata().ok()?.len()).ok()?;
    if len == 0 {
        return Some(&[]);
    }
    // SAFETY: a private read-only mapping of a file we opened; the descriptor may close after
    // mmap returns. Modules are not rewritten while a run reports on them (a binary being
    // replaced gets a new inode; the old mapping stays valid).
    let at = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_PRIVATE,
            file.as_raw_fd(),
            0,
        )
    };
    if at == libc::MAP_FAILED {
        return None;
    }
    // SAFETY: `len` readable bytes at `at`, never unmapped: they live as long as the process.
    Some(unsafe { std::slice::from_raw_parts(at.cast::<u8>(), len) })
}

fn has_dwarf(file: &object::File<'_>) -> bool {
    file.section_by_name(".debug_info")
        .is_some_and(|s| s.size() > 0 && s.kind() != object::SectionKind::UninitializedData)
}

/// The separate debug file of `file` (at `path`), if one is installed.
fn debug_file(
    path: &Path,
    file: &object::File<'_>,
    symbols_dir: Option<&Path>,
) -> Option<object::File<'static>> {
    if let Ok(Some(id)) = file.build_id()
        && id.len() >= 2
    {
        let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
        let rel = format!(".build-id/{}/{}.debug", &hex[..2], &hex[2..]);
        let dirs = symbols_dir.into_iter().chain([Path::new("/usr/lib/debug")]);
        for dir in dirs {
            if let Some(f) = read_leaked(&dir.join(&rel)).filter(has_dwarf) {
                return Some(f);
            }
        }
    }
    let (link, crc) = file.gnu_debuglink().ok()??;
    let link = Path::new(std::str::from_utf8(link).ok()?);
    let dir = std::path::absolute(path).ok()?.parent()?.to_path_buf();
    let mut candidates = vec![
        dir.join(link),
        dir.join(".debug").join(link),
        Path::new("/usr/lib/debug")
            .join(dir.strip_prefix("/").unwrap_or(&dir))
            .join(link),
    ];
    candidates.extend(symbols_dir.map(|d| d.join(link)));
    candidates
        .into_iter()
        .filter(|c| c.as_path() != path)
        .find_map(|c| {
            let data = map_leaked(&c)?;
            let mut sum = flate2::Crc::new();
            sum.update(data);
            if sum.sum() != crc {
                return None;
            }
            object::File::parse(data).ok().filter(has_dwarf)
        })
}

fn load(path: &Path, symbols_dir: Option<&Path>) -> Option<Module> {
    let file = read_leaked(path)?;
    let debug = if has_dwarf(&file) {
        None
    } else {
        debug_file(path, &file, symbols_dir)
    };
    let segments = file
        .segments()
        .map(|s| {
            let (file_offset, file_size) = s.file_range();
            Segment {
                file_offset,
                file_size,
                vaddr: s.address(),
            }
        })
        .collect();
    let dwarf_file = debug.as_ref().unwrap_or(&file);
    let dwarf = if has_dwarf(dwarf_file) {
        let file = dwarf_file;
        let endian = if file.is_little_endian() {
            gimli::RunTimeEndian::Little
        } else {
            gimli::RunTimeEndian::Big
        };
        let dwarf = gimli::Dwarf::load(|id| -> std::result::Result<Reader, gimli::Error> {
            let data = file
                .section_by_name(id.name())
                .and_then(|s| s.data().ok())
                .unwrap_or(&[]);
            Ok(gimli::EndianSlice::new(data, endian))
        })
        .ok()?;
        addr2line::Context::from_dwarf(dwarf).ok()
    } else {
        None
    };
    Some(Module {
        segments,
        file,
        debug,
        symbols: std::cell::OnceCell::new(),
        dwarf,
    })
}

/// The text symbols of `file` and its debug file, one per address (`by_address`).
fn text_symbols(
    file: &object::File<'static>,
    debug: Option<&object::File<'static>>,
) -> Vec<Symbol> {
    let symbols: Vec<Symbol> = file
        .symbols()
        .chain(file.dynamic_symbols())
        .chain(debug.into_iter().flat_map(|d| d.symbols()))
        .filter(|s| s.kind() == SymbolKind::Text && s.address() != 0)
        .filter_map(|s| {
            Some(Symbol {
                addr: s.address(),
                size: s.size(),
                name: s.name_bytes().ok()?,
            })
        })
        .collect();
    by_address(symbols)
}

/// One symbol per address, sorted: of the symbols at an address the largest names it, the first
/// listed among equals (.symtab, .dynsym, then the debug file's). Sorts (address, index) pairs
/// packed in one integer: several times fewer instructions than a stable sort of the symbols on
/// libc's 10,000, and the index keeps the listing order within an address.
fn by_address(symbols: Vec<Symbol>) -> Vec<Symbol> {
    let mut keys: Vec<u128> = symbols
        .iter()
        .enumerate()
        .map(|(i, s)| (u128::from(s.addr) << 64) | i as u128)
        .collect();
    keys.sort_unstable();
    let mut out: Vec<Symbol> = Vec::with_capacity(keys.len());
    let mut last = None;
    for k in keys {
        let s = &symbols[k as u64 as usize];
        match out.last_mut() {
            Some(o) if last == Some(s.addr) => {
                if s.size > o.size {
                    *o = s.clone();
                }
            }
            _ => out.push(s.clone()),
        }
        last = Some(s.addr);
    }
    out
}

impl Module {
    fn vaddr(&self, file_offset: u64) -> Option<u64> {
        self.segments
            .iter()
            .find(|s| file_offset >= s.file_offset && file_offset - s.file_offset < s.file_size)
            .map(|s| file_offset - s.file_offset + s.vaddr)
    }

    fn symbol(&self, addr: u64) -> Option<&Symbol> {
        let symbols = self
            .symbols
            .get_or_init(|| text_symbols(&self.file, self.debug.as_ref()));
        let i = symbols.partition_point(|s| s.addr <= addr);
        let s = symbols.get(i.checked_sub(1)?)?;
        // Symbols without a size (hand-written assembly) own everything up to the next one.
        (s.size == 0 || addr < s.addr + s.size).then_some(s)
    }

    fn lookup(&self, file_offset: u64) -> Option<Vec<Resolved>> {
        Some(self.lookup_vaddr(self.vaddr(file_offset)?, true))
    }

    /// `vaddr` is a return address: the call is at vaddr - 1. `unlocated`: name the function
    /// from the symbol table even when no frame has a source location.
    fn lookup_vaddr(&self, vaddr: u64, unlocated: bool) -> Vec<Resolved> {
        let probe = vaddr.saturating_sub(1);
        let mut out = Vec::new();
        if let Some(ctx) = &self.dwarf
            && let Ok(mut frames) = ctx.find_frames(probe).skip_all_loads()
        {
            while let Ok(Some(frame)) = frames.next() {
                let function = frame
                    .function
                    .as_ref()
                    .and_then(|f| f.demangle().ok().map(Cow::into_owned));
                let (file, line) = frame
                    .location
                    .map(|l| (l.file.map(str::to_string), l.line))
                    .unwrap_or_default();
                out.push(Resolved {
                    function,
                    file,
                    line,
                });
            }
        }
        if out.is_empty() {
            out.push(Resolved::default());
        }
        if !unlocated && out.iter().all(|f| f.file.is_none()) {
            return vec![Resolved::default()];
        }
        // The outermost logical frame is the real function: the symbol table names it when DWARF
        // has no name.
        if let Some(last) = out.last_mut()
            && last.function.is_none()
        {
            last.function = self
                .symbol(probe)
                .and_then(|s| std::str::from_utf8(s.name).ok())
                .map(|name| addr2line::demangle_auto(Cow::Borrowed(name), None).into_owned());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Aliases (`malloc` and `__libc_malloc` share an address): the largest symbol names the
    /// address, the first listed among equal sizes, whatever order the sort leaves them in.
    #[test]
    fn one_symbol_per_address_largest_then_first_listed() {
        let s = |addr, size, name: &'static str| Symbol {
            addr,
            size,
            name: name.as_bytes(),
        };
        let listed = vec![
            s(0x30, 8, "c"),
            s(0x10, 4, "small"),
            s(0x10, 16, "first"),
            s(0x20, 0, "asm"),
            s(0x10, 16, "second"),
            s(0x20, 0, "asm2"),
        ];
        let got: Vec<(u64, &str)> = by_address(listed)
            .iter()
            .map(|s| (s.addr, std::str::from_utf8(s.name).unwrap()))
            .collect();
        assert_eq!(got, [(0x10, "first"), (0x20, "asm"), (0x30, "c")]);
    }
}
