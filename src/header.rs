//! The per-allocation header of header mode (docs/spec/allocation.md#header-mode) and the layout
//! derived from the options: where the header, the guards and the user pointer sit.
//!
//! ```text
//! orig_pointer ── [gap: 0 for malloc/calloc/realloc, 0..align-1 for memalign]
//! header          Header, padded to align_up(size_of::<Header>(), MIN_ALIGN)
//! front guard     front_guard_bytes × 0xaa           (FRONT_GUARD)
//! user pointer P  = header + pointer_offset
//! user data       header.size bytes
//! rear guard      rear_guard_bytes × 0xbb at P+size  (REAR_GUARD)
//! ```

use crate::config::{Config, MIN_ALIGN, bits};

/// Bit 31 of a tracked size is the zygote-child flag, so no request may exceed it
/// (docs/spec/allocation.md#size-limits-and-errno).
pub const MAX_SIZE: usize = 0x7fff_ffff;

pub const DEBUG_TAG: u32 = 0x1ee7_d00d;
pub const DEBUG_FREE_TAG: u32 = 0x1cc7_dccd;

/// Packed exactly like the reference (28 bytes on LP64, 16 on ILP32): tools that inspect
/// memory (and the tests) rely on the field offsets.
#[repr(C, packed)]
#[derive(Clone, Copy)]
pub struct Header {
    pub tag: u32,
    pub orig_pointer: usize,
    pub size: usize,
    pub usable_size: usize,
}

/// Offset, from the header's start, of the 4 bytes after the packed header and before the
/// padding to `MIN_ALIGN` ends (28..32 on LP64): never part of what the program or a memory
/// inspector sees. Tracking keeps a block's allocation backtrace id there when its live blocks
/// are in the presence map (docs/design.md, "Presence map"). `None` where the padding has no
/// room (ILP32: a 16-byte header).
pub const ID_SLOT: Option<usize> =
    if align_up(size_of::<Header>(), MIN_ALIGN) >= size_of::<Header>() + 4 {
        Some(size_of::<Header>())
    } else {
        None
    };

pub const fn align_up(value: usize, align: usize) -> usize {
    (value + align - 1) & !(align - 1)
}

/// Where things are, derived once from the options (docs/spec/allocation.md#header-mode).
#[derive(Clone, Copy, Debug, Default)]
pub struct Layout {
    /// Header mode (a front or rear guard was asked for).
    pub header: bool,
    /// From the header's start to the user pointer.
    pub pointer_offset: usize,
    pub front_guard_bytes: usize,
    pub rear_guard_bytes: usize,
    /// Everything added to a request: header + front guard + rear guard + expand_alloc.
    pub extra_bytes: usize,
}

impl Layout {
    /// Whether blocks carry a header under `config`: only the guards need one.
    pub fn needs_header(config: &Config<'_>) -> bool {
        config.has(bits::FRONT_GUARD) || config.has(bits::REAR_GUARD)
    }

    pub fn new(config: &Config<'_>) -> Self {
        let mut layout = Layout::default();
        if Self::needs_header(config) {
            layout.header = true;
            layout.pointer_offset = align_up(size_of::<Header>(), MIN_ALIGN);
            if config.has(bits::FRONT_GUARD) {
                layout.front_guard_bytes = config.front_guard_bytes;
                layout.pointer_offset += config.front_guard_bytes;
            }
            layout.extra_bytes = layout.pointer_offset;
            if config.has(bits::REAR_GUARD) {
                layout.rear_guard_bytes = config.rear_guard_bytes;
                layout.extra_bytes += config.rear_guard_bytes;
            }
        }
        if config.has(bits::EXPAND_ALLOC) {
            layout.extra_bytes += config.expand_alloc_bytes;
        }
        layout
    }

    /// The header in front of a user pointer of header mode.
    pub fn header_of(&self, pointer: usize) -> *mut Header {
        pointer.wrapping_sub(self.pointer_offset) as *mut Header
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_is_packed_like_the_reference() {
        if cfg!(target_pointer_width = "64") {
            assert_eq!(size_of::<Header>(), 28);
            assert_eq!(core::mem::offset_of!(Header, orig_pointer), 4);
            assert_eq!(core::mem::offset_of!(Header, size), 12);
            assert_eq!(core::mem::offset_of!(Header, usable_size), 20);
            assert_eq!(ID_SLOT, Some(28));
        } else {
            assert_eq!(size_of::<Header>(), 16);
        }
    }

    #[test]
    fn layout_from_options() {
        let c = Config::parse(b"guard").unwrap();
        let l = Layout::new(&c);
        assert!(l.header);
        assert_eq!(
            l.pointer_offset,
            align_up(size_of::<Header>(), MIN_ALIGN) + 32
        );
        assert_eq!(l.extra_bytes, l.pointer_offset + 32);
        let c = Config::parse(b"rear_guard=7 expand_alloc=5").unwrap();
        let l = Layout::new(&c);
        assert_eq!(l.pointer_offset, align_up(size_of::<Header>(), MIN_ALIGN));
        assert_eq!(l.extra_bytes, l.pointer_offset + 7 + 5);
        let c = Config::parse(b"expand_alloc=5").unwrap();
        let l = Layout::new(&c);
        assert!(!l.header);
        assert_eq!(l.extra_bytes, 5);
    }
}
