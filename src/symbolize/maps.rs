//! `/proc/self/maps` read without malloc: the whole file goes into an mmap'd buffer (grown by
//! doubling), then an mmap'd index of entries sorted by address is built for binary search.
//! Only the error/report paths and `startup` use this.

use crate::pages;
use core::ptr::NonNull;

pub const PROT_READ: u8 = 1;
pub const PROT_WRITE: u8 = 2;
pub const PROT_EXEC: u8 = 4;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapLine {
    pub start: usize,
    pub end: usize,
    pub offset: usize,
    pub flags: u8,
    name_at: u32,
    name_len: u32,
}

/// One mmap'd region owned by this module.
struct Region {
    ptr: NonNull<u8>,
    len: usize,
}

impl Region {
    fn new(len: usize) -> Option<Region> {
        Some(Region {
            ptr: pages::map(len)?,
            len,
        })
    }
    fn bytes(&self) -> &[u8] {
        // SAFETY: the mapping is `len` readable bytes owned by self.
        unsafe { core::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, and &mut self gives exclusive access.
        unsafe { core::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: ptr/len come from pages::map.
        unsafe { pages::unmap(self.ptr, self.len) };
    }
}

/// A parsed snapshot of a maps file.
pub struct Maps {
    text: Region,
    text_len: usize,
    index: Region,
    count: usize,
}

// SAFETY: the regions are private mappings owned by the value; nothing aliases them.
unsafe impl Send for Maps {}

impl Maps {
    /// Reads `/proc/self/maps`.
    pub fn read_self() -> Option<Maps> {
        Self::read_path(c"/proc/self/maps")
    }

    pub fn read_path(path: &core::ffi::CStr) -> Option<Maps> {
        // SAFETY: NUL-terminated path; the fd is closed below.
        let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
        if fd < 0 {
            return None;
        }
        let text = read_all(fd);
        // SAFETY: fd was opened above.
        unsafe { libc::close(fd) };
        let (text, len) = text?;
        Self::from_text(text, len)
    }

    /// Parses maps text (tests feed synthetic files).
    #[cfg(test)]
    pub fn from_bytes(bytes: &[u8]) -> Option<Maps> {
        let mut r = Region::new(bytes.len().max(1))?;
        r.bytes_mut()[..bytes.len()].copy_from_slice(bytes);
        Self::from_text(r, bytes.len())
    }

    fn from_text(text: Region, text_len: usize) -> Option<Maps> {
        let lines = text.bytes()[..text_len]
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .count();
        let mut index = Region::new((lines.max(1)) * core::mem::size_of::<MapLine>())?;
        let mut count = 0;
        {
            let slots = as_lines_mut(&mut index);
            let mut at = 0usize;
            for line in text.bytes()[..text_len].split(|&b| b == b'\n') {
                let line_at = at;
                at += line.len() + 1;
                if line.is_empty() {
                    continue;
                }
                if let Some(e) = parse_line(line, line_at)
                    && let Some(slot) = slots.get_mut(count)
                {
                    *slot = e;
                    count += 1;
                }
            }
            // The kernel emits ascending addresses; sort anyway (insertion sort: already
            // sorted input costs one pass).
            let v = &mut slots[..count];
            for i in 1..v.len() {
                let mut j = i;
                while j > 0 && v[j - 1].start > v[j].start {
                    v.swap(j - 1, j);
                    j -= 1;
                }
            }
        }
        Some(Maps {
            text,
            text_len,
            index,
            count,
        })
    }

    pub fn entries(&self) -> &[MapLine] {
        let all = as_lines(&self.index);
        &all[..self.count.min(all.len())]
    }

    pub fn name(&self, e: &MapLine) -> &[u8] {
        let s = e.name_at as usize;
        self.text.bytes()[..self.text_len]
            .get(s..s + e.name_len as usize)
            .unwrap_or(&[])
    }

    /// Index of the entry with `start < pc < end` (the reference's comparison).
    pub fn find(&self, pc: usize) -> Option<usize> {
        let v = self.entries();
        let i = v.partition_point(|e| e.start < pc);
        let i = i.checked_sub(1)?;
        let e = v.get(i)?;
        (e.start < pc && pc < e.end).then_some(i)
    }

    /// Index of the entry with `start <= addr < end`.
    #[cfg_attr(
        not(any(test, all(target_arch = "aarch64", target_os = "android"))),
        allow(
            dead_code,
            reason = "stack bounds are only looked up for the aarch64 Android frame-record walk"
        )
    )]
    pub fn find_inclusive(&self, addr: usize) -> Option<usize> {
        let v = self.entries();
        let i = v.partition_point(|e| e.start <= addr).checked_sub(1)?;
        let e = v.get(i)?;
        (addr < e.end).then_some(i)
    }
}

fn as_lines(r: &Region) -> &[MapLine] {
    let n = r.len / core::mem::size_of::<MapLine>();
    // SAFETY: page-aligned zeroed memory is a valid [MapLine] (all fields are integers).
    unsafe { core::slice::from_raw_parts(r.ptr.as_ptr().cast::<MapLine>(), n) }
}

fn as_lines_mut(r: &mut Region) -> &mut [MapLine] {
    let n = r.len / core::mem::size_of::<MapLine>();
    // SAFETY: as above, exclusive through &mut.
    unsafe { core::slice::from_raw_parts_mut(r.ptr.as_ptr().cast::<MapLine>(), n) }
}

fn read_all(fd: libc::c_int) -> Option<(Region, usize)> {
    let mut buf = Region::new(64 * 1024)?;
    let mut len = 0;
    loop {
        if len == buf.len {
            let mut bigger = Region::new(buf.len.checked_mul(2)?)?;
            bigger.bytes_mut()[..len].copy_from_slice(&buf.bytes()[..len]);
            buf = bigger;
        }
        let room = &mut buf.bytes_mut()[len..];
        // SAFETY: `room` is writable for its length.
        let n = unsafe { libc::read(fd, room.as_mut_ptr().cast(), room.len()) };
        if n < 0 {
            if crate::platform::errno() == libc::EINTR {
                continue;
            }
            return None;
        }
        if n == 0 {
            return Some((buf, len));
        }
        len += n as usize;
    }
}

fn hex(s: &[u8]) -> Option<usize> {
    if s.is_empty() || s.len() > 16 {
        return None;
    }
    let mut v = 0usize;
    for &c in s {
        let d = (c as char).to_digit(16)? as usize;
        v = v.checked_mul(16)?.checked_add(d)?;
    }
    Some(v)
}

/// `start-end perms offset dev inode [name]`.
fn parse_line(line: &[u8], line_at: usize) -> Option<MapLine> {
    let mut fields = FieldIter { s: line, at: 0 };
    let range = fields.next()?;
    let dash = range.iter().position(|&b| b == b'-')?;
    let start = hex(&range[..dash])?;
    let end = hex(&range[dash + 1..])?;
    let perms = fields.next()?;
    let offset = hex(fields.next()?)?;
    let _dev = fields.next()?;
    let _inode = fields.next()?;
    let mut flags = 0;
    if perms.first() == Some(&b'r') {
        flags |= PROT_READ;
    }
    if perms.get(1) == Some(&b'w') {
        flags |= PROT_WRITE;
    }
    if perms.get(2) == Some(&b'x') {
        flags |= PROT_EXEC;
    }
    let rest = fields.rest();
    let name_at = line_at + (line.len() - rest.len());
    Some(MapLine {
        start,
        end,
        offset,
        flags,
        name_at: name_at as u32,
        name_len: rest.len() as u32,
    })
}

struct FieldIter<'a> {
    s: &'a [u8],
    at: usize,
}

impl<'a> FieldIter<'a> {
    fn skip_spaces(&mut self) {
        while self
            .s
            .get(self.at)
            .is_some_and(|&b| b == b' ' || b == b'\t')
        {
            self.at += 1;
        }
    }
    fn next(&mut self) -> Option<&'a [u8]> {
        self.skip_spaces();
        let start = self.at;
        while self
            .s
            .get(self.at)
            .is_some_and(|&b| b != b' ' && b != b'\t')
        {
            self.at += 1;
        }
        (self.at > start).then(|| &self.s[start..self.at])
    }
    fn rest(&mut self) -> &'a [u8] {
        self.skip_spaces();
        self.s.get(self.at..).unwrap_or(&[])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &[u8] = b"\
5555d000-5555e000 r--p 00000000 fd:01 123  /usr/bin/prog
5555e000-55560000 r-xp 00001000 fd:01 123  /usr/bin/prog
7f0000000000-7f0000001000 rw-p 00000000 00:00 0 
7fff00000000-7fff00001000 rw-p 00000000 00:00 0                          [stack]
";

    #[test]
    fn parses_and_finds() {
        let m = Maps::from_bytes(TEXT).unwrap();
        assert_eq!(m.entries().len(), 4);
        let e = m.entries()[1];
        assert_eq!(
            (e.start, e.end, e.offset, e.flags),
            (0x5555e000, 0x55560000, 0x1000, PROT_READ | PROT_EXEC)
        );
        assert_eq!(m.name(&e), b"/usr/bin/prog");
        assert_eq!(m.name(&m.entries()[2]), b"");
        assert_eq!(m.name(&m.entries()[3]), b"[stack]");
        assert_eq!(m.find(0x5555e010), Some(1));
        // The reference's comparison: the start address itself is not inside.
        assert_eq!(m.find(0x5555e000), None);
        assert_eq!(m.find_inclusive(0x5555e000), Some(1));
        assert_eq!(m.find(0x1000), None);
        assert_eq!(m.find(0x7fff00000fff), Some(3));
    }

    #[test]
    fn reads_own_maps() {
        let m = Maps::read_self().unwrap();
        let here = reads_own_maps as *const () as usize;
        let i = m.find(here).unwrap();
        assert!(m.entries()[i].flags & PROT_EXEC != 0);
    }
}
