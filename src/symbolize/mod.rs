//! Symbolization: turning captured pcs into map names, relative pcs and function names for the
//! log formats (docs/spec/errors.md#backtraces-in-reports) and heap dumps' `bt_info`
//! (docs/spec/abi.md#heap-dump), with the maps reader ([`maps`]) and the line formats
//! ([`format`]). Capture and unwinding live in src/backtrace/, which calls this module; this one
//! knows nothing of them and runs only on report paths.
//!
//! The model (docs/performance.md, "Symbolization"): a [`Symbolizer`] reads /proc/self/maps once
//! and re-reads it only when a pc is in no known map; each module's ELF file is opened once and
//! its symbol tables indexed once, sorted by address and binary-searched ([`elf`]); every
//! distinct pc is resolved once and kept in a pc → description cache, so a frame shared by
//! thousands of leaks costs one hash lookup after the first. `dladdr` is the last resort, for a
//! module whose file cannot be read. Suppression rules also ask for a pc's source file
//! ([`lines`]: the module's own DWARF line table, indexed on the first question), kept per pc
//! like the rest.
//!
//! A pc whose map is not executable now (its module was unloaded after the capture and the
//! range reused) is described as a pc in no map: the fast format prints the reference's value
//! for that case (`dladdr`'s answer, normally 0) and `<unknown>`; `backtrace_full` and `bt_info`
//! print the absolute pc, as libunwindstack does for a frame without a map.
//!
//! Lifetime: outside a report each backtrace gets a fresh symbolizer (the reference re-reads the
//! maps for every backtrace it logs). A report that logs many backtraces (the exit leak report,
//! the unreachable report, a heap dump) opens a [`Session`]: the symbolizer and its caches then
//! live until the last session ends, when its memory and file mappings are returned.
//!
//! Locking: the shared symbolizer is only ever try-locked on report paths (a thread that finds
//! it busy uses a private one on its stack), so no report waits for it, even one in a signal
//! handler that interrupted a holder; only fork preparation takes it blocking.
//! Everything it allocates comes from mmap ([`store`]); memory is read only through our own file
//! mappings or `process_vm_readv` ([`relpc`]), never through a map listed by an older maps read.

#[cfg(not(target_os = "android"))]
mod annotate;
mod demangle;
mod elf;
mod lines;
mod relpc;
mod rendered;
mod session;
mod store;
mod symindex;

pub mod format;
pub mod maps;

use crate::fmt::StackBuf;
use core::ffi::{c_char, c_void};
use demangle::NAME_MAX;
use elf::ModuleSymbols;
use format::{MapRef, Resolved};
use maps::Maps;
use relpc::ElfStart;
use store::PageVec;

pub use session::{Session, lock_raw, unlock_raw, with_symbolizer};

/// Whether `malloc-debug run`'s annotation server is there to ask (annotate.rs).
pub fn annotating() -> bool {
    #[cfg(not(target_os = "android"))]
    return annotate::configured();
    #[cfg(target_os = "android")]
    false
}

/// Modules whose files stay mapped at once; a report touches few, and one more evicts the
/// oldest (its index is rebuilt if needed again).
const MODULES: usize = 32;

/// A string kept in the symbolizer's arena: (offset, length).
#[derive(Clone, Copy, Default)]
struct Str(u32, u32);

/// One resolved pc, self-contained (names copied into the arena: a maps re-read or an
/// unloaded module leaves it valid).
#[derive(Clone, Copy, Default)]
struct Frame {
    pc: usize,
    rel_pc: u64,
    has_map: bool,
    map_name: Str,
    map_start: u64,
    map_offset: u64,
    elf_start_offset: u64,
    file: Option<Str>,
    symbol: Option<(Str, u64)>,
    /// The fast format's line after its frame number (`pc ...\n`), once rendered.
    fast_tail: Option<Str>,
    /// What `malloc-debug run` adds to this pc's frame lines, once asked (rendered.rs).
    #[cfg_attr(target_os = "android", allow(dead_code))]
    annotation: Option<Str>,
    /// The source file, once looked up (`Some(None)`: none known).
    source: Option<Option<Str>>,
}

struct Module {
    /// The file's path, in the arena.
    path: Str,
    /// `None`: the file could not be read (then `dladdr` answers for it).
    symbols: Option<ModuleSymbols>,
}

pub struct Symbolizer {
    maps: Option<Maps>,
    /// Per map index: 0 = not read yet, 1 = read (then `elf_starts` holds it).
    elf_known: PageVec<u8>,
    elf_starts: PageVec<ElfStart>,
    modules: [Option<Module>; MODULES],
    next_module: usize,
    /// Open-addressing table of `frames` indexes + 1 (0 = empty), keyed by pc.
    table: PageVec<u32>,
    frames: PageVec<Frame>,
    /// Frames (indexes) whose lines wait to be rendered and annotated together, fewer than a
    /// batch (rendered.rs).
    #[cfg(not(target_os = "android"))]
    queued: PageVec<u32>,
    strings: PageVec<u8>,
    /// `__cxa_demangle`'s address once searched for (0: none loaded).
    cxa_demangle: Option<usize>,
    /// The connection to `malloc-debug run`'s annotation server, if it runs the program.
    #[cfg(not(target_os = "android"))]
    annotator: annotate::Annotator,
}

impl Symbolizer {
    pub const fn new() -> Self {
        Symbolizer {
            maps: None,
            elf_known: PageVec::new(),
            elf_starts: PageVec::new(),
            modules: [const { None }; MODULES],
            next_module: 0,
            table: PageVec::new(),
            frames: PageVec::new(),
            strings: PageVec::new(),
            cxa_demangle: None,
            #[cfg(not(target_os = "android"))]
            queued: PageVec::new(),
            #[cfg(not(target_os = "android"))]
            annotator: annotate::Annotator::new(),
        }
    }

    fn read_maps(&mut self) {
        self.maps = Maps::read_self();
        let n = self.maps.as_ref().map_or(0, |m| m.entries().len());
        self.elf_known = PageVec::zeroed(n).unwrap_or_default();
        self.elf_starts = PageVec::zeroed(n).unwrap_or_default();
    }

    fn str(&self, s: Str) -> &[u8] {
        self.strings
            .as_slice()
            .get(s.0 as usize..(s.0 as usize).saturating_add(s.1 as usize))
            .unwrap_or(&[])
    }

    fn keep(&mut self, bytes: &[u8]) -> Str {
        keep_in(&mut self.strings, bytes)
    }

    /// `raw` demangled (a new string) or `raw` itself.
    fn demangled(&mut self, raw: Str) -> Str {
        let n = raw.1 as usize;
        if n >= NAME_MAX {
            return raw;
        }
        let mut copy = [0u8; NAME_MAX];
        copy[..n].copy_from_slice(self.str(raw));
        let cxa = if copy.starts_with(b"_Z") {
            self.cxa_demangle()
        } else {
            0
        };
        let mut out = [0u8; NAME_MAX];
        let shown = demangle::demangle(&copy[..n], cxa, &mut out);
        if shown.as_ptr() == copy.as_ptr() {
            return raw;
        }
        let shown_len = shown.len();
        self.keep(&out[..shown_len])
    }

    /// The description of `pc`, resolved now or found in the cache.
    fn frame(&mut self, pc: usize) -> Frame {
        match self.frame_index(pc) {
            Ok(i) => self.frames.as_slice()[i],
            Err(f) => f,
        }
    }

    /// The cache index of `pc`'s description, resolving it first if needed; the description
    /// itself when it could not be cached (out of memory).
    #[allow(
        clippy::result_large_err,
        reason = "the description itself is the rare out-of-memory answer; nothing to box it in"
    )]
    fn frame_index(&mut self, pc: usize) -> Result<usize, Frame> {
        if let Some(i) = self.cached(pc) {
            return Ok(i);
        }
        let f = self.resolve_now(pc);
        self.remember(f).ok_or(f)
    }

    fn cached(&self, pc: usize) -> Option<usize> {
        let t = self.table.as_slice();
        if t.is_empty() {
            return None;
        }
        let mask = t.len() - 1;
        let mut i = hash(pc) & mask;
        loop {
            let slot = t[i] as usize;
            if slot == 0 {
                return None;
            }
            let f = self.frames.as_slice().get(slot - 1)?;
            if f.pc == pc {
                return Some(slot - 1);
            }
            i = (i + 1) & mask;
        }
    }

    fn remember(&mut self, f: Frame) -> Option<usize> {
        // Keep the table at most half full; a failed growth only loses the caching.
        if (self.frames.len() + 1) * 2 > self.table.len() {
            let size = (self.table.len() * 2).max(1024);
            let mut table = PageVec::<u32>::zeroed(size)?;
            for (n, old) in self.frames.as_slice().iter().enumerate() {
                insert(table.as_mut_slice(), old.pc, n as u32 + 1);
            }
            self.table = table;
        }
        let n = self.frames.push(f)?;
        insert(self.table.as_mut_slice(), f.pc, n as u32 + 1);
        Some(n)
    }

    /// Calls `f` with `pc`'s source file, if its module's own line table names one; looked up
    /// once per pc.
    pub fn source_file(&mut self, pc: usize, f: &mut dyn FnMut(&[u8])) {
        let Ok(i) = self.frame_index(pc) else { return };
        let fr = self.frames.as_slice()[i];
        let source = match fr.source {
            Some(s) => s,
            None => {
                let s = self.look_up_source(&fr);
                self.frames.as_mut_slice()[i].source = Some(s);
                s
            }
        };
        if let Some(s) = source {
            f(self.str(s));
        }
    }

    fn look_up_source(&mut self, fr: &Frame) -> Option<Str> {
        // As for symbols: a module with a file of its own (not inside an APK).
        if !fr.has_map || fr.elf_start_offset != 0 {
            return None;
        }
        let mut path = [0u8; elf::PATH_MAX];
        let name = self.str(fr.map_name);
        if name.first() != Some(&b'/') || name.len() >= path.len() {
            return None;
        }
        let n = name.len();
        path[..n].copy_from_slice(name);
        let m = self.module(&path[..n])?;
        let mut out = StackBuf::<1024>::new();
        // A frame's pc is a return address: the call is the instruction before it.
        let vaddr = fr.rel_pc.saturating_sub(1);
        let found = self.modules[m]
            .as_mut()?
            .symbols
            .as_mut()?
            .source_file(vaddr, &mut out);
        let s = found.then(|| keep_in(&mut self.strings, out.as_bytes()))?;
        (s.1 as usize == out.len()).then_some(s)
    }

    /// The [`Resolved`] view of a cached description.
    fn with_resolved<R>(&self, fr: &Frame, f: impl FnOnce(&Resolved<'_>) -> R) -> R {
        let r = Resolved {
            map: fr.has_map.then(|| MapRef {
                name: self.str(fr.map_name),
                start: fr.map_start,
                offset: fr.map_offset,
                elf_start_offset: fr.elf_start_offset,
            }),
            pc: fr.pc as u64,
            rel_pc: fr.rel_pc,
            file: fr.file.map(|s| self.str(s)),
            symbol: fr.symbol.map(|(s, off)| (self.str(s), off)),
        };
        f(&r)
    }

    fn elf_start(&mut self, i: usize) -> ElfStart {
        let Some(maps) = &self.maps else {
            return ElfStart::default();
        };
        if self.elf_known.as_slice().get(i) == Some(&1) {
            return self.elf_starts.as_slice()[i];
        }
        let s = maps
            .entries()
            .get(i)
            .map_or(ElfStart::default(), relpc::elf_start);
        if let (Some(k), Some(v)) = (
            self.elf_known.as_mut_slice().get_mut(i),
            self.elf_starts.as_mut_slice().get_mut(i),
        ) {
            *k = 1;
            *v = s;
        }
        s
    }

    fn resolve_now(&mut self, pc: usize) -> Frame {
        if self.maps.is_none() {
            self.read_maps();
        }
        let mut found = self.maps.as_ref().and_then(|m| m.find(pc));
        if found.is_none() {
            // A module loaded since the maps were read, or a pc of one unloaded since.
            self.read_maps();
            found = self.maps.as_ref().and_then(|m| m.find(pc));
        }
        let executable = found
            .and_then(|i| Some(self.maps.as_ref()?.entries().get(i)?.flags))
            .is_some_and(|f| f & maps::PROT_EXEC != 0);
        if !executable {
            // A captured pc was in code. Memory that is not code now is the hole an unloaded
            // module left, reused since (often for this symbolizer's own pages): the pc is
            // printed as one in no map, not as a frame of whatever data lies there.
            found = None;
        }
        let mut frame = Frame {
            pc,
            ..Frame::default()
        };
        let mut raw_symbol: Option<(Str, u64)> = None;
        let mut map_path = [0u8; elf::PATH_MAX];
        let mut path_len = 0;
        let mut dl = None;
        if let Some(i) = found {
            let here = self.elf_start(i);
            let prev = if i > 0 {
                self.elf_start(i - 1)
            } else {
                ElfStart::default()
            };
            let Some(maps) = self.maps.as_ref() else {
                return frame;
            };
            let (rel, elf_start_offset) = relpc::rel_pc(maps, i, pc, here, prev);
            let e = maps.entries()[i];
            let name = maps.name(&e);
            frame.map_name = keep_in(&mut self.strings, name);
            // A path too long to open is named but not read (dladdr answers for it).
            if name.len() < map_path.len() {
                path_len = name.len();
                map_path[..path_len].copy_from_slice(name);
            }
            frame.has_map = true;
            frame.rel_pc = rel as u64;
            frame.map_start = e.start as u64;
            frame.map_offset = e.offset as u64;
            frame.elf_start_offset = elf_start_offset as u64;
        } else {
            let d = dladdr(pc);
            frame.rel_pc = d.saddr as u64;
            if let Some(f) = d.fname {
                frame.file = Some(self.keep(f));
            }
            dl = Some(d);
        }
        let path = &map_path[..path_len];
        if frame.has_map {
            // An ELF embedded in an APK has no file of its own to read.
            let module = (frame.elf_start_offset == 0 && path.first() == Some(&b'/'))
                .then(|| self.module(path))
                .flatten();
            let vaddr = frame.rel_pc;
            let Symbolizer {
                modules, strings, ..
            } = self;
            match module.and_then(|m| modules[m].as_ref()?.symbols.as_ref()) {
                // The file's own tables: `.symtab`, then `.dynsym` searched as `dladdr` would.
                Some(m) if m.has_dynsym() => {
                    raw_symbol = m
                        .symtab_function(vaddr)
                        .or_else(|| m.dladdr_symbol(vaddr))
                        .map(|(s, off)| (keep_in(strings, s), off));
                }
                m => {
                    raw_symbol = m
                        .and_then(|m| m.symtab_function(vaddr))
                        .map(|(s, off)| (keep_in(strings, s), off));
                    if raw_symbol.is_none() {
                        dl = Some(dladdr(pc));
                    }
                }
            }
        }
        if raw_symbol.is_none()
            && let Some(d) = &dl
            && let Some(s) = d.sname
        {
            raw_symbol = Some((self.keep(s), pc.wrapping_sub(d.saddr) as u64));
        }
        if let Some((raw, off)) = raw_symbol {
            frame.symbol = Some((self.demangled(raw), off));
        }
        frame
    }

    /// The slot of `path`'s module, opening it if needed.
    fn module(&mut self, path: &[u8]) -> Option<usize> {
        if let Some(i) = self
            .modules
            .iter()
            .position(|m| m.as_ref().is_some_and(|m| self.str(m.path) == path))
        {
            return Some(i);
        }
        let kept = self.keep(path);
        if kept.1 as usize != path.len() {
            return None;
        }
        let i = self.next_module;
        self.next_module = (i + 1) % MODULES;
        self.modules[i] = Some(Module {
            path: kept,
            symbols: ModuleSymbols::open(path),
        });
        Some(i)
    }

    /// Finds `__cxa_demangle` in the dynamic symbol tables of the loaded modules (never with
    /// `dlsym`: see demangle.rs), once per symbolizer: the executable first, then the other
    /// modules in address order (`dlsym(RTLD_DEFAULT)` would take load order; they differ only
    /// when two libraries both export it).
    fn cxa_demangle(&mut self) -> usize {
        if let Some(a) = self.cxa_demangle {
            return a;
        }
        let mut exe = [0u8; elf::PATH_MAX];
        // SAFETY: readlink into a local buffer, one byte left for the NUL.
        let n = unsafe {
            libc::readlink(
                c"/proc/self/exe".as_ptr(),
                exe.as_mut_ptr().cast(),
                exe.len() - 1,
            )
        };
        let exe = &exe[..n.max(0) as usize];
        let count = self.maps.as_ref().map_or(0, |m| m.entries().len());
        let mut found = 0;
        'passes: for pass in 0..2 {
            for i in 0..count {
                let Some(maps) = &self.maps else {
                    break 'passes;
                };
                let e = maps.entries()[i];
                let name = maps.name(&e);
                if e.offset != 0 || name.first() != Some(&b'/') || (pass == 0) != (name == exe) {
                    continue;
                }
                let mut path = [0u8; elf::PATH_MAX];
                let n = name.len().min(path.len());
                path[..n].copy_from_slice(&name[..n]);
                if let Some(a) = self.exported_in(i, &path[..n], b"__cxa_demangle") {
                    found = a;
                    break 'passes;
                }
            }
        }
        self.cxa_demangle = Some(found);
        found
    }

    /// The address of function `symbol` exported by the module whose ELF header starts map `i`
    /// (file `path`), if it lies in an executable map listed now.
    fn exported_in(&mut self, i: usize, path: &[u8], symbol: &[u8]) -> Option<usize> {
        let base = self.load_base(i)?;
        let m = self.module(path)?;
        let value = self.modules[m]
            .as_ref()?
            .symbols
            .as_ref()?
            .exported_function(symbol)?;
        let at = base.wrapping_add(value as usize);
        let maps = self.maps.as_ref()?;
        let j = maps.find(at)?;
        (maps.entries()[j].flags & maps::PROT_EXEC != 0).then_some(at)
    }

    /// The load bias of the module whose ELF header starts map `i` (offset 0): the map start
    /// minus the page-aligned address of the segment loaded from offset 0.
    fn load_base(&mut self, i: usize) -> Option<usize> {
        let e = *self.maps.as_ref()?.entries().get(i)?;
        let s = self.elf_start(i);
        if !s.valid {
            return None;
        }
        let first_vaddr = relpc::first_load_vaddr(&e)?;
        Some(
            e.start
                .wrapping_sub(first_vaddr & !(crate::platform::page_size() - 1)),
        )
    }
}

fn keep_in(strings: &mut PageVec<u8>, bytes: &[u8]) -> Str {
    match strings.extend(bytes) {
        Some(at) if at <= u32::MAX as usize && bytes.len() <= u32::MAX as usize => {
            Str(at as u32, bytes.len() as u32)
        }
        _ => Str::default(),
    }
}

fn hash(pc: usize) -> usize {
    (pc as u64)
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .rotate_right(29) as usize
}

fn insert(table: &mut [u32], pc: usize, value: u32) {
    if table.is_empty() {
        return;
    }
    let mask = table.len() - 1;
    let mut i = hash(pc) & mask;
    while table[i] != 0 {
        i = (i + 1) & mask;
    }
    table[i] = value;
}

struct Sym {
    fname: Option<&'static [u8]>,
    sname: Option<&'static [u8]>,
    saddr: usize,
}

/// The last resort: the loader's own answer (a module whose file cannot be read, a pc in no map).
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
    // SAFETY: the loader's strings live as long as their module; they are copied into the
    // symbolizer's arena before anything else runs.
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

#[cfg(test)]
mod tests;
