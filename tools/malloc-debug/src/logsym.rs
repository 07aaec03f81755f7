//! Source locations for the backtrace frames of a malloc_debug log, and `malloc-debug symbolize`.
//!
//! The library's log keeps AOSP's exact frame lines (`#01  pc 00000000000011ad  /bin/prog
//! (main+16)`, and `backtrace_full`'s variant): location is added by the CLI, after the fact, by
//! appending to each frame line `  FUNCTION at FILE:LINE` (`, inlined into FUNCTION at FILE:LINE`
//! for each caller an inlined function was folded into). A frame's `pc` is an address in its
//! module's own ELF address space, so the module file (or its separate debug file, see
//! `symbolize`) is all that is needed: no maps. Everything else passes through byte for byte.
//!
//! `run` streams the program's stderr through [`filter`]; `symbolize` reads a saved log or
//! `adb logcat` text, whatever the logcat layout, since frames are found anywhere in a line.
//!
//! Cost: an exit report is tens of thousands of frame lines naming a few hundred pcs, so each
//! (module, pc) is resolved once and every other line is only parsed (as bytes), looked up and
//! copied; a pc without a source location gets nothing appended and is never named or demangled
//! (docs/performance.md, "Short programs, 2026-11-26 third session").

use std::collections::HashMap;
use std::ffi::OsString;
use std::hash::{BuildHasherDefault, Hasher};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::ExitCode;

use crate::args::Spec;
use crate::symbolize::{Resolved, Symbolizer};
use crate::{Result, err};

/// One frame of a backtrace line: the module as logged and the pc in it.
#[derive(Debug, PartialEq, Eq)]
struct Frame<'a> {
    module: &'a str,
    /// The pc's hex digits (1 to 16).
    hex: &'a [u8],
}

impl Frame<'_> {
    fn pc(&self) -> u64 {
        self.hex.iter().fold(0, |pc, &c| {
            // An ASCII hex digit: its low four bits, plus 9 for letters.
            (pc << 4) | u64::from((c & 0xf) + if c > b'9' { 9 } else { 0 })
        })
    }

    /// The digits right-aligned in sixteen zeros, as one number: the same for every spelling
    /// of one pc with or without leading zeros, and taken in a few instructions where
    /// converting them is a few per digit.
    fn key(&self) -> u128 {
        let mut digits = [b'0'; 16];
        digits[16 - self.hex.len()..].copy_from_slice(self.hex);
        u128::from_ne_bytes(digits)
    }
}

/// Finds `#NN  pc HEX  [(offset 0x..) ]MODULE[ ...]` anywhere in the line. Frames of a library
/// inside an APK (`MODULE (offset 0x..)` in the fast format) are not ELF files of their own and
/// are left alone, as are `<unknown>`/`<anonymous:...>` pseudo modules. Works on bytes with
/// ASCII blanks (every line of a report passes here): a module is cut at the first one.
fn parse_frame(line: &[u8]) -> Option<Frame<'_>> {
    let b = line;
    let blanks = |mut i: usize| {
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        i
    };
    let mut from = 0;
    loop {
        let at = from + find_byte(b'#', &b[from..])?;
        from = at + 1;
        let mut i = from;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        // One digit or more: the fast format pads frame numbers to two, `backtrace_full`'s
        // does not (`#1  pc ...`).
        if i == from {
            continue;
        }
        let pc_at = blanks(i);
        if !b[pc_at..].starts_with(b"pc ") {
            continue;
        }
        let hex_at = blanks(pc_at + 3);
        let mut i = hex_at;
        while i < b.len() && HEX_DIGIT[usize::from(b[i])] {
            i += 1;
        }
        if i == hex_at || i - hex_at > 16 {
            continue;
        }
        let mut tail = blanks(i);
        if b[tail..].starts_with(b"(offset 0x") {
            tail += b[tail..].windows(2).position(|w| w == b") ")? + 2;
        }
        if b.get(tail) != Some(&b'/') {
            return None;
        }
        let end = tail + blank_at(&b[tail..]);
        if b[blanks(end)..].starts_with(b"(offset") {
            return None;
        }
        // A module that is not UTF-8 is no file this program can name (the line itself need
        // not be: only the module is checked).
        let module = &line[tail..end];
        let module = if module.is_ascii() {
            // SAFETY: ASCII is UTF-8 (the check is a few words at a time; from_utf8 is a call
            // per byte run and most of the cost of a line).
            unsafe { std::str::from_utf8_unchecked(module) }
        } else {
            std::str::from_utf8(module).ok()?
        };
        return Some(Frame {
            module,
            hex: &b[hex_at..i],
        });
    }
}

/// Which bytes are ASCII hex digits (a table: the per-digit test of a 16-digit pc was a fifth of
/// the cost of parsing a frame line).
const HEX_DIGIT: [bool; 256] = {
    let mut t = [false; 256];
    let mut c = 0;
    while c < 256 {
        t[c] = (c as u8).is_ascii_hexdigit();
        c += 1;
    }
    t
};

/// Where the first ASCII blank (space, tab, CR, LF, FF) of `s` is, or its length. Eight bytes
/// at a time: every blank is below 0x21, so a word with no byte below 0x21 holds none (module
/// paths are tens of bytes long, and this scan was a third of the cost of a frame line).
fn blank_at(s: &[u8]) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let mut i = 0;
    while i + 8 <= s.len() {
        let mut word = [0u8; 8];
        word.copy_from_slice(&s[i..i + 8]);
        let w = u64::from_le_bytes(word);
        // Bit 7 of a byte is set where that byte is below 0x21, and possibly above one that is
        // (a borrow): the first such byte is exact.
        if w.wrapping_sub(ONES * 0x21) & !w & HIGHS == 0 {
            i += 8;
            continue;
        }
        break;
    }
    i + s[i..]
        .iter()
        .position(u8::is_ascii_whitespace)
        .unwrap_or(s.len() - i)
}

/// The first `byte` in `hay` (libc's memchr: vectorized, where a byte loop is most of the
/// time of a line that is not a frame).
fn find_byte(byte: u8, hay: &[u8]) -> Option<usize> {
    // SAFETY: memchr reads at most hay.len() bytes from hay's start.
    let at = unsafe { libc::memchr(hay.as_ptr().cast(), i32::from(byte), hay.len()) };
    (!at.is_null()).then(|| at as usize - hay.as_ptr() as usize)
}

/// The text appended to a frame line, or `None` when no source file is known.
fn suffix(frames: &[Resolved]) -> Option<String> {
    if frames.iter().all(|f| f.file.is_none()) {
        return None;
    }
    let parts: Vec<String> = frames
        .iter()
        .map(|f| {
            let mut s = format!("{} at ", f.function.as_deref().unwrap_or("??"));
            s.push_str(f.file.as_deref().unwrap_or("??"));
            if let Some(line) = f.line {
                s.push_str(&format!(":{line}"));
            }
            s
        })
        .collect();
    Some(format!("  {}", parts.join(", inlined into ")))
}

/// The text added to each frame line of one module, by pc (`None`: nothing known).
type Suffixes = HashMap<u128, Option<Box<str>>, BuildHasherDefault<KeyHasher>>;

/// Hashes a [`Frame::key`] with one multiplication: the keys are this program's own, never
/// chosen to collide, and SipHash was a tenth of the time of a report's line.
#[derive(Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u128(&mut self, v: u128) {
        self.0 = ((v as u64) ^ (v >> 64) as u64 ^ self.0).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    fn finish(&self) -> u64 {
        // hashbrown takes its control bits from the top and its index from the bottom.
        self.0 ^ (self.0 >> 29)
    }
}

/// See [`LogSymbolizer::annotate`].
pub enum Annotation {
    Append(String),
    Nothing,
    /// Nothing for any frame of this line's module (no line information, or unreadable).
    NothingInModule,
}

pub struct LogSymbolizer {
    symbolizer: Symbolizer,
    /// The text added to each frame already seen, by module then pc: an exit report repeats a
    /// few hundred distinct frames thousands of times (perl's: 14,636 frame lines, 271 pcs).
    seen: Vec<(String, Suffixes)>,
}

impl LogSymbolizer {
    pub fn new(symbols: Option<PathBuf>) -> LogSymbolizer {
        LogSymbolizer {
            symbolizer: Symbolizer::new(symbols),
            seen: Vec::new(),
        }
    }

    /// The text appended to the frame line of `pc` in `module`, resolved once per frame.
    fn added(&mut self, frame: &Frame<'_>) -> Option<&str> {
        let module = frame.module;
        // A log names a handful of modules: a scan compares a few short strings, cheaper than
        // hashing a path per line.
        let i = match self.seen.iter().position(|(m, _)| m == module) {
            Some(i) => i,
            None => {
                self.seen.push((module.to_string(), Suffixes::default()));
                self.seen.len() - 1
            }
        };
        let symbolizer = &mut self.symbolizer;
        self.seen[i]
            .1
            .entry(frame.key())
            .or_insert_with(|| {
                symbolizer
                    .resolve_vaddr(module, frame.pc())
                    .and_then(|frames| suffix(&frames))
                    .map(String::into_boxed_str)
            })
            .as_deref()
    }

    /// What `run`'s annotation server (`annotate`) answers for a frame line the library is
    /// about to print: the same text `write_line` would append to it.
    pub fn annotate(&mut self, line: &[u8]) -> Annotation {
        let Some(f) = parse_frame(line) else {
            return Annotation::Nothing;
        };
        if self.symbolizer.has_line_info(f.module) != Some(true) {
            return Annotation::NothingInModule;
        }
        match self.added(&f) {
            Some(text) => Annotation::Append(text.to_string()),
            None => Annotation::Nothing,
        }
    }

    /// Writes `line` (with or without its newline) with the frame's location added.
    pub fn write_line(&mut self, line: &[u8], out: &mut impl Write) -> std::io::Result<()> {
        let (body, newline) = match line.strip_suffix(b"\n") {
            Some(b) => (b, &b"\n"[..]),
            None => (line, &b""[..]),
        };
        let added = match parse_frame(body) {
            Some(f) => self.added(&f),
            None => None,
        };
        match added {
            Some(s) => {
                // One write for the whole line: on a shared terminal or pipe, the program's own
                // output must not land between the frame and its location.
                let body = body.strip_suffix(b"\r").unwrap_or(body);
                let mut whole = Vec::with_capacity(body.len() + s.len() + 1);
                whole.extend_from_slice(body);
                whole.extend_from_slice(s.as_bytes());
                whole.extend_from_slice(newline);
                out.write_all(&whole)
            }
            None => out.write_all(line),
        }
    }
}

/// How long a partial line waits for the rest before it is passed on as it is: a program's
/// prompt without a newline must still appear.
const PARTIAL_LINE_WAIT_MS: i32 = 50;

/// Copies `input` (a pipe) to `out` line by line, adding locations to frame lines, until end of
/// file. The library writes each log line with one `write(2)` (atomic on a pipe up to
/// PIPE_BUF), so a frame line never mixes with the program's own output.
pub fn filter(input: &mut (impl Read + AsRawFd), out: &mut impl Write, sym: &mut LogSymbolizer) {
    let mut pending: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut lines = Vec::with_capacity(80 * 1024);
    loop {
        if !pending.is_empty() && !readable(input.as_raw_fd(), PARTIAL_LINE_WAIT_MS) {
            let _ = out.write_all(&pending);
            let _ = out.flush();
            pending.clear();
        }
        let n = match input.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        // The chunk's complete lines go out in one write (stderr is unbuffered).
        lines.clear();
        split_lines(&buf[..n], &mut pending, |line| {
            let _ = sym.write_line(line, &mut lines);
        });
        let _ = out.write_all(&lines);
        let _ = out.flush();
    }
    let _ = out.write_all(&pending);
    let _ = out.flush();
}

/// Hands each complete line of `chunk` to `line`: the first one joined to the unfinished line
/// `pending` kept from the chunk before, the others where they lie in the chunk (only a line
/// split between chunks is copied). The chunk's unfinished end is kept in `pending`.
fn split_lines(chunk: &[u8], pending: &mut Vec<u8>, mut line: impl FnMut(&[u8])) {
    let mut start = 0;
    if !pending.is_empty() {
        let end = find_byte(b'\n', chunk).map_or(chunk.len(), |nl| nl + 1);
        pending.extend_from_slice(&chunk[..end]);
        start = end;
        if pending.ends_with(b"\n") {
            line(pending);
            pending.clear();
        }
    }
    while let Some(nl) = find_byte(b'\n', &chunk[start..]) {
        line(&chunk[start..start + nl + 1]);
        start += nl + 1;
    }
    pending.extend_from_slice(&chunk[start..]);
}

/// Whether `fd` has data (or end of file) within `ms` milliseconds.
fn readable(fd: i32, ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut p, 1, ms) > 0 }
}

#[derive(Default)]
pub struct Args {
    symbols: Option<PathBuf>,
    input: Option<PathBuf>,
}

pub const SPEC: Spec<Args> = Spec {
    command: "symbolize",
    operands: "[LOGFILE|-]",
    about: "Copies a malloc_debug log (a host run's stderr, or `adb logcat` text from a device)\n\
            to stdout, adding function, source file and line to every backtrace frame whose\n\
            module has debug info (in the module, or separate: .build-id, .gnu_debuglink).\n\
            Reads stdin without LOGFILE or with -.",
    flags: &[crate::report::symbols_flag(|a: &mut Args, v| {
        a.symbols = Some(v.into());
        Ok(())
    })],
    operand: |a: &mut Args, v: OsString, _| {
        if a.input.is_some() {
            return Err(err!(
                "symbolize: unexpected argument {:?}",
                v.to_string_lossy()
            ));
        }
        a.input = Some(v.into());
        Ok(())
    },
};

pub fn main(args: Vec<OsString>) -> Result<ExitCode> {
    let Some(args) = SPEC.parse(args)? else {
        return Ok(ExitCode::SUCCESS);
    };
    let mut input: Box<dyn Read> = match &args.input {
        Some(p) if p.as_os_str() != "-" => {
            Box::new(std::fs::File::open(p).map_err(|e| err!("{}: {e}", p.display()))?)
        }
        _ => Box::new(std::io::stdin().lock()),
    };
    let mut sym = LogSymbolizer::new(args.symbols);
    // Large writes: with the default 8 KiB buffer, node's 44 MB report took 5,577 writes,
    // most of the command's time.
    let mut out = std::io::BufWriter::with_capacity(256 * 1024, std::io::stdout().lock());
    let written = |r: std::io::Result<()>| r.map_err(|e| err!("writing: {e}"));
    // Read in chunks and split with libc's memchr, as `filter` does: `read_until`'s byte search
    // was a third of the instructions of symbolizing node's 238,000-line report.
    let mut buf = vec![0u8; 64 * 1024];
    let mut pending: Vec<u8> = Vec::new();
    loop {
        let n = match input.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(err!("reading the log: {e}")),
        };
        let mut result = Ok(());
        split_lines(&buf[..n], &mut pending, |line| {
            if result.is_ok() {
                result = sym.write_line(line, &mut out);
            }
        });
        written(result)?;
    }
    if !pending.is_empty() {
        written(sym.write_line(&pending, &mut out))?;
    }
    written(out.flush())?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_in_both_formats_and_any_logcat_layout() {
        let f = |l: &str| parse_frame(l.as_bytes()).map(|f| (f.module.to_string(), f.pc()));
        let want = Some(("/bin/prog".to_string(), 0x11ad));
        assert_eq!(
            f(
                "11-26 06:09:40.708  1  1 E malloc_debug:           #01  pc 00000000000011ad  /bin/prog (main+16)"
            ),
            want
        );
        assert_eq!(f("E/malloc_debug( 99): #01  pc 11ad  /bin/prog"), want);
        assert_eq!(
            f("          #01  pc 00000000000011ad  (offset 0x1000) /bin/prog (main)"),
            want
        );
        assert_eq!(
            f("#01  pc 11ad  /data/app/x.apk (offset 0x4000) (f+1)"),
            None
        );
        // backtrace_full's frame numbers are not padded.
        assert_eq!(
            f("          #1  pc 00000000000011ad  (offset 0x1000) /bin/prog (main+16)"),
            want
        );
        assert_eq!(f("# pc 11ad /bin/prog"), None);
        assert_eq!(f("#01  pc 11ad  <unknown>"), None);
        assert_eq!(f("no frame # here"), None);
    }

    /// A pc's cache key does not depend on leading zeros; different pcs differ.
    #[test]
    fn one_key_per_pc() {
        let frame = |l: &'static str| parse_frame(l.as_bytes()).unwrap();
        let long = frame("#01  pc 00000000000011ad  /bin/prog");
        let short = frame("#01  pc 11ad  /bin/prog");
        assert_eq!((long.pc(), short.pc()), (0x11ad, 0x11ad));
        assert_eq!(long.key(), short.key());
        let other = frame("#01  pc 11ae  /bin/prog");
        assert_ne!(other.key(), short.key());
        assert_eq!(frame("#01  pc ffffffffffffffff  /x").pc(), u64::MAX);
        assert!(parse_frame(b"#01  pc 1ffffffffffffffff  /x").is_none());
    }

    /// The word-at-a-time scan finds the first blank wherever it is, past control characters
    /// and bytes above 0x7f that are not blanks.
    #[test]
    fn blank_at_finds_the_first_blank() {
        let naive = |s: &[u8]| {
            s.iter()
                .position(u8::is_ascii_whitespace)
                .unwrap_or(s.len())
        };
        let alphabet = [
            b'a', b'/', b' ', b'\t', b'\r', 0x01, 0x0b, 0x20, 0x21, 0x80, 0xff, b'0',
        ];
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let len = (x % 40) as usize;
            let s: Vec<u8> = (0..len)
                .map(|i| {
                    let r = (x >> (i % 60)) as usize;
                    // Mostly path bytes, now and then anything from the alphabet.
                    if r.is_multiple_of(7) {
                        alphabet[r / 7 % alphabet.len()]
                    } else {
                        b'a' + (r % 26) as u8
                    }
                })
                .collect();
            assert_eq!(blank_at(&s), naive(&s), "{s:?}");
        }
    }

    /// Counts the writes it is given.
    struct Writes(Vec<Vec<u8>>);

    impl Write for Writes {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.push(buf.to_vec());
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// An annotated frame line is one write: on a terminal or pipe shared with the program,
    /// the program's output cannot land between the frame and its location (stderr is
    /// unbuffered, so each write is a system call).
    #[test]
    fn an_annotated_line_is_one_write() {
        let exe = std::env::current_exe().unwrap();
        // This function's own address in the test binary's ELF space: its load base is the
        // start of the binary's mapping at file offset 0.
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let base = maps
            .lines()
            .find(|l| l.ends_with(&*exe.to_string_lossy()) && l.contains(" 00000000 "))
            .and_then(|l| u64::from_str_radix(l.split('-').next().unwrap(), 16).ok())
            .unwrap();
        let pc = an_annotated_line_is_one_write as *const () as u64 - base + 1;
        let mut sym = LogSymbolizer::new(None);
        let line = format!("E malloc_debug: #00  pc {pc:016x}  {}\n", exe.display());
        let mut out = Writes(Vec::new());
        sym.write_line(line.as_bytes(), &mut out).unwrap();
        let text = String::from_utf8_lossy(&out.0.concat()).into_owned();
        assert!(
            text.contains("an_annotated_line_is_one_write at "),
            "{text}"
        );
        assert!(text.contains("src/logsym.rs:"), "{text}");
        assert_eq!(out.0.len(), 1);
        assert!(out.0[0].starts_with(line.trim_end().as_bytes()));
        assert!(out.0[0].ends_with(b"\n"));
    }
}
