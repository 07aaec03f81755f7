//! Source files from a module's DWARF line tables (`.debug_line`, DWARF 2 to 5), for the
//! suppression rules, which match source files as LeakSanitizer's do (suppress.rs). gimli's
//! line reader needs an allocator, which this library does not have, so this is a small reader
//! of its own: only what names a pc's file.
//!
//! The model: the first question about a module walks its whole line table once and keeps,
//! sorted by address, one entry per *sequence* (a run of rows of contiguous code that starts
//! from the initial registers): its address range, its unit's header and the offset of its
//! first opcode. A lookup binary-searches the sequence and replays that sequence alone up to the
//! row whose range holds the address; the row's file index is then named from the unit's
//! header (directory + `/` + name; DWARF 5's directory 0 is the compilation directory, so its
//! paths are absolute; before DWARF 5 a path in the compilation directory stays relative).
//!
//! What is not read (no file is then known, and only function names and module paths match):
//! DWARF in a separate debug file (build id, `.gnu_debuglink`: distributions strip their
//! binaries, so their frames have no file here), compressed sections (`SHF_COMPRESSED`,
//! `.zdebug_*`: no inflater in the library), and string forms other than inline strings,
//! `DW_FORM_line_strp` and `DW_FORM_strp`. Every read is bounds-checked: a malformed table gives
//! "no file", never a fault.

use super::store::PageVec;
use crate::fmt::StackBuf;

/// The sections a lookup reads.
#[derive(Clone, Copy)]
pub struct Sections<'a> {
    pub line: &'a [u8],
    pub line_str: &'a [u8],
    pub str: &'a [u8],
}

#[derive(Clone, Copy, Default)]
struct Seq {
    start: u64,
    end: u64,
    /// Offset of the unit's header in `.debug_line`.
    unit: usize,
    /// Offset of the sequence's first opcode.
    ops: usize,
}

/// A module's sequences, sorted by start address.
pub struct LineIndex {
    seqs: PageVec<Seq>,
}

impl LineIndex {
    /// Walks every unit of `.debug_line` once.
    pub fn build(s: &Sections<'_>) -> Option<LineIndex> {
        let mut seqs = PageVec::<Seq>::new();
        let mut at = 0;
        while at < s.line.len() {
            let Some(h) = Header::parse(s.line, at) else {
                break;
            };
            let mut seq_ops = h.program;
            let mut first: Option<u64> = None;
            run(&h, s.line, h.program, |row, next_ops| {
                if first.is_none() {
                    first = Some(row.addr);
                }
                if row.end_sequence {
                    let start = first.take().unwrap_or(0);
                    // Code the linker dropped keeps address 0 (or a tombstone near u64::MAX).
                    if start != 0 && start < row.addr {
                        let _ = seqs.push(Seq {
                            start,
                            end: row.addr,
                            unit: at,
                            ops: seq_ops,
                        });
                    }
                    seq_ops = next_ops;
                }
                false
            });
            at = h.end;
        }
        seqs.as_mut_slice().sort_unstable_by_key(|q| q.start);
        Some(LineIndex { seqs })
    }

    /// Writes the source file of ELF virtual address `vaddr` to `out`; false when unknown.
    pub fn file_of(&self, s: &Sections<'_>, vaddr: u64, out: &mut StackBuf<1024>) -> bool {
        let seqs = self.seqs.as_slice();
        let i = seqs.partition_point(|q| q.start <= vaddr);
        let Some(q) = i.checked_sub(1).map(|i| seqs[i]) else {
            return false;
        };
        if vaddr >= q.end {
            return false;
        }
        let Some(h) = Header::parse(s.line, q.unit) else {
            return false;
        };
        let mut prev: Option<(u64, u64)> = None;
        let mut file = None;
        run(&h, s.line, q.ops, |row, _| {
            if let Some((addr, f)) = prev
                && addr <= vaddr
                && vaddr < row.addr
            {
                file = Some(f);
                return true;
            }
            if row.end_sequence {
                return true;
            }
            prev = Some((row.addr, row.file));
            false
        });
        file.is_some_and(|f| h.file_path(s, f, out))
    }
}

/// One row of the line-number matrix (only what naming a file needs).
struct Row {
    addr: u64,
    file: u64,
    end_sequence: bool,
}

/// A unit's header.
struct Header<'a> {
    version: u16,
    dwarf64: bool,
    addr_size: u8,
    min_inst: u8,
    default_file: u64,
    line_range: u8,
    opcode_base: u8,
    std_lengths: &'a [u8],
    /// Offsets (in `.debug_line`) of the directory and file tables.
    dirs: usize,
    files: usize,
    /// The program: first opcode, end of the unit.
    program: usize,
    end: usize,
}

impl<'a> Header<'a> {
    fn parse(b: &'a [u8], at: usize) -> Option<Header<'a>> {
        let mut c = Cursor { b, at };
        let (len, dwarf64) = match c.u32()? {
            0xffff_ffff => (c.u64()?, true),
            n if n >= 0xffff_fff0 => return None,
            n => (u64::from(n), false),
        };
        let end = c.at.checked_add(usize::try_from(len).ok()?)?;
        if end > b.len() {
            return None;
        }
        let version = c.u16()?;
        if !(2..=5).contains(&version) {
            return None;
        }
        let mut addr_size = size_of::<usize>() as u8;
        if version >= 5 {
            addr_size = c.u8()?;
            c.u8()?; // segment selector size
        }
        let header_len = c.offset(dwarf64)?;
        let program = c.at.checked_add(usize::try_from(header_len).ok()?)?;
        let min_inst = c.u8()?;
        if version >= 4 {
            c.u8()?; // maximum operations per instruction (VLIW only)
        }
        c.u8()?; // default_is_stmt
        c.u8()?; // line_base (lines are not tracked)
        let line_range = c.u8()?;
        let opcode_base = c.u8()?;
        let std_lengths = c.bytes(usize::from(opcode_base.saturating_sub(1)))?;
        let dirs = c.at;
        let files = if version >= 5 {
            // The directory table's entries are skipped on the way to the file table.
            skip_entries(&mut c, dwarf64)?;
            c.at
        } else {
            while !c.cstr()?.is_empty() {}
            c.at
        };
        (line_range != 0 && program <= end).then_some(Header {
            version,
            dwarf64,
            addr_size,
            min_inst,
            default_file: 1,
            line_range,
            opcode_base,
            std_lengths,
            dirs,
            files,
            program,
            end,
        })
    }

    /// Writes file `index`'s path (directory joined) to `out`.
    fn file_path(&self, s: &Sections<'_>, index: u64, out: &mut StackBuf<1024>) -> bool {
        let Some((name, dir)) = self.file_entry(s, index) else {
            return false;
        };
        if name.is_empty() {
            return false;
        }
        out.clear();
        if name[0] != b'/' {
            let dir_path = self.dir_entry(s, dir).unwrap_or(&[]);
            if dir_path.first().is_some_and(|&b| b != b'/') && self.version >= 5 && dir != 0 {
                // A DWARF 5 directory relative to the compilation directory (entry 0).
                if let Some(comp) = self.dir_entry(s, 0).filter(|d| !d.is_empty()) {
                    out.push_bytes(comp);
                    out.push_bytes(b"/");
                }
            }
            if !dir_path.is_empty() {
                out.push_bytes(dir_path);
                out.push_bytes(b"/");
            }
        }
        out.push_bytes(name);
        !out.truncated()
    }

    /// (name, directory index) of file `index`.
    fn file_entry(&self, s: &Sections<'a>, index: u64) -> Option<(&'a [u8], u64)> {
        let mut c = Cursor {
            b: s.line,
            at: self.files,
        };
        if self.version >= 5 {
            return self.v5_entry(&mut c, s, index);
        }
        // Before DWARF 5, files count from 1.
        let mut n = 1;
        loop {
            let name = c.cstr()?;
            if name.is_empty() {
                return None;
            }
            let dir = c.uleb()?;
            c.uleb()?; // modification time
            c.uleb()?; // length
            if n == index {
                return Some((name, dir));
            }
            n += 1;
        }
    }

    fn dir_entry(&self, s: &Sections<'a>, index: u64) -> Option<&'a [u8]> {
        let mut c = Cursor {
            b: s.line,
            at: self.dirs,
        };
        if self.version >= 5 {
            return self.v5_entry(&mut c, s, index).map(|(p, _)| p);
        }
        // Before DWARF 5, directory 0 is the compilation directory, which the header omits.
        let mut n = 1;
        loop {
            let dir = c.cstr()?;
            if dir.is_empty() {
                return None;
            }
            if n == index {
                return Some(dir);
            }
            n += 1;
        }
    }

    /// Entry `index` of the DWARF 5 table at `c`: (path, directory index).
    fn v5_entry(
        &self,
        c: &mut Cursor<'a>,
        s: &Sections<'a>,
        index: u64,
    ) -> Option<(&'a [u8], u64)> {
        let format_count = c.u8()?;
        let formats = c.at;
        for _ in 0..format_count {
            c.uleb()?;
            c.uleb()?;
        }
        let count = c.uleb()?;
        for n in 0..count {
            let mut f = Cursor {
                b: c.b,
                at: formats,
            };
            let (mut path, mut dir) = (None, 0);
            for _ in 0..format_count {
                let content = f.uleb()?;
                let form = f.uleb()?;
                let v = form_value(c, form, self.dwarf64, s)?;
                match (content, v) {
                    (DW_LNCT_PATH, Value::Str(p)) => path = Some(p),
                    (DW_LNCT_DIRECTORY_INDEX, Value::Num(d)) => dir = d,
                    _ => {}
                }
            }
            if n == index {
                return Some((path?, dir));
            }
        }
        None
    }
}

const DW_LNCT_PATH: u64 = 1;
const DW_LNCT_DIRECTORY_INDEX: u64 = 2;

enum Value<'a> {
    Str(&'a [u8]),
    Num(u64),
    Other,
}

/// Reads one attribute value of `form` (the forms DWARF 5 allows in line table headers).
fn form_value<'a>(
    c: &mut Cursor<'a>,
    form: u64,
    dwarf64: bool,
    s: &Sections<'a>,
) -> Option<Value<'a>> {
    let strp = |table: &'a [u8], off: u64| -> Option<Value<'a>> {
        let rest = table.get(usize::try_from(off).ok()?..)?;
        let n = rest.iter().position(|&b| b == 0)?;
        Some(Value::Str(&rest[..n]))
    };
    Some(match form {
        0x08 => Value::Str(c.cstr()?),                 // DW_FORM_string
        0x1f => strp(s.line_str, c.offset(dwarf64)?)?, // DW_FORM_line_strp
        0x0e => strp(s.str, c.offset(dwarf64)?)?,      // DW_FORM_strp
        0x0b => Value::Num(u64::from(c.u8()?)),        // DW_FORM_data1
        0x05 => Value::Num(u64::from(c.u16()?)),       // DW_FORM_data2
        0x06 => Value::Num(u64::from(c.u32()?)),       // DW_FORM_data4
        0x07 => Value::Num(c.u64()?),                  // DW_FORM_data8
        0x0f => Value::Num(c.uleb()?),                 // DW_FORM_udata
        0x1e => {
            c.bytes(16)?; // DW_FORM_data16 (an MD5)
            Value::Other
        }
        0x09 => {
            let n = c.uleb()?; // DW_FORM_block
            c.bytes(usize::try_from(n).ok()?)?;
            Value::Other
        }
        _ => return None,
    })
}

/// Skips a DWARF 5 entry table (formats, then entries).
fn skip_entries(c: &mut Cursor<'_>, dwarf64: bool) -> Option<()> {
    let format_count = c.u8()?;
    let formats = c.at;
    for _ in 0..format_count {
        c.uleb()?;
        c.uleb()?;
    }
    let count = c.uleb()?;
    let none = Sections {
        line: &[],
        line_str: &[],
        str: &[],
    };
    for _ in 0..count {
        let mut f = Cursor {
            b: c.b,
            at: formats,
        };
        for _ in 0..format_count {
            f.uleb()?;
            let form = f.uleb()?;
            // String forms read into empty tables fail: take the offset only.
            match form {
                0x1f | 0x0e => {
                    c.offset(dwarf64)?;
                }
                _ => {
                    form_value(c, form, dwarf64, &none)?;
                }
            }
        }
    }
    Some(())
}

/// Runs the line program from `ops` until `row` returns true, the unit ends or an opcode cannot
/// be read. `row` also gets the offset of the opcode after the row's.
fn run(h: &Header<'_>, b: &[u8], ops: usize, mut row: impl FnMut(Row, usize) -> bool) {
    let mut c = Cursor {
        b: &b[..h.end],
        at: ops,
    };
    let (mut addr, mut file) = (0u64, h.default_file);
    let min_inst = u64::from(h.min_inst);
    let line_range = u64::from(h.line_range);
    while c.at < h.end {
        let Some(op) = c.u8() else { return };
        let mut emit = None;
        if op >= h.opcode_base {
            let adj = u64::from(op - h.opcode_base);
            addr = addr.wrapping_add(adj / line_range * min_inst);
            emit = Some(false);
        } else if op == 0 {
            let Some(len) = c.uleb().and_then(|n| usize::try_from(n).ok()) else {
                return;
            };
            let start = c.at;
            let Some(sub) = c.u8() else { return };
            match sub {
                1 => emit = Some(true),
                2 => {
                    let Some(a) = c.addr(h.addr_size) else { return };
                    addr = a;
                }
                _ => {}
            }
            let Some(next) = start.checked_add(len) else {
                return;
            };
            c.at = next;
        } else {
            let ok = match op {
                1 => {
                    emit = Some(false);
                    Some(())
                }
                2 => c
                    .uleb()
                    .map(|n| addr = addr.wrapping_add(n.wrapping_mul(min_inst))),
                3 => c.sleb().map(|_| ()),
                4 => c.uleb().map(|f| file = f),
                8 => {
                    let adj = u64::from(255 - h.opcode_base);
                    addr = addr.wrapping_add(adj / line_range * min_inst);
                    Some(())
                }
                9 => c.u16().map(|d| addr = addr.wrapping_add(u64::from(d))),
                _ => {
                    // Any other standard opcode: skip its operands (ULEB128s, as the header
                    // says).
                    let n = h.std_lengths.get(usize::from(op) - 1).copied().unwrap_or(0);
                    (0..n).try_for_each(|_| c.uleb().map(|_| ()))
                }
            };
            if ok.is_none() {
                return;
            }
        }
        if let Some(end_sequence) = emit {
            if row(
                Row {
                    addr,
                    file,
                    end_sequence,
                },
                c.at,
            ) {
                return;
            }
            if end_sequence {
                (addr, file) = (0, h.default_file);
            }
        }
    }
}

/// A bounds-checked little/native-endian reader.
struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.b.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(s)
    }
    fn u8(&mut self) -> Option<u8> {
        Some(self.bytes(1)?[0])
    }
    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_ne_bytes(self.bytes(2)?.try_into().ok()?))
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_ne_bytes(self.bytes(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_ne_bytes(self.bytes(8)?.try_into().ok()?))
    }
    fn offset(&mut self, dwarf64: bool) -> Option<u64> {
        if dwarf64 {
            self.u64()
        } else {
            self.u32().map(u64::from)
        }
    }
    fn addr(&mut self, size: u8) -> Option<u64> {
        match size {
            4 => self.u32().map(u64::from),
            8 => self.u64(),
            _ => None,
        }
    }
    fn uleb(&mut self) -> Option<u64> {
        let (mut v, mut shift) = (0u64, 0u32);
        loop {
            let b = self.u8()?;
            if shift < 64 {
                v |= u64::from(b & 0x7f) << shift;
            }
            shift += 7;
            if b & 0x80 == 0 {
                return Some(v);
            }
        }
    }
    fn sleb(&mut self) -> Option<i64> {
        let (mut v, mut shift) = (0i64, 0u32);
        loop {
            let b = self.u8()?;
            if shift < 64 {
                v |= i64::from(b & 0x7f) << shift;
            }
            shift += 7;
            if b & 0x80 == 0 {
                if shift < 64 && b & 0x40 != 0 {
                    v |= -1i64 << shift;
                }
                return Some(v);
            }
        }
    }
    fn cstr(&mut self) -> Option<&'a [u8]> {
        let rest = self.b.get(self.at..)?;
        let n = rest.iter().position(|&b| b == 0)?;
        self.at += n + 1;
        Some(&rest[..n])
    }
}

#[cfg(test)]
#[path = "lines_tests.rs"]
mod tests;
