//! The slow half of the cached unwinder: find the FDE of a return address through
//! `dl_iterate_phdr` + `.eh_frame_hdr`'s binary-search table, run its CIE/FDE programs up to the
//! address with gimli, and reduce the row to a [`Rule`] the cache can hold. Also: the loader's
//! module-set generation (cache invalidation) and the library's own code range.
//!
//! Everything runs inside the `dl_iterate_phdr` callback, with the loader lock held, so a
//! module cannot be unmapped while its tables are read. Nothing here allocates. Every call into
//! the loader goes through [`iterate_modules`]; a quarantined fork child (quarantine.rs) makes
//! none: it reads only the modules recorded at startup, which are never unloaded.

use super::quarantine;
use super::rule::{Entry, FpRule, Rule};
use core::ffi::{c_int, c_void};
use core::mem::size_of;
use core::slice;
use core::sync::atomic::{AtomicUsize, Ordering};
use libc::{PT_DYNAMIC, PT_GNU_EH_FRAME, PT_LOAD, dl_iterate_phdr, dl_phdr_info};

#[cfg(target_pointer_width = "32")]
use libc::Elf32_Phdr as Phdr;
#[cfg(target_pointer_width = "64")]
use libc::Elf64_Phdr as Phdr;

const PF_X: u32 = 1;

type Callback = unsafe extern "C" fn(*mut dl_phdr_info, usize, *mut c_void) -> c_int;

/// The one call of `dl_iterate_phdr` (the loader's lock): `cb` runs for each loaded module
/// with `data` until it returns non-zero. Never called in a quarantined fork child (the lock may
/// be held by a thread that no longer exists): there it visits nothing and returns 0, and the
/// callers that must answer anyway check [`quarantine::active`] first.
///
/// # Safety
/// `cb` must treat `data` as the type the caller passes.
pub(super) unsafe fn iterate_modules(cb: Callback, data: *mut c_void) -> c_int {
    if quarantine::active() {
        return 0;
    }
    // The loader's lock is held meanwhile: marked, with bionic's backtrace signal blocked, so
    // that no thread waits for the loader behind one that an unwinder parked (docs/design.md,
    // "The signal-33 rule"). Callers on allocation paths are marked already; this costs them
    // one key read.
    let _slow = crate::sync::DisabledScope::enter();
    // SAFETY: forwarded to the caller.
    unsafe { dl_iterate_phdr(Some(cb), data) }
}

/// The generation a quarantined child runs under: entries cached under it were computed from
/// permanent modules only. Real generations have 31 bits; the cache's markers are the top two
/// values.
const QUARANTINE_GENERATION: u32 = 0x8000_0000;

/// The program headers of a `dl_iterate_phdr` entry.
///
/// # Safety
/// `info` must come from `dl_iterate_phdr` and be used only inside the callback.
pub(super) unsafe fn phdrs(info: &dl_phdr_info) -> &[Phdr] {
    if info.dlpi_phdr.is_null() {
        return &[];
    }
    // SAFETY: the loader guarantees dlpi_phnum headers at dlpi_phdr while the callback runs.
    unsafe { slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) }
}

/// Size of `dl_phdr_info` up to and including `dlpi_subs` (bionic before Android 11 passes a
/// smaller size: the counters do not exist there).
const COUNTERS_END: usize = core::mem::offset_of!(dl_phdr_info, dlpi_subs) + size_of::<u64>();

/// A value that changes whenever a module is loaded or unloaded. Where the loader has
/// `dlpi_adds`/`dlpi_subs` (glibc, bionic ≥ 11) this costs one callback; elsewhere it is a
/// fingerprint of the whole module list. A quarantined fork child cannot ask the loader: its
/// generation never changes (and matches no entry cached by the parent).
pub fn generation() -> u32 {
    if quarantine::active() {
        return QUARANTINE_GENERATION;
    }
    struct Gen {
        value: u64,
        fingerprint: bool,
    }
    unsafe extern "C" fn cb(info: *mut dl_phdr_info, size: usize, data: *mut c_void) -> c_int {
        // SAFETY: called by dl_iterate_phdr with a valid info and our data pointer.
        let (info, g) = unsafe { (&*info, &mut *data.cast::<Gen>()) };
        if !g.fingerprint && size >= COUNTERS_END {
            g.value = info.dlpi_adds.wrapping_add(info.dlpi_subs);
            return 1;
        }
        g.fingerprint = true;
        let mut h = g.value.wrapping_add(1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        h ^= info.dlpi_addr as usize as u64;
        h = h.rotate_left(17) ^ info.dlpi_name as usize as u64;
        h = h.rotate_left(17) ^ info.dlpi_phdr as usize as u64;
        g.value = h;
        0
    }
    let mut g = Gen {
        value: 0,
        fingerprint: false,
    };
    // SAFETY: the callback only touches `g`.
    unsafe { iterate_modules(cb, (&raw mut g).cast()) };
    // 31 bits: the top values are the cache's ANY/UNKNOWN markers.
    ((g.value ^ (g.value >> 32)) as u32) & 0x7fff_ffff
}

/// Code ranges of the modules loaded when `startup` ran: the executable and its dependencies
/// (bionic loads this library from libc's own initialisation, the glibc front on the first
/// allocation), which the loaders never unload. Sorted by start; published once. Each range
/// also names its module (an index into `MODULES`: load base, program headers and their
/// count), whose tables a quarantined fork child reads without the loader's lock.
const MAX_PERMANENT: usize = 512;
const MAX_MODULES: usize = 256;
static PERMANENT: [[AtomicUsize; 3]; MAX_PERMANENT] =
    [const { [const { AtomicUsize::new(0) }; 3] }; MAX_PERMANENT];
static MODULES: [[AtomicUsize; 3]; MAX_MODULES] =
    [const { [const { AtomicUsize::new(0) }; 3] }; MAX_MODULES];
static PERMANENT_COUNT: AtomicUsize = AtomicUsize::new(0);

pub fn record_permanent_modules() {
    struct Collect {
        ranges: [(usize, usize, usize); MAX_PERMANENT],
        n: usize,
        modules: [(usize, usize, usize); MAX_MODULES],
        m: usize,
    }
    unsafe extern "C" fn cb(info: *mut dl_phdr_info, _size: usize, data: *mut c_void) -> c_int {
        // SAFETY: called by dl_iterate_phdr with a valid info and our data pointer.
        let (info, c) = unsafe { (&*info, &mut *data.cast::<Collect>()) };
        let base = info.dlpi_addr as usize;
        // A module without a slot is left out: its code counts as not permanent.
        let Some(module) = c.modules.get_mut(c.m) else {
            return 0;
        };
        *module = (base, info.dlpi_phdr as usize, info.dlpi_phnum as usize);
        // SAFETY: inside the callback.
        for p in unsafe { phdrs(info) }
            .iter()
            .filter(|p| p.p_type == PT_LOAD && p.p_flags & PF_X != 0)
        {
            if let Some(slot) = c.ranges.get_mut(c.n) {
                let s = base.wrapping_add(p.p_vaddr as usize);
                *slot = (s, s.wrapping_add(p.p_memsz as usize), c.m);
                c.n += 1;
            }
        }
        c.m += 1;
        0
    }
    if PERMANENT_COUNT.load(Ordering::Acquire) != 0 {
        return;
    }
    let mut c = Collect {
        ranges: [(0, 0, 0); MAX_PERMANENT],
        n: 0,
        modules: [(0, 0, 0); MAX_MODULES],
        m: 0,
    };
    // SAFETY: the callback only touches `c`.
    unsafe { iterate_modules(cb, (&raw mut c).cast()) };
    for (slot, &(base, phdr, phnum)) in MODULES.iter().zip(c.modules[..c.m].iter()) {
        slot[0].store(base, Ordering::Relaxed);
        slot[1].store(phdr, Ordering::Relaxed);
        slot[2].store(phnum, Ordering::Relaxed);
    }
    let v = &mut c.ranges[..c.n];
    v.sort_unstable();
    for (slot, &(s, e, m)) in PERMANENT.iter().zip(v.iter()) {
        slot[0].store(s, Ordering::Relaxed);
        slot[1].store(e, Ordering::Relaxed);
        slot[2].store(m, Ordering::Relaxed);
    }
    PERMANENT_COUNT.store(c.n, Ordering::Release);
}

/// The recorded range containing `pc`, if any.
fn permanent_range(pc: usize) -> Option<&'static [AtomicUsize; 3]> {
    let n = PERMANENT_COUNT.load(Ordering::Acquire).min(MAX_PERMANENT);
    let v = &PERMANENT[..n];
    let i = v.partition_point(|r| r[0].load(Ordering::Relaxed) <= pc);
    let r = v.get(i.checked_sub(1)?)?;
    (pc < r[1].load(Ordering::Relaxed)).then_some(r)
}

/// Whether `pc` lies in code recorded by `record_permanent_modules`.
pub fn is_permanent(pc: usize) -> bool {
    permanent_range(pc).is_some()
}

/// The load base and program headers of the permanent module whose code contains `pc`.
pub(super) fn permanent_module(pc: usize) -> Option<(usize, &'static [Phdr])> {
    let m = MODULES.get(permanent_range(pc)?[2].load(Ordering::Relaxed))?;
    let (base, phdr, phnum) = (
        m[0].load(Ordering::Relaxed),
        m[1].load(Ordering::Relaxed),
        m[2].load(Ordering::Relaxed),
    );
    if phdr == 0 {
        return Some((base, &[]));
    }
    // SAFETY: the headers the loader reported for a module it never unloads (its mapping, or
    // the loader's copy, lives as long as the process), published before PERMANENT_COUNT.
    Some((base, unsafe {
        slice::from_raw_parts(phdr as *const Phdr, phnum)
    }))
}

/// The executable segments of the module containing `addr`, as one `[start, end)` range
/// (lowest start to highest end), or `None`.
pub fn module_code_range(addr: usize) -> Option<(usize, usize)> {
    struct Find {
        addr: usize,
        range: Option<(usize, usize)>,
    }
    unsafe extern "C" fn cb(info: *mut dl_phdr_info, _size: usize, data: *mut c_void) -> c_int {
        // SAFETY: called by dl_iterate_phdr with a valid info and our data pointer.
        let (info, f) = unsafe { (&*info, &mut *data.cast::<Find>()) };
        let base = info.dlpi_addr as usize;
        // SAFETY: inside the callback.
        let ph = unsafe { phdrs(info) };
        let contains = ph.iter().any(|p| {
            p.p_type == PT_LOAD && {
                let s = base.wrapping_add(p.p_vaddr as usize);
                f.addr >= s && f.addr - s < p.p_memsz as usize
            }
        });
        if !contains {
            return 0;
        }
        let mut lo = usize::MAX;
        let mut hi = 0;
        for p in ph
            .iter()
            .filter(|p| p.p_type == PT_LOAD && p.p_flags & PF_X != 0)
        {
            let s = base.wrapping_add(p.p_vaddr as usize);
            lo = lo.min(s);
            hi = hi.max(s.wrapping_add(p.p_memsz as usize));
        }
        if lo < hi {
            f.range = Some((lo, hi));
        }
        1
    }
    let mut f = Find { addr, range: None };
    // SAFETY: the callback only touches `f`.
    unsafe { iterate_modules(cb, (&raw mut f).cast()) };
    f.range
}

/// Computes the unwind rule for the frame whose return address is `ra` (looked up at `ra - 1`).
pub fn lookup(ra: usize) -> Entry {
    struct Search {
        pc: usize,
        result: Entry,
    }
    unsafe extern "C" fn cb(info: *mut dl_phdr_info, _size: usize, data: *mut c_void) -> c_int {
        // SAFETY: called by dl_iterate_phdr with a valid info and our data pointer.
        let (info, s) = unsafe { (&*info, &mut *data.cast::<Search>()) };
        // SAFETY: inside the callback: the module stays mapped until we return.
        match unsafe { search_module(info, s.pc) } {
            None => 0,
            Some(entry) => {
                s.result = entry;
                1
            }
        }
    }
    if ra == 0 {
        return Entry::End;
    }
    if quarantine::active() {
        return quarantined_lookup(ra - 1);
    }
    let mut s = Search {
        pc: ra - 1,
        result: Entry::End,
    };
    // SAFETY: the callback only touches `s`.
    unsafe { iterate_modules(cb, (&raw mut s).cast()) };
    s.result
}

/// `lookup` in a quarantined fork child: only code recorded at startup has rules; elsewhere the
/// walk ends (the frames so far are kept). So does a frame that needs the full unwinder, which
/// would ask the loader.
pub(super) fn quarantined_lookup(pc: usize) -> Entry {
    let Some((base, ph)) = permanent_module(pc) else {
        return Entry::End;
    };
    // SAFETY: a permanent module stays mapped for the life of the process.
    match unsafe { search_phdrs(base, ph, pc) } {
        Some(Entry::Rule(r)) => Entry::Rule(r),
        _ => Entry::End,
    }
}

/// `None` if `pc` is not in this module; otherwise the rule (or End when the module has no
/// unwind information for it).
///
/// # Safety
/// Must run inside a `dl_iterate_phdr` callback for `info`.
unsafe fn search_module(info: &dl_phdr_info, pc: usize) -> Option<Entry> {
    // SAFETY: forwarded (inside the callback, the module stays mapped).
    unsafe { search_phdrs(info.dlpi_addr as usize, phdrs(info), pc) }
}

/// `search_module` for the module loaded at `base` with program headers `ph`.
///
/// # Safety
/// The module must stay mapped while this runs.
unsafe fn search_phdrs(base: usize, ph: &[Phdr], pc: usize) -> Option<Entry> {
    let mut text = None;
    let mut hdr = None;
    let mut dynamic = None;
    for p in ph {
        let start = base.wrapping_add(p.p_vaddr as usize);
        let len = p.p_memsz as usize;
        match p.p_type {
            PT_LOAD if pc >= start && pc - start < len => text = Some(start),
            PT_GNU_EH_FRAME => hdr = Some((start, len)),
            PT_DYNAMIC => dynamic = Some(start),
            _ => {}
        }
    }
    let text = text?;
    let Some((hdr, hdr_len)) = hdr else {
        return Some(Entry::End);
    };
    // SAFETY: forwarded (the module is mapped; its segments bound every slice).
    Some(
        unsafe { rule_from_tables(ph, base, text, hdr, hdr_len, dynamic, pc) }
            .unwrap_or(Entry::End),
    )
}

/// End of the `PT_LOAD` segment that contains `addr`.
fn segment_end(ph: &[Phdr], base: usize, addr: usize) -> Option<usize> {
    ph.iter().find_map(|p| {
        let s = base.wrapping_add(p.p_vaddr as usize);
        (p.p_type == PT_LOAD && addr >= s && addr - s < p.p_memsz as usize)
            .then(|| s + p.p_memsz as usize)
    })
}

/// gimli storage on the stack, sized for what real code needs; a program that needs more
/// fails with an error and the frame is handed to the full unwinder.
struct Storage;

impl gimli::UnwindContextStorage<usize> for Storage {
    type Rules = [(gimli::Register, gimli::RegisterRule<usize>); 32];
    type Stack = [gimli::UnwindTableRow<usize, Self>; 2];
}

/// # Safety
/// The module's segments must stay mapped (inside the `dl_iterate_phdr` callback).
unsafe fn rule_from_tables(
    ph: &[Phdr],
    base: usize,
    text: usize,
    hdr: usize,
    hdr_len: usize,
    dynamic: Option<usize>,
    pc: usize,
) -> Option<Entry> {
    use gimli::{BaseAddresses, EhFrame, EhFrameHdr, NativeEndian, Pointer, UnwindSection};

    let mut bases = BaseAddresses::default()
        .set_eh_frame_hdr(hdr as u64)
        .set_text(text as u64);
    // SAFETY: `dynamic` is the PT_DYNAMIC address of this mapped module (from dl_iterate_phdr).
    if let Some(got) = dynamic.and_then(|d| unsafe { dt_pltgot(ph, base, d) }) {
        bases = bases.set_got(got as u64);
    }
    // SAFETY: PT_GNU_EH_FRAME lies inside a mapped segment of p_memsz bytes.
    let hdr_bytes = unsafe { slice::from_raw_parts(hdr as *const u8, hdr_len) };
    let parsed = EhFrameHdr::new(hdr_bytes, NativeEndian)
        .parse(&bases, size_of::<usize>() as u8)
        .ok()?;
    let eh_frame = match parsed.eh_frame_ptr() {
        Pointer::Direct(a) => a as usize,
        // SAFETY: an indirect pointer points at a pointer-sized slot in the module.
        Pointer::Indirect(a) => unsafe { read_word_in(ph, base, a as usize)? },
    };
    let eh_end = segment_end(ph, base, eh_frame)?;
    bases = bases.set_eh_frame(eh_frame as u64);
    // SAFETY: [eh_frame, eh_end) is inside one mapped PT_LOAD segment.
    let eh_bytes: &'static [u8] =
        unsafe { slice::from_raw_parts(eh_frame as *const u8, eh_end - eh_frame) };
    #[allow(unused_mut)]
    let mut section = EhFrame::new(eh_bytes, NativeEndian);
    section.set_address_size(size_of::<usize>() as u8);
    #[cfg(target_arch = "aarch64")]
    section.set_vendor(gimli::Vendor::AArch64);
    let fde = match parsed.table() {
        Some(table) => table.fde_for_address(&section, &bases, pc as u64, EhFrame::cie_from_offset),
        None => section.fde_for_address(&bases, pc as u64, EhFrame::cie_from_offset),
    };
    let Ok(fde) = fde else {
        return Some(Entry::End);
    };
    if fde.is_signal_trampoline() {
        return Some(Entry::Unsupported);
    }
    let mut ctx = gimli::UnwindContext::<usize, Storage>::new_in();
    let Ok(row) = fde.unwind_info_for_address(&section, &bases, &mut ctx, pc as u64) else {
        return Some(Entry::Unsupported);
    };
    Some(translate(row))
}

/// Reduces a CFI row to the registers the cached walk tracks.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64", target_arch = "x86"))]
fn translate(row: &gimli::UnwindTableRow<usize, Storage>) -> Entry {
    use super::arch::{FP, RA, SP};
    use gimli::{CfaRule, RegisterRule};
    let (cfa_fp, cfa_off) = match *row.cfa() {
        CfaRule::RegisterAndOffset { register, offset } => {
            let Ok(off) = i32::try_from(offset) else {
                return Entry::Unsupported;
            };
            if register == SP {
                (false, off)
            } else if register == FP {
                (true, off)
            } else {
                return Entry::Unsupported;
            }
        }
        CfaRule::Expression(_) => return Entry::Unsupported,
    };
    let ra_off = match row.register(RA) {
        Some(RegisterRule::Offset(o)) => match i32::try_from(o) {
            Ok(o) => o,
            Err(_) => return Entry::Unsupported,
        },
        // No rule or an undefined return address: the outermost frame (_start, thread entry).
        None | Some(RegisterRule::Undefined) => return Entry::End,
        Some(_) => return Entry::Unsupported,
    };
    let fp = match row.register(FP) {
        None | Some(RegisterRule::SameValue) => FpRule::Same,
        Some(RegisterRule::Undefined) => FpRule::Zero,
        Some(RegisterRule::Offset(o)) => match i32::try_from(o) {
            Ok(o) => FpRule::At(o),
            Err(_) => return Entry::Unsupported,
        },
        Some(_) => return Entry::Unsupported,
    };
    #[cfg(target_arch = "aarch64")]
    let ra_signed = match row.register(super::arch::RA_SIGN_STATE) {
        None => false,
        Some(RegisterRule::Constant(v)) => v & 1 != 0,
        Some(_) => return Entry::Unsupported,
    };
    #[cfg(not(target_arch = "aarch64"))]
    let ra_signed = false;
    Entry::Rule(Rule {
        cfa_fp,
        cfa_off,
        ra_off,
        fp,
        ra_signed,
    })
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64", target_arch = "x86")))]
fn translate(_row: &gimli::UnwindTableRow<usize, Storage>) -> Entry {
    Entry::Unsupported
}

/// `DT_PLTGOT` from the dynamic section (the base of `DW_EH_PE_datarel` on some targets).
///
/// # Safety
/// The module must be mapped; `dynamic` is its PT_DYNAMIC address.
unsafe fn dt_pltgot(ph: &[Phdr], base: usize, dynamic: usize) -> Option<usize> {
    const DT_NULL: usize = 0;
    const DT_PLTGOT: usize = 3;
    let end = segment_end(ph, base, dynamic)?;
    let mut p = dynamic;
    while p + 2 * size_of::<usize>() <= end {
        // SAFETY: inside the mapped segment that holds PT_DYNAMIC.
        let (tag, val) = unsafe {
            (
                *(p as *const usize),
                *((p + size_of::<usize>()) as *const usize),
            )
        };
        match tag {
            DT_NULL => return None,
            DT_PLTGOT => return Some(val),
            _ => p += 2 * size_of::<usize>(),
        }
    }
    None
}

/// Reads a pointer-sized word at `addr` if it lies inside one of the module's segments.
///
/// # Safety
/// The module must be mapped.
unsafe fn read_word_in(ph: &[Phdr], base: usize, addr: usize) -> Option<usize> {
    let end = segment_end(ph, base, addr)?;
    if end - addr < size_of::<usize>() {
        return None;
    }
    // SAFETY: checked to be inside a mapped segment.
    Some(unsafe { (addr as *const usize).read_unaligned() })
}
