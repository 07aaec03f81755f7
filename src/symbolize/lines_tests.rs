//! Unit tests of the line-table reader (lines.rs).

use super::*;

#[test]
fn leb128() {
    let mut c = Cursor {
        b: &[0xe5, 0x8e, 0x26, 0x7f, 0x80, 0x7f],
        at: 0,
    };
    assert_eq!(c.uleb(), Some(624_485));
    assert_eq!(c.sleb(), Some(-1));
    assert_eq!(c.sleb(), Some(-128));
    assert_eq!(c.u8(), None);
}

/// This test binary's own line table names this file for a function defined here (the
/// test build keeps line tables: `debug = 1`), and nothing for an address past the code.
#[test]
fn names_this_file_for_a_function_of_it() {
    #[inline(never)]
    fn marker(x: usize) -> usize {
        x * 3 + 1
    }
    let exe = std::fs::read_link("/proc/self/exe").unwrap();
    let mut m = super::super::elf::ModuleSymbols::open(exe.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: Dl_info is plain pointers and integers, valid all zero.
    let mut info: libc::Dl_info = unsafe { core::mem::zeroed() };
    let f = marker as *const () as usize;
    // SAFETY: a valid out-parameter.
    assert_ne!(unsafe { libc::dladdr(f as *const _, &mut info) }, 0);
    let vaddr = (f - info.dli_fbase as usize) as u64;
    let mut out = StackBuf::new();
    assert_eq!(marker(core::hint::black_box(2)), 7);
    // The function's first instruction (a return address is looked up at pc - 1).
    assert!(m.source_file(vaddr, &mut out), "{vaddr:x}");
    let path = core::str::from_utf8(out.as_bytes()).unwrap();
    assert!(path.ends_with("src/symbolize/lines_tests.rs"), "{path}");
    assert!(!m.source_file(u64::MAX / 2, &mut out));
}

/// Corrupted and truncated copies of a real line table (this test binary's) never fault:
/// lookups answer or say "unknown".
#[test]
fn corrupted_tables_never_fault() {
    let exe = std::fs::read(std::fs::read_link("/proc/self/exe").unwrap()).unwrap();
    let line = super::super::elf::section_named(&exe, b".debug_line").unwrap();
    let str_ = super::super::elf::section_named(&exe, b".debug_str").unwrap_or(&[]);
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let prefix = &line[..line.len().min(64 * 1024)];
    for round in 0..200 {
        let mut copy = prefix.to_vec();
        for _ in 0..1 + round % 8 {
            let at = next() as usize % copy.len();
            copy[at] = next() as u8;
        }
        copy.truncate(copy.len() - next() as usize % 64);
        let s = Sections {
            line: &copy,
            line_str: &[],
            str: str_,
        };
        let index = LineIndex::build(&s).unwrap();
        let mut out = StackBuf::new();
        for _ in 0..16 {
            let _ = index.file_of(&s, next() % 0x40_0000, &mut out);
        }
    }
}

#[test]
fn truncated_tables_give_nothing() {
    let s = Sections {
        line: &[0x10, 0, 0, 0, 5, 0],
        line_str: &[],
        str: &[],
    };
    let index = LineIndex::build(&s).unwrap();
    let mut out = StackBuf::new();
    assert!(!index.file_of(&s, 0x1000, &mut out));
}
