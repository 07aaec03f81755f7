//! The two backtrace log formats (docs/spec/errors.md#fast-format,
//! docs/spec/errors.md#full-format), written from a [`Resolved`] description so tests can feed
//! synthetic maps and symbols.

use crate::fmt::{Bytes, StackBuf};
use core::fmt::Write;

/// The map a pc falls in, as the formats need it.
#[derive(Clone, Copy, Debug)]
pub struct MapRef<'a> {
    pub name: &'a [u8],
    pub start: u64,
    /// The map's own file offset (the `(offset 0x..)` of docs/spec/errors.md#full-format).
    pub offset: u64,
    /// The ELF start offset (the `(offset 0x..)` of docs/spec/errors.md#fast-format; non-zero for
    /// libraries inside APKs).
    pub elf_start_offset: u64,
}

/// Everything known about one pc.
#[derive(Clone, Copy, Debug, Default)]
pub struct Resolved<'a> {
    pub map: Option<MapRef<'a>>,
    /// The absolute pc (what libunwindstack prints for a pc in no map: `backtrace_full`).
    pub pc: u64,
    /// pc relative to its ELF file (docs/spec/errors.md#fast-format; the symbol address, or 0,
    /// without a map).
    pub rel_pc: u64,
    /// `dladdr`'s file name, used when no map contains the pc.
    pub file: Option<&'a [u8]>,
    /// Function name (demangled when possible) and pc − symbol start.
    pub symbol: Option<(&'a [u8], u64)>,
}

#[cfg(target_pointer_width = "64")]
const PC_WIDTH: usize = 16;
#[cfg(target_pointer_width = "32")]
const PC_WIDTH: usize = 8;

/// `%016x` (`%08x` on ILP32) of a pc. Hand-written: `{:016x}` pads one `write_char` at a time,
/// which showed in the profile of a million-leak report.
fn write_pc(out: &mut impl Write, pc: u64) {
    let mut digits = [b'0'; 16];
    let mut v = pc;
    let mut i = digits.len();
    while v != 0 && i > 0 {
        i -= 1;
        digits[i] = b"0123456789abcdef"[(v & 0xf) as usize];
        v >>= 4;
    }
    let start = i.min(digits.len() - PC_WIDTH);
    // The digits are ASCII.
    let _ = out.write_str(core::str::from_utf8(&digits[start..]).unwrap_or(""));
}

/// `          #%02zd  pc %016x  name[ (offset 0x..)][ (symbol+dec)]\n`
pub fn fast_line(out: &mut impl Write, index: usize, r: &Resolved<'_>) {
    let name: &[u8] = match (&r.map, r.file) {
        (Some(m), _) => m.name,
        (None, Some(f)) => f,
        (None, None) => b"<unknown>",
    };
    let _ = write!(out, "          #{:02}  pc ", index);
    write_pc(out, r.rel_pc);
    let _ = write!(out, "  {}", Bytes(name));
    if let Some(m) = &r.map
        && m.elf_start_offset != 0
    {
        let _ = write!(out, " (offset 0x{:x})", m.elf_start_offset);
    }
    if let Some((sym, off)) = r.symbol {
        let _ = write!(out, " ({}+{})", Bytes(sym), off);
    }
    let _ = out.write_str("\n");
}

/// `          #%0zd  pc %016x  [(offset 0x..) ]name|<unknown>|<anonymous:..>[ (fn[+dec])]`
///
/// A pc in no map (its module unloaded since the capture) prints as libunwindstack prints a
/// frame without a map: the absolute pc and `<unknown>`.
pub fn full_line(out: &mut impl Write, index: usize, r: &Resolved<'_>) {
    let _ = write!(out, "          #{}  pc ", index);
    write_pc(out, if r.map.is_some() { r.rel_pc } else { r.pc });
    let _ = out.write_str("  ");
    match &r.map {
        None => {
            let _ = out.write_str("<unknown>");
        }
        Some(m) => {
            if m.offset != 0 {
                let _ = write!(out, "(offset 0x{:x}) ", m.offset);
            }
            if m.name.is_empty() {
                let _ = write!(out, "<anonymous:{:x}>", m.start);
            } else {
                let _ = write!(out, "{}", Bytes(m.name));
            }
        }
    }
    if let Some((sym, off)) = r.symbol
        && !sym.is_empty()
    {
        if off != 0 {
            let _ = write!(out, " ({}+{})", Bytes(sym), off);
        } else {
            let _ = write!(out, " ({})", Bytes(sym));
        }
    }
}

/// Source of [`Resolved`] descriptions (the real one reads /proc/self/maps, ELF headers and
/// `dladdr`; tests provide fixed data).
pub trait Resolver {
    /// Called before the lines of a backtrace are asked for: a resolver can do the work its
    /// new frames need at once (the annotation server's round trip, annotate.rs).
    fn prepare(&mut self, frames: &[usize]) {
        let _ = frames;
    }

    fn resolve(&mut self, pc: usize, f: &mut dyn FnMut(&Resolved<'_>));

    /// Appends frame `index`'s [`fast_line`] for `pc` to `out` (a resolver that caches can
    /// keep the rendered text per pc: only the frame number differs between two leaks).
    fn fast_line(&mut self, index: usize, pc: usize, out: &mut StackBuf<1024>) {
        self.resolve(pc, &mut |r| fast_line(out, index, r));
    }

    /// Appends frame `index`'s [`full_line`] for `pc` to `out`.
    fn full_line(&mut self, index: usize, pc: usize, out: &mut StackBuf<RECORD>) {
        self.resolve(pc, &mut |r| full_line(out, index, r));
    }

    /// Calls `f` with frame `index`'s [`fast_line`] for `pc` as parts, without the newline (a
    /// caching resolver hands its kept text over without copying it into a line first).
    fn fast_line_parts(&mut self, index: usize, pc: usize, f: &mut dyn FnMut(&[&[u8]])) {
        let mut line = StackBuf::<1024>::new();
        self.fast_line(index, pc, &mut line);
        let bytes = line.as_bytes();
        f(&[bytes.strip_suffix(b"\n").unwrap_or(bytes)]);
    }
}

/// The start of a [`fast_line`] up to the pc (`          #NN  pc `), without `core::fmt`.
pub fn fast_line_head(out: &mut StackBuf<1024>, index: usize) {
    if index < 100 {
        out.push_bytes(b"          #");
        out.push_bytes(&[b'0' + (index / 10) as u8, b'0' + (index % 10) as u8]);
        out.push_bytes(b"  pc ");
    } else {
        let _ = write!(out, "          #{:02}  pc ", index);
    }
}

/// Largest record handed to the log: liblog truncates longer payloads, so a long block is
/// split at line boundaries into several records.
pub const RECORD: usize = 4000;

/// Renders the fast-path block, calling `emit` with each record (normally one).
pub fn fast_block(
    frames: &[usize],
    res: &mut dyn Resolver,
    emit: &mut dyn FnMut(&mut StackBuf<RECORD>),
) {
    let mut rec = StackBuf::<RECORD>::new();
    // One line buffer for all frames (cleared, not re-zeroed, per line).
    let mut line = StackBuf::<1024>::new();
    for (i, &pc) in frames.iter().enumerate() {
        line.clear();
        res.fast_line(i, pc, &mut line);
        if rec.len() + line.len() > RECORD && !rec.is_empty() {
            emit(&mut rec);
            rec.clear();
        }
        rec.push_bytes(line.as_bytes());
    }
    if !rec.is_empty() {
        emit(&mut rec);
    }
}

/// Renders the full block: one record per frame.
pub fn full_block(
    frames: &[usize],
    res: &mut dyn Resolver,
    emit: &mut dyn FnMut(&mut StackBuf<RECORD>),
) {
    for (i, &pc) in frames.iter().enumerate() {
        let mut rec = StackBuf::<RECORD>::new();
        res.full_line(i, pc, &mut rec);
        emit(&mut rec);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fake;
    impl Resolver for Fake {
        fn resolve(&mut self, pc: usize, f: &mut dyn FnMut(&Resolved<'_>)) {
            let libc = MapRef {
                name: b"/system/lib64/libc.so",
                start: 0x7000_0000,
                offset: 0,
                elf_start_offset: 0,
            };
            let apk = MapRef {
                name: b"/data/app/base.apk",
                start: 0x7100_0000,
                offset: 0x5000,
                elf_start_offset: 0x4000,
            };
            let anon = MapRef {
                name: b"",
                start: 0x7200_0000,
                offset: 0,
                elf_start_offset: 0,
            };
            let r = match pc {
                7 => Resolved {
                    map: None,
                    pc: 0x7f12_3456_7890,
                    rel_pc: 0,
                    file: None,
                    symbol: None,
                },
                1 => Resolved {
                    map: Some(libc),
                    pc: 0,
                    rel_pc: 0x29310,
                    file: None,
                    symbol: Some((b"newlocale", 160)),
                },
                2 => Resolved {
                    map: Some(libc),
                    pc: 0,
                    rel_pc: 0x1000,
                    file: None,
                    symbol: None,
                },
                3 => Resolved {
                    map: Some(apk),
                    pc: 0,
                    rel_pc: 0x6000,
                    file: None,
                    symbol: Some((b"Java_foo", 0)),
                },
                4 => Resolved {
                    map: Some(anon),
                    pc: 0,
                    rel_pc: 0x10,
                    file: None,
                    symbol: None,
                },
                5 => Resolved {
                    map: None,
                    pc: 0x7f00_0000_4440,
                    rel_pc: 0x4440,
                    file: Some(b"/x/libdl.so"),
                    symbol: Some((b"dlopen", 12)),
                },
                _ => Resolved::default(),
            };
            f(&r)
        }
    }

    fn fast(frames: &[usize]) -> Vec<String> {
        let mut out = vec![];
        fast_block(frames, &mut Fake, &mut |r| {
            out.push(String::from_utf8(r.as_bytes().to_vec()).unwrap())
        });
        out
    }

    fn full(frames: &[usize]) -> Vec<String> {
        let mut out = vec![];
        full_block(frames, &mut Fake, &mut |r| {
            out.push(String::from_utf8(r.as_bytes().to_vec()).unwrap())
        });
        out
    }

    #[test]
    fn fast_format_matches_reference() {
        assert_eq!(
            fast(&[1, 2, 3, 4, 5, 6]),
            vec![concat!(
                "          #00  pc 0000000000029310  /system/lib64/libc.so (newlocale+160)\n",
                "          #01  pc 0000000000001000  /system/lib64/libc.so\n",
                "          #02  pc 0000000000006000  /data/app/base.apk (offset 0x4000) (Java_foo+0)\n",
                "          #03  pc 0000000000000010  \n",
                "          #04  pc 0000000000004440  /x/libdl.so (dlopen+12)\n",
                "          #05  pc 0000000000000000  <unknown>\n",
            )]
        );
    }

    #[test]
    fn pc_widths() {
        let mut b = StackBuf::<64>::new();
        for pc in [
            0u64,
            0x1,
            0xabc,
            0xffff_ffff,
            0x7fff_1234_5678_9abc,
            u64::MAX,
        ] {
            b.clear();
            write_pc(&mut b, pc);
            let want = format!("{:0w$x}", pc, w = PC_WIDTH);
            assert_eq!(b.as_bytes(), want.as_bytes());
        }
    }

    #[test]
    fn fast_format_index_padding_and_split() {
        let frames = [2usize; 120];
        let recs = fast(&frames);
        assert!(recs.len() > 1);
        assert!(recs.iter().all(|r| r.len() <= RECORD && r.ends_with('\n')));
        let all: String = recs.concat();
        assert_eq!(all.lines().count(), 120);
        assert!(
            all.lines()
                .nth(7)
                .unwrap()
                .starts_with("          #07  pc ")
        );
        assert!(
            all.lines()
                .nth(100)
                .unwrap()
                .starts_with("          #100  pc ")
        );
    }

    #[test]
    fn full_format_matches_reference() {
        let frames: Vec<usize> = vec![1, 2, 3, 4, 5, 6, 2, 2, 2, 2, 2, 7];
        let lines = full(&frames);
        assert_eq!(
            lines[0],
            "          #0  pc 0000000000029310  /system/lib64/libc.so (newlocale+160)"
        );
        assert_eq!(
            lines[1],
            "          #1  pc 0000000000001000  /system/lib64/libc.so"
        );
        assert_eq!(
            lines[2],
            "          #2  pc 0000000000006000  (offset 0x5000) /data/app/base.apk (Java_foo)"
        );
        assert_eq!(
            lines[3],
            "          #3  pc 0000000000000010  <anonymous:72000000>"
        );
        assert_eq!(
            lines[4],
            "          #4  pc 00007f0000004440  <unknown> (dlopen+12)"
        );
        assert_eq!(lines[5], "          #5  pc 0000000000000000  <unknown>");
        assert_eq!(
            lines[10],
            "          #10  pc 0000000000001000  /system/lib64/libc.so"
        );
        // An unloaded module's pc: the absolute pc, as libunwindstack prints a frame without a
        // map.
        assert_eq!(lines[11], "          #11  pc 00007f1234567890  <unknown>");
    }

    #[test]
    fn fast_format_of_a_pc_in_no_map_keeps_the_reference_value() {
        assert_eq!(
            fast(&[7]),
            vec!["          #00  pc 0000000000000000  <unknown>\n".to_string()]
        );
    }
}
