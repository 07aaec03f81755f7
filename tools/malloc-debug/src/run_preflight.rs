//! Why malloc debug would not start in the command of `malloc-debug run`, said before it runs.
//!
//! The glibc front reaches a program only through the dynamic loader's `LD_PRELOAD`. The loader
//! never sees a statically linked program, refuses a front of another ELF class or machine,
//! and ignores preloads with a path in a set-user-ID or set-group-ID program. In each case the
//! program runs unchecked and prints no report, and a run that says nothing looks like a clean
//! one. So `run` reads the executable's ELF header and program headers first and warns. It still
//! runs the command, because a program can start other programs that the front does reach.
//!
//! Scripts (`#!`) are not judged: the loader starts their interpreter. A program whose own
//! executable defines `malloc` is reported by the front itself at run time
//! (docs/spec/abi.md#the-glibc-front).

use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The ELF header and the program headers normally lie in the first page; a header table
/// elsewhere is not looked for (the program is then not judged).
const HEAD_BYTES: u64 = 64 * 1024;
const PT_INTERP: u32 = 3;
const EM_X86_64: u16 = 62;
const EM_AARCH64: u16 = 183;

/// What the loader would make of an executable, as far as the front is concerned.
#[derive(Debug, PartialEq, Eq)]
enum Elf {
    /// Preloads work (also: not an ELF file, or one whose headers could not be read).
    Fine,
    /// ELF class (32 or 64) other than the front's.
    OtherClass(u8),
    /// `e_machine` other than the front's.
    OtherMachine(u16),
    /// No `PT_INTERP`: no dynamic loader runs it.
    Static,
}

/// The warnings for `command` (the first word of `run`'s command line), each a full sentence.
pub fn warnings(command: &OsStr) -> Vec<String> {
    let Some(path) = resolve(command) else {
        return Vec::new();
    };
    let name = command.to_string_lossy();
    let mut warnings = Vec::new();
    let head = read_head(&path).unwrap_or_default();
    match judge(&head) {
        Elf::Fine => {}
        Elf::OtherClass(bits) => warnings.push(format!(
            "{name} is a {bits}-bit program and the front is {}-bit: the loader ignores it, \
             so malloc debug will not run in {name}",
            usize::BITS
        )),
        Elf::OtherMachine(machine) => warnings.push(format!(
            "{name} is built for another machine (ELF e_machine {machine}): the loader ignores \
             the front, so malloc debug will not run in {name}"
        )),
        Elf::Static => warnings.push(format!(
            "{name} is statically linked: no dynamic loader preloads the front into it, so \
             malloc debug will not run in {name}"
        )),
    }
    if let Ok(meta) = std::fs::metadata(&path) {
        // SAFETY: getuid and getgid cannot fail and touch no memory.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let setuid = meta.mode() & 0o4000 != 0 && meta.uid() != uid;
        let setgid = meta.mode() & 0o2000 != 0 && meta.gid() != gid;
        if setuid || setgid {
            warnings.push(format!(
                "{name} is set-{}-ID: the loader ignores LD_PRELOAD paths for it, so malloc \
                 debug will not run in {name}",
                if setuid { "user" } else { "group" }
            ));
        }
    }
    warnings
}

/// The file `Command` would execute: `command` itself when it has a slash, else the first
/// executable regular file of that name on PATH.
fn resolve(command: &OsStr) -> Option<PathBuf> {
    let path = Path::new(command);
    if command.as_encoded_bytes().contains(&b'/') {
        return Some(path.to_path_buf());
    }
    let dirs = std::env::var_os("PATH")?;
    std::env::split_paths(&dirs)
        .map(|dir| dir.join(path))
        .find(|candidate| {
            std::fs::metadata(candidate).is_ok_and(|m| m.is_file() && m.mode() & 0o111 != 0)
        })
}

fn read_head(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut head = Vec::new();
    std::fs::File::open(path)?
        .take(HEAD_BYTES)
        .read_to_end(&mut head)?;
    Ok(head)
}

/// Judges an executable from its first bytes (little-endian ELF, the hosts the front is built
/// for).
fn judge(head: &[u8]) -> Elf {
    if head.len() < 64 || &head[..4] != b"\x7fELF" || head[5] != 1 {
        return Elf::Fine;
    }
    let own_class = if cfg!(target_pointer_width = "64") {
        2
    } else {
        1
    };
    if head[4] != own_class {
        return Elf::OtherClass(if head[4] == 1 { 32 } else { 64 });
    }
    if own_class != 2 {
        // The offsets below are the 64-bit header's.
        return Elf::Fine;
    }
    let u16_at = |at: usize| {
        head.get(at..at + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
    };
    let own_machine = if cfg!(target_arch = "aarch64") {
        EM_AARCH64
    } else {
        EM_X86_64
    };
    let Some(machine) = u16_at(18) else {
        return Elf::Fine;
    };
    if machine != own_machine {
        return Elf::OtherMachine(machine);
    }
    // The 64-bit header's program header table: offset, entry size, count.
    let (Some(phoff), Some(phentsize), Some(phnum)) = (
        head.get(32..40)
            .map(|b| u64::from_le_bytes(b.try_into().expect("eight bytes"))),
        u16_at(54),
        u16_at(56),
    ) else {
        return Elf::Fine;
    };
    let mut has_interp = false;
    for i in 0..u64::from(phnum) {
        let at = phoff + i * u64::from(phentsize);
        let Some(p_type) = usize::try_from(at)
            .ok()
            .and_then(|at| head.get(at..at + 4))
            .map(|b| u32::from_le_bytes(b.try_into().expect("four bytes")))
        else {
            // The table lies beyond what was read: no verdict.
            return Elf::Fine;
        };
        has_interp |= p_type == PT_INTERP;
    }
    if has_interp { Elf::Fine } else { Elf::Static }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 64-bit little-endian ELF header for this host's machine with the given program header
    /// types (56-byte entries right after the header).
    fn elf(types: &[u32]) -> Vec<u8> {
        let mut h = vec![0u8; 64];
        h[..4].copy_from_slice(b"\x7fELF");
        h[4] = 2;
        h[5] = 1;
        let machine = if cfg!(target_arch = "aarch64") {
            EM_AARCH64
        } else {
            EM_X86_64
        };
        h[18..20].copy_from_slice(&machine.to_le_bytes());
        h[32..40].copy_from_slice(&64u64.to_le_bytes());
        h[54..56].copy_from_slice(&56u16.to_le_bytes());
        h[56..58].copy_from_slice(&(types.len() as u16).to_le_bytes());
        for t in types {
            let mut entry = vec![0u8; 56];
            entry[..4].copy_from_slice(&t.to_le_bytes());
            h.extend(entry);
        }
        h
    }

    #[test]
    fn a_program_with_an_interpreter_is_fine_one_without_is_static() {
        assert_eq!(judge(&elf(&[6, PT_INTERP, 1, 1, 2])), Elf::Fine);
        assert_eq!(judge(&elf(&[1, 1, 7])), Elf::Static);
    }

    #[test]
    fn another_class_or_machine_is_named() {
        let mut other_class = elf(&[PT_INTERP]);
        other_class[4] = 1;
        assert_eq!(judge(&other_class), Elf::OtherClass(32));
        let mut other_machine = elf(&[PT_INTERP]);
        other_machine[18..20].copy_from_slice(&243u16.to_le_bytes());
        assert_eq!(judge(&other_machine), Elf::OtherMachine(243));
    }

    #[test]
    fn scripts_short_files_and_unread_tables_get_no_verdict() {
        assert_eq!(judge(b"#!/bin/sh\necho hi\n"), Elf::Fine);
        assert_eq!(judge(&elf(&[1])[..60]), Elf::Fine);
        let mut far = elf(&[1]);
        far[32..40].copy_from_slice(&(1u64 << 20).to_le_bytes());
        assert_eq!(judge(&far), Elf::Fine);
    }

    #[test]
    fn this_test_binary_is_judged_fine() {
        let me = std::env::current_exe().unwrap();
        assert!(warnings(me.as_os_str()).is_empty());
    }
}
