//! The per-process plan of the allocation pipeline: which steps every call runs, decided once
//! at initialize from the options, so that src/alloc.rs reads as one body per operation with
//! named steps instead of tests of option bits.
//!
//! Each field names the option(s) behind it (their rows are in src/config/table.rs) and the
//! module that carries the step out. The block's geometry (header, guards, extra bytes) is the
//! other half of what initialize decides: `header::Layout`.

use crate::config::{Config, bits};

/// Where tracking keeps the live blocks: what each needs to hold decides.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LiveBlocks {
    /// Live-table entries: each block's allocation backtrace id beside its size (`backtrace`
    /// without a header), or nothing is tracked.
    #[default]
    Table,
    /// Bits of the presence map (src/presence_map.rs): the header holds each block's requested
    /// size, which malloc_info and the unreachable check need, and with `backtrace` its
    /// allocation backtrace id (`header::ID_SLOT`). A guard, without `leak_track` unless with
    /// `backtrace`.
    Presence,
    /// The size map: each block's requested size in a 16-bit lane of a presence map, without
    /// `backtrace` (`leak_track`, `verify_pointers`, `free_track`, and `leak_track` with a
    /// guard, whose leak reports then read no headers); larger blocks go to the table.
    Sizes,
}

impl LiveBlocks {
    fn new(config: &Config<'_>) -> LiveBlocks {
        let header = crate::header::Layout::needs_header(config);
        if !config.has(bits::TRACK_ALLOCS) {
            LiveBlocks::Table
        } else if config.has(bits::BACKTRACE) {
            if header && crate::header::ID_SLOT.is_some() {
                LiveBlocks::Presence
            } else {
                LiveBlocks::Table
            }
        } else if header && !config.has(bits::LEAK_TRACK) {
            LiveBlocks::Presence
        } else if cfg!(target_pointer_width = "64") {
            // A leaf of lanes is 128 MiB of address space: too much of a 32-bit process's.
            LiveBlocks::Sizes
        } else {
            LiveBlocks::Table
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Record every live block in the live-allocation table (`leak_track`, `backtrace`,
    /// `verify_pointers`, `free_track`, and the options that imply them): src/tracking.rs.
    pub track: bool,
    /// Where tracking keeps the live blocks (docs/design.md, "Presence map").
    pub live_blocks: LiveBlocks,
    /// Bytes of each new block filled with 0xeb; 0: none (`fill_on_alloc`, `fill`).
    pub fill_on_alloc: usize,
    /// Bytes of each freed block filled with 0xef; 0: none (`fill_on_free`, `fill`, and
    /// `free_track`, which needs the pattern to check).
    pub fill_on_free: usize,
    /// Hold freed blocks back and check them when they leave (`free_track`): src/free_track.rs.
    pub hold_freed: bool,
    /// Keep the blocks free_track lets go as spares for later allocations of their size
    /// (src/spare_blocks.rs). Only on bionic, where they spare Scudo the give-backs that
    /// stalled the backtrace signal (docs/design.md, "Spare blocks"); glibc has no such signal,
    /// and there the spares cost time and, through fragmentation, about 3 MiB of peak RSS on
    /// the benchmark's mix.
    pub reuse_freed: bool,
    /// Frames of the free-time backtrace kept with a held block; 0: none
    /// (`free_track_backtrace_num_frames`).
    pub free_frames: usize,
    /// Bytes added to every realloc request (`expand_alloc`); 0: none.
    pub realloc_expand: usize,
    /// Log every call to the record_allocs file (`record_allocs`): src/record_allocs/.
    pub record: bool,
    /// Capture each allocation's backtrace into the live table's record (`backtrace`, while
    /// `backtrace_enable_on_signal` has not turned capture off): src/tracking.rs.
    pub capture: bool,
    /// Capture only for sizes in this range, inclusive (`backtrace_size`,
    /// `backtrace_min_size`, `backtrace_max_size`); None: every size.
    pub capture_sizes: Option<(usize, usize)>,
    /// Work the signals ask for, done by the next call (src/deferred.rs): the heap dump
    /// (`backtrace`), the unreachable check (`check_unreachable_on_signal`), the allocator
    /// statistics (`log_allocator_stats_on_signal`).
    pub dump_on_signal: bool,
    pub unreachable_on_signal: bool,
    pub stats_on_signal: bool,
}

impl Plan {
    pub fn new(config: &Config<'_>) -> Plan {
        let bytes_if = |bit, bytes| if config.has(bit) { bytes } else { 0 };
        Plan {
            track: config.has(bits::TRACK_ALLOCS),
            live_blocks: LiveBlocks::new(config),
            fill_on_alloc: bytes_if(bits::FILL_ON_ALLOC, config.fill_on_alloc_bytes),
            fill_on_free: bytes_if(bits::FILL_ON_FREE, config.fill_on_free_bytes),
            hold_freed: config.has(bits::FREE_TRACK),
            reuse_freed: config.has(bits::FREE_TRACK) && cfg!(target_os = "android"),
            free_frames: bytes_if(bits::FREE_TRACK, config.free_track_backtrace_num_frames),
            realloc_expand: bytes_if(bits::EXPAND_ALLOC, config.expand_alloc_bytes),
            record: config.has(bits::RECORD_ALLOCS),
            capture: config.has(bits::BACKTRACE),
            capture_sizes: config.has(bits::BACKTRACE_SPECIFIC_SIZES).then_some((
                config.backtrace_min_size_bytes,
                config.backtrace_max_size_bytes,
            )),
            dump_on_signal: config.has(bits::BACKTRACE),
            unreachable_on_signal: config.has(bits::CHECK_UNREACHABLE_ON_SIGNAL),
            stats_on_signal: config.has(bits::LOG_ALLOCATOR_STATS_ON_SIGNAL),
        }
    }

    /// A free needs the block's usable size (a native call when there is no header) only to
    /// fill it or to know what a held block must still hold.
    pub fn free_needs_usable_size(&self) -> bool {
        self.fill_on_free > 0 || self.hold_freed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_for_test(options: &str) -> Config<'_> {
        Config::parse(options.as_bytes()).unwrap_or_else(|_| panic!("{options}"))
    }

    #[test]
    fn options_map_to_steps() {
        let plan = Plan::new(&parse_for_test("fill free_track=5 expand_alloc=7"));
        assert_eq!(
            plan,
            Plan {
                // free_track tracks live blocks too: a double free is told from a wild one.
                track: true,
                // Without a header, the sizes are kept in the size map's lanes.
                live_blocks: LiveBlocks::Sizes,
                fill_on_alloc: usize::MAX,
                fill_on_free: usize::MAX,
                hold_freed: true,
                reuse_freed: cfg!(target_os = "android"),
                free_frames: 16,
                realloc_expand: 7,
                record: false,
                capture: false,
                capture_sizes: None,
                dump_on_signal: false,
                unreachable_on_signal: false,
                stats_on_signal: false,
            }
        );
        assert!(plan.free_needs_usable_size());
        let plan = Plan::new(&parse_for_test("leak_track fill_on_alloc=64"));
        assert!(plan.track && plan.fill_on_alloc == 64 && plan.fill_on_free == 0);
        assert_eq!(
            plan.live_blocks,
            LiveBlocks::Sizes,
            "leak reports need sizes"
        );
        assert!(!plan.free_needs_usable_size());
        let plan = Plan::new(&parse_for_test("backtrace backtrace_min_size=64"));
        assert!(plan.capture && plan.dump_on_signal && plan.track);
        assert_eq!(plan.capture_sizes, Some((64, usize::MAX)));
        assert_eq!(plan.live_blocks, LiveBlocks::Table, "backtrace ids");
        let live = |options| Plan::new(&parse_for_test(options)).live_blocks;
        assert_eq!(live("verify_pointers"), LiveBlocks::Sizes);
        assert_eq!(
            live("guard check_unreachable_on_signal"),
            LiveBlocks::Presence
        );
        assert_eq!(
            live("rear_guard verify_pointers free_track"),
            LiveBlocks::Presence
        );
        assert_eq!(live("guard leak_track"), LiveBlocks::Sizes);
        assert_eq!(live("leak_track backtrace"), LiveBlocks::Table);
        let ids_in_header = cfg!(target_pointer_width = "64");
        for options in [
            "guard backtrace",
            "backtrace leak_track rear_guard free_track",
        ] {
            let expected = [LiveBlocks::Table, LiveBlocks::Presence][ids_in_header as usize];
            assert_eq!(live(options), expected, "{options}");
        }
        assert_eq!(live("fill"), LiveBlocks::Table, "nothing tracked");
    }
}
