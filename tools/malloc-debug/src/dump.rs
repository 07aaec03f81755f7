//! Reader of the heap dump text format (docs/spec/abi.md#heap-dump): v1.2 as written by this
//! library and current bionic, and the older v1.0 (Android N/O) and v1.1 (API 28) dumps that
//! devices produce. Differences handled here:
//! - v1.2 has a `Build fingerprint: '…'` line (and blank line) after the header; v1.0/v1.1 do not
//!   (it is accepted anywhere in the header block of any version);
//! - v1.0/v1.1 print frames zero-padded, v1.2 unpadded (both are plain hex here);
//! - v1.2 may follow a record line with a `  bt_info {…}…` line (`backtrace_full`): its function
//!   names are kept as a symbolization fallback;
//! - v1.0's `num` column is unreliable (Android N): when every record's `num` equals the
//!   `Backtrace size:` value it is taken as garbage and each record line counts once, the way
//!   AOSP's native_heapdump_viewer.py guessed it.
//!
//! Every error names the line and what was expected; nothing in the input can make this panic.

use std::path::Path;

use crate::progress::Progress;
use crate::{Error, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    V1_0,
    V1_1,
    V1_2,
}

impl Version {
    pub fn as_str(self) -> &'static str {
        match self {
            Version::V1_0 => "v1.0",
            Version::V1_1 => "v1.1",
            Version::V1_2 => "v1.2",
        }
    }
}

/// One `bt_info` frame: map name, pc relative to the map, function and offset.
#[derive(Clone, Debug)]
pub struct FrameInfo {
    pub map: String,
    pub rel_pc: u64,
    pub function: String,
}

#[derive(Clone, Debug)]
pub struct Record {
    pub zygote: bool,
    pub size: u64,
    pub num: u64,
    /// Innermost first, as written.
    pub frames: Vec<u64>,
    pub bt_info: Vec<FrameInfo>,
}

#[derive(Clone, Debug)]
pub struct Map {
    pub start: u64,
    pub end: u64,
    pub offset: u64,
    pub name: String,
}

#[derive(Debug)]
pub struct Dump {
    pub version: Version,
    pub fingerprint: Option<String>,
    pub backtrace_size: u64,
    pub records: Vec<Record>,
    /// Sorted by start address.
    pub maps: Vec<Map>,
    /// False for v1.0 dumps whose `num` column is garbage (every record then counts once).
    pub num_reliable: bool,
    pub warnings: Vec<String>,
}

impl Dump {
    /// Number of allocations a record stands for.
    pub fn count(&self, r: &Record) -> u64 {
        if self.num_reliable { r.num } else { 1 }
    }

    pub fn map_for(&self, pc: u64) -> Option<&Map> {
        let i = self.maps.partition_point(|m| m.end <= pc);
        self.maps.get(i).filter(|m| m.start <= pc && pc < m.end)
    }
}

/// Streamed: the file is never held whole (a big dump's text is as large as what is parsed
/// from it).
pub fn read(path: &Path) -> Result<Dump> {
    let file = std::fs::File::open(path).map_err(|e| Error(format!("{}: {e}", path.display())))?;
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    let reader = std::io::BufReader::with_capacity(1 << 20, file);
    parse_from(reader, size).map_err(|e| Error(format!("{}:{}", path.display(), e.0)))
}

struct Lines<R> {
    reader: R,
    buf: Vec<u8>,
    number: usize,
    consumed: u64,
    progress: Progress,
}

impl<R: std::io::BufRead> Lines<R> {
    /// The next line without its end (`\n` or `\r\n`), invalid UTF-8 replaced; a read error
    /// ends the input like the end of the file does.
    fn next(&mut self) -> Option<String> {
        self.buf.clear();
        match self.reader.read_until(b'\n', &mut self.buf) {
            Ok(0) | Err(_) => return None,
            Ok(n) => self.consumed += n as u64,
        }
        self.number += 1;
        if self.number.is_multiple_of(4096) {
            self.progress.set(self.consumed);
        }
        let mut line: &[u8] = &self.buf;
        line = line.strip_suffix(b"\n").unwrap_or(line);
        line = line.strip_suffix(b"\r").unwrap_or(line);
        Some(String::from_utf8_lossy(line).into_owned())
    }

    /// `LINE: expected …, found "…"` (the caller prefixes the file name).
    fn error(&self, expected: &str, found: Option<&str>) -> Error {
        match found {
            Some(found) => {
                let shown: String = found.chars().take(80).collect();
                Error(format!(
                    "{}: expected {expected}, found {shown:?}",
                    self.number
                ))
            }
            // The line that should have been there is the one after the last.
            None => Error(format!(
                "{}: unexpected end of file: expected {expected}",
                self.number + 1
            )),
        }
    }

    fn expect(&mut self, expected: &str, ok: impl Fn(&str) -> bool) -> Result<String> {
        let line = self.next();
        match line {
            Some(l) if ok(&l) => Ok(l),
            other => Err(self.error(expected, other.as_deref())),
        }
    }
}

/// `Key: N` → N.
fn header_number(lines: &mut Lines<impl std::io::BufRead>, key: &str) -> Result<u64> {
    let line = lines.next();
    let line = line.as_deref();
    let value = line
        .and_then(|l| l.strip_prefix(key))
        .and_then(|v| v.strip_prefix(": "))
        .and_then(|v| v.trim().parse::<u64>().ok());
    value.ok_or_else(|| lines.error(&format!("'{key}: <number>'"), line))
}

/// `size`: the input's length, for the progress bar.
fn parse_from(reader: impl std::io::BufRead, size: u64) -> Result<Dump> {
    let mut lines = Lines {
        reader,
        buf: Vec::new(),
        number: 0,
        consumed: 0,
        progress: Progress::new("reading dump", size),
    };
    let header = "'Android Native Heap Dump v1.0', 'v1.1' or 'v1.2'";
    let first = lines.next();
    let first = first.as_deref();
    let version = match first.map(str::trim_end) {
        Some("Android Native Heap Dump v1.0") => Version::V1_0,
        Some("Android Native Heap Dump v1.1") => Version::V1_1,
        Some("Android Native Heap Dump v1.2") => Version::V1_2,
        other => return Err(lines.error(header, other)),
    };
    lines.expect("an empty line after the header", str::is_empty)?;

    let mut fingerprint = None;
    let mut line = lines.next();
    if let Some(rest) = line
        .as_deref()
        .and_then(|l| l.strip_prefix("Build fingerprint: "))
    {
        fingerprint = Some(rest.trim_matches('\'').to_string());
        lines.expect("an empty line after the fingerprint", str::is_empty)?;
        line = lines.next();
    }
    let line = line.as_deref();
    // Put the line back by re-checking it as the first header number.
    let total_memory = match line
        .and_then(|l| l.strip_prefix("Total memory: "))
        .and_then(|v| v.trim().parse::<u64>().ok())
    {
        Some(v) => v,
        None => {
            let expected = if version == Version::V1_2 && fingerprint.is_none() {
                "'Build fingerprint: '...'' or 'Total memory: <number>'"
            } else {
                "'Total memory: <number>'"
            };
            return Err(lines.error(expected, line));
        }
    };
    let allocation_records = header_number(&mut lines, "Allocation records")?;
    let backtrace_size = header_number(&mut lines, "Backtrace size")?;
    lines.expect("an empty line after 'Backtrace size'", str::is_empty)?;

    // Sized from the header (bounded: the header may lie) rather than doubled as it grows.
    let mut records: Vec<Record> =
        Vec::with_capacity(usize::try_from(allocation_records.min(1 << 24)).unwrap_or(0));
    loop {
        let Some(line) = lines.next() else {
            return Err(lines.error("a record line ('z 0  sz ...') or 'MAPS'", None));
        };
        let line = line.as_str();
        if line == "MAPS" {
            break;
        }
        if line.trim().is_empty() {
            continue;
        }
        if let Some(info) = line.trim_start().strip_prefix("bt_info") {
            let frames = parse_bt_info(info).map_err(|what| lines.error(&what, Some(line)))?;
            match records.last_mut() {
                Some(r) => r.bt_info = frames,
                None => return Err(lines.error("a record line before 'bt_info'", Some(line))),
            }
            continue;
        }
        let record = parse_record(line).map_err(|what| lines.error(&what, Some(line)))?;
        records.push(record);
    }

    let mut maps = Vec::new();
    loop {
        let Some(line) = lines.next() else {
            return Err(lines.error("a maps line or 'END'", None));
        };
        let line = line.as_str();
        if line == "END" {
            break;
        }
        if line == "Could not open /proc/self/maps" || line.trim().is_empty() {
            continue;
        }
        maps.push(parse_map(line).ok_or_else(|| {
            lines.error(
                "a maps line ('START-END PERMS OFFSET DEV INODE [NAME]') or 'END'",
                Some(line),
            )
        })?);
    }
    lines.progress.finish();
    maps.sort_by_key(|m| m.start);

    let mut warnings = Vec::new();
    if allocation_records != records.len() as u64 {
        warnings.push(format!(
            "header says {allocation_records} allocation records, the dump has {}",
            records.len()
        ));
    }
    let num_reliable = !(version == Version::V1_0
        && !records.is_empty()
        && records.iter().all(|r| r.num == backtrace_size));
    let computed: u64 = records
        .iter()
        .map(|r| r.size.saturating_mul(if num_reliable { r.num } else { 1 }))
        .fold(0u64, u64::saturating_add);
    if num_reliable && computed != total_memory {
        warnings.push(format!(
            "header says 'Total memory: {total_memory}', the records add up to {computed}"
        ));
    }
    if !num_reliable {
        warnings.push(
            "v1.0 dump whose 'num' column is unreliable (every value equals the backtrace size): \
             each record counts as one allocation"
                .to_string(),
        );
    }
    Ok(Dump {
        version,
        fingerprint,
        backtrace_size,
        records,
        maps,
        num_reliable,
        warnings,
    })
}

/// bionic caps `backtrace=` at 256 frames; far longer lines are not dumps (and the call trees,
/// built recursively, must stay shallow).
const MAX_FRAMES: usize = 1024;

fn parse_record(line: &str) -> std::result::Result<Record, String> {
    const SHAPE: &str = "a record line 'z <0|1>  sz <size>  num <count>  bt [<hex frame>...]'";
    let mut t = line.split_ascii_whitespace();
    let mut field = |name: &str| -> std::result::Result<u64, String> {
        if t.next() != Some(name) {
            return Err(SHAPE.to_string());
        }
        let value = t.next().ok_or_else(|| SHAPE.to_string())?;
        value
            .parse::<u64>()
            .map_err(|_| format!("a decimal number after '{name}' in {SHAPE}"))
    };
    let zygote = match field("z")? {
        0 => false,
        1 => true,
        _ => return Err(format!("0 or 1 after 'z' in {SHAPE}")),
    };
    let size = field("sz")?;
    let num = field("num")?;
    if t.next() != Some("bt") {
        return Err(SHAPE.to_string());
    }
    let mut frames = t
        .map(|f| {
            u64::from_str_radix(f, 16)
                .map_err(|_| format!("hexadecimal frames after 'bt' in {SHAPE}"))
        })
        .collect::<std::result::Result<Vec<u64>, String>>()?;
    // A million records: the growth slack would be a third of their memory.
    frames.shrink_to_fit();
    if frames.len() > MAX_FRAMES {
        return Err(format!("at most {MAX_FRAMES} frames after 'bt' in {SHAPE}"));
    }
    Ok(Record {
        zygote,
        size,
        num,
        frames,
        bt_info: Vec::new(),
    })
}

/// ` {"map" relpc "function" offset}...` (docs/spec/abi.md#heap-dump).
fn parse_bt_info(mut s: &str) -> std::result::Result<Vec<FrameInfo>, String> {
    const SHAPE: &str = "'bt_info' frames ' {\"<map>\" <hex pc> \"<function>\" <hex offset>}'";
    fn quoted(s: &str) -> Option<(String, &str)> {
        let rest = s.trim_start().strip_prefix('"')?;
        let end = rest.find('"')?;
        Some((rest[..end].to_string(), &rest[end + 1..]))
    }
    fn hex(s: &str) -> Option<(u64, &str)> {
        let s = s.trim_start();
        let end = s.find(|c: char| !c.is_ascii_hexdigit()).unwrap_or(s.len());
        Some((u64::from_str_radix(&s[..end], 16).ok()?, &s[end..]))
    }
    let mut frames = Vec::new();
    loop {
        s = s.trim_start();
        if s.is_empty() {
            return Ok(frames);
        }
        let frame = (|| {
            let rest = s.strip_prefix('{')?;
            let (map, rest) = quoted(rest)?;
            let (rel_pc, rest) = hex(rest)?;
            let (function, rest) = quoted(rest)?;
            let (_offset, rest) = hex(rest)?;
            let rest = rest.trim_start().strip_prefix('}')?;
            Some((
                FrameInfo {
                    map,
                    rel_pc,
                    function,
                },
                rest,
            ))
        })();
        let (frame, rest) = frame.ok_or_else(|| SHAPE.to_string())?;
        if frames.len() == MAX_FRAMES {
            return Err(format!("at most {MAX_FRAMES} {SHAPE}"));
        }
        frames.push(frame);
        s = rest;
    }
}

/// `start-end perms offset dev inode [name]`.
fn parse_map(line: &str) -> Option<Map> {
    let mut t = line.split_ascii_whitespace();
    let (start, end) = t.next()?.split_once('-')?;
    let start = u64::from_str_radix(start, 16).ok()?;
    let end = u64::from_str_radix(end, 16).ok()?;
    let perms = t.next()?;
    let offset = u64::from_str_radix(t.next()?, 16).ok()?;
    let dev = t.next()?;
    let inode = t.next()?;
    if perms.len() != 4 || !dev.contains(':') || inode.parse::<u64>().is_err() || end < start {
        return None;
    }
    // The name is the rest of the line after the inode (it may contain spaces).
    let name = match line.find(inode) {
        Some(_) => {
            let mut rest = line;
            for _ in 0..5 {
                rest = rest.trim_start();
                rest = &rest[rest.find(char::is_whitespace).unwrap_or(rest.len())..];
            }
            rest.trim().to_string()
        }
        None => String::new(),
    };
    Some(Map {
        start,
        end,
        offset,
        name,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_line_with_spaces_in_name() {
        let m = parse_map("7f00-7f10 r-xp 00001000 fe:00 123    /tmp/a b.so").unwrap();
        assert_eq!((m.start, m.end, m.offset), (0x7f00, 0x7f10, 0x1000));
        assert_eq!(m.name, "/tmp/a b.so");
        let anon = parse_map("7f00-7f10 rw-p 00000000 00:00 0 ").unwrap();
        assert_eq!(anon.name, "");
    }

    #[test]
    fn bt_info_frames() {
        let f = parse_bt_info(r#" {"/data/fake.so" a000 "level1" 0} {"" c000 "" 0}"#).unwrap();
        assert_eq!(f.len(), 2);
        assert_eq!((f[0].map.as_str(), f[0].rel_pc), ("/data/fake.so", 0xa000));
        assert_eq!(f[0].function, "level1");
        assert_eq!(f[1].function, "");
        assert!(parse_bt_info(" {\"x\" zz").is_err());
    }
}
