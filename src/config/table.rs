//! The option table (docs/spec/options.md#option-table) as data, and the generic handler that
//! applies one row.
//!
//! Each row names the option (and its `bt_*` alias, if any), how its value is read, the flag bits
//! it sets and a setter for its effect. The only per-option code is the setters; everything
//! about values (defaults, ranges, messages) is driven by the row.

use super::bits::*;
use super::number::parse_size;
use super::{
    Config, ConfigError, DEFAULT_BACKTRACE_DUMP_PREFIX, DEFAULT_BACKTRACE_FRAMES,
    DEFAULT_EXPAND_BYTES, DEFAULT_FREE_TRACK_ALLOCATIONS, DEFAULT_GUARD_BYTES,
    DEFAULT_RECORD_ALLOCS, DEFAULT_RECORD_ALLOCS_FILE, MAX_BACKTRACE_FRAMES, MAX_EXPAND_BYTES,
    MAX_FREE_TRACK_ALLOCATIONS, MAX_GUARD_BYTES, MAX_RECORD_ALLOCS, MIN_ALIGN,
};

/// How an option takes its value, and what it does with it.
#[derive(Clone, Copy)]
pub(super) enum Kind {
    /// Takes no value; a non-empty value is an error.
    Flag { set: fn(&mut Config<'_>) },
    /// A decimal number in `min..=max`. `default` is used for an empty value; `None` means the
    /// value is required (an empty one is then parsed, and fails as "no digits").
    Number {
        default: Option<usize>,
        min: usize,
        max: usize,
        set: fn(&mut Config<'_>, usize),
    },
    /// Any byte string; an empty value means `default`. Never fails.
    Text {
        default: &'static [u8],
        set: for<'a> fn(&mut Config<'a>, &'a [u8]),
    },
}

/// One option of the table.
#[derive(Clone, Copy)]
pub(super) struct OptionRow {
    pub name: &'static str,
    pub alias: Option<&'static str>,
    pub kind: Kind,
    /// OR-ed into [`Config::options`] once the setter has succeeded.
    pub bits: u64,
}

impl OptionRow {
    pub fn is_named(&self, typed: &[u8]) -> bool {
        self.name.as_bytes() == typed || self.alias.is_some_and(|alias| alias.as_bytes() == typed)
    }

    /// Applies this option with `value` (empty if none was given). `typed` is the name as it
    /// appeared, for the messages. On error `config` is left without this option's bits.
    pub fn apply<'a>(
        &self,
        config: &mut Config<'a>,
        typed: &'a [u8],
        value: &'a [u8],
    ) -> Result<(), ConfigError<'a>> {
        match self.kind {
            Kind::Flag { set } => {
                if !value.is_empty() {
                    return Err(ConfigError::ValueNotAllowed { name: typed });
                }
                set(config);
            }
            Kind::Number {
                default,
                min,
                max,
                set,
            } => {
                let n = match default {
                    Some(default) if value.is_empty() => default,
                    _ => parse_size(typed, value, min, max)?,
                };
                set(config, n);
            }
            Kind::Text { default, set } => {
                set(config, if value.is_empty() { default } else { value })
            }
        }
        config.options |= self.bits;
        Ok(())
    }
}

/// The row for `typed` (exact, case-sensitive match on the name or the alias).
pub(super) fn lookup(typed: &[u8]) -> Option<&'static OptionRow> {
    OPTIONS.iter().find(|row| row.is_named(typed))
}

const fn optional(default: usize, min: usize, max: usize, set: fn(&mut Config<'_>, usize)) -> Kind {
    Kind::Number {
        default: Some(default),
        min,
        max,
        set,
    }
}

const fn required(min: usize, max: usize, set: fn(&mut Config<'_>, usize)) -> Kind {
    Kind::Number {
        default: None,
        min,
        max,
        set,
    }
}

/// For flags whose whole effect is their bits.
const BITS_ONLY: Kind = Kind::Flag { set: |_| {} };

/// Every option: the reference's 27 rows with 8 aliases (35 names), then the extensions
/// (README "Extensions").
pub(super) static OPTIONS: [OptionRow; 32] = [
    OptionRow {
        name: "guard",
        alias: None,
        kind: optional(DEFAULT_GUARD_BYTES, 1, MAX_GUARD_BYTES, |c, n| {
            c.front_guard_bytes = align_up(n);
            c.rear_guard_bytes = n;
        }),
        bits: FRONT_GUARD | REAR_GUARD | TRACK_ALLOCS,
    },
    OptionRow {
        name: "front_guard",
        alias: None,
        kind: optional(DEFAULT_GUARD_BYTES, 1, MAX_GUARD_BYTES, |c, n| {
            c.front_guard_bytes = align_up(n)
        }),
        bits: FRONT_GUARD | TRACK_ALLOCS,
    },
    OptionRow {
        name: "rear_guard",
        alias: None,
        kind: optional(DEFAULT_GUARD_BYTES, 1, MAX_GUARD_BYTES, |c, n| {
            c.rear_guard_bytes = n
        }),
        bits: REAR_GUARD | TRACK_ALLOCS,
    },
    OptionRow {
        name: "backtrace",
        alias: Some("bt"),
        kind: optional(DEFAULT_BACKTRACE_FRAMES, 1, MAX_BACKTRACE_FRAMES, |c, n| {
            c.backtrace_enabled = true;
            c.backtrace_frames = n;
        }),
        bits: BACKTRACE | TRACK_ALLOCS,
    },
    OptionRow {
        name: "backtrace_enable_on_signal",
        alias: Some("bt_en_on_sig"),
        // Shares the frame count with `backtrace` (the later one wins) but does not start
        // capturing: the signal does.
        kind: optional(DEFAULT_BACKTRACE_FRAMES, 1, MAX_BACKTRACE_FRAMES, |c, n| {
            c.backtrace_enable_on_signal = true;
            c.backtrace_frames = n;
        }),
        bits: BACKTRACE | TRACK_ALLOCS,
    },
    OptionRow {
        name: "backtrace_dump_on_exit",
        alias: Some("bt_dmp_on_ex"),
        kind: Kind::Flag {
            set: |c| c.backtrace_dump_on_exit = true,
        },
        bits: 0,
    },
    OptionRow {
        name: "backtrace_dump_prefix",
        alias: Some("bt_dmp_pre"),
        kind: Kind::Text {
            default: DEFAULT_BACKTRACE_DUMP_PREFIX,
            set: |c, v| c.backtrace_dump_prefix = v,
        },
        bits: 0,
    },
    OptionRow {
        name: "backtrace_full",
        alias: Some("bt_full"),
        kind: BITS_ONLY,
        bits: BACKTRACE_FULL,
    },
    OptionRow {
        name: "backtrace_size",
        alias: Some("bt_sz"),
        kind: required(1, usize::MAX, |c, n| {
            c.backtrace_min_size_bytes = n;
            c.backtrace_max_size_bytes = n;
        }),
        bits: BACKTRACE_SPECIFIC_SIZES,
    },
    OptionRow {
        name: "backtrace_min_size",
        alias: Some("bt_min_sz"),
        kind: required(1, usize::MAX, |c, n| c.backtrace_min_size_bytes = n),
        bits: BACKTRACE_SPECIFIC_SIZES,
    },
    OptionRow {
        name: "backtrace_max_size",
        alias: Some("bt_max_sz"),
        kind: required(1, usize::MAX, |c, n| c.backtrace_max_size_bytes = n),
        bits: BACKTRACE_SPECIFIC_SIZES,
    },
    OptionRow {
        name: "fill",
        alias: None,
        kind: optional(usize::MAX, 1, usize::MAX, |c, n| {
            c.fill_on_alloc_bytes = n;
            c.fill_on_free_bytes = n;
        }),
        bits: FILL_ON_ALLOC | FILL_ON_FREE,
    },
    OptionRow {
        name: "fill_on_alloc",
        alias: None,
        kind: optional(usize::MAX, 1, usize::MAX, |c, n| c.fill_on_alloc_bytes = n),
        bits: FILL_ON_ALLOC,
    },
    OptionRow {
        name: "fill_on_free",
        alias: None,
        kind: optional(usize::MAX, 1, usize::MAX, |c, n| c.fill_on_free_bytes = n),
        bits: FILL_ON_FREE,
    },
    OptionRow {
        name: "expand_alloc",
        alias: None,
        kind: optional(DEFAULT_EXPAND_BYTES, 1, MAX_EXPAND_BYTES, |c, n| {
            c.expand_alloc_bytes = n
        }),
        bits: EXPAND_ALLOC,
    },
    OptionRow {
        name: "free_track",
        alias: None,
        kind: optional(
            DEFAULT_FREE_TRACK_ALLOCATIONS,
            1,
            MAX_FREE_TRACK_ALLOCATIONS,
            set_free_track,
        ),
        bits: FREE_TRACK | FILL_ON_FREE | TRACK_ALLOCS,
    },
    OptionRow {
        name: "free_track_backtrace_num_frames",
        alias: None,
        // The only numeric option that accepts 0 (no backtraces at free).
        kind: optional(DEFAULT_BACKTRACE_FRAMES, 0, MAX_BACKTRACE_FRAMES, |c, n| {
            c.free_track_backtrace_num_frames = n
        }),
        bits: 0,
    },
    OptionRow {
        name: "leak_track",
        alias: None,
        kind: BITS_ONLY,
        bits: LEAK_TRACK | TRACK_ALLOCS,
    },
    OptionRow {
        name: "record_allocs",
        alias: None,
        kind: optional(DEFAULT_RECORD_ALLOCS, 1, MAX_RECORD_ALLOCS, |c, n| {
            c.record_allocs_num_entries = n;
            // Only a default: an earlier record_allocs_file keeps its name.
            if c.record_allocs_file.is_empty() {
                c.record_allocs_file = DEFAULT_RECORD_ALLOCS_FILE;
            }
        }),
        bits: RECORD_ALLOCS,
    },
    OptionRow {
        name: "record_allocs_file",
        alias: None,
        kind: Kind::Text {
            default: DEFAULT_RECORD_ALLOCS_FILE,
            set: |c, v| c.record_allocs_file = v,
        },
        bits: 0,
    },
    OptionRow {
        name: "record_allocs_on_exit",
        alias: None,
        kind: Kind::Flag {
            set: |c| c.record_allocs_on_exit = true,
        },
        bits: 0,
    },
    OptionRow {
        name: "verify_pointers",
        alias: None,
        kind: BITS_ONLY,
        bits: TRACK_ALLOCS,
    },
    OptionRow {
        name: "abort_on_error",
        alias: None,
        kind: BITS_ONLY,
        bits: ABORT_ON_ERROR,
    },
    OptionRow {
        name: "verbose",
        alias: None,
        kind: BITS_ONLY,
        bits: VERBOSE,
    },
    OptionRow {
        name: "check_unreachable_on_signal",
        alias: None,
        kind: BITS_ONLY,
        // The check walks the live-pointer table (the reference asks the native allocator via
        // malloc_iterate, which glibc does not have), so the option turns tracking on.
        bits: CHECK_UNREACHABLE_ON_SIGNAL | TRACK_ALLOCS,
    },
    OptionRow {
        name: "log_allocator_stats_on_signal",
        alias: None,
        kind: BITS_ONLY,
        bits: LOG_ALLOCATOR_STATS_ON_SIGNAL,
    },
    OptionRow {
        name: "log_allocator_stats_on_exit",
        alias: None,
        kind: BITS_ONLY,
        bits: LOG_ALLOCATOR_STATS_ON_EXIT,
    },
    // Extensions. The exit leak report classifies blocks (src/unreachable/classify.rs) and
    // prints only the unreachable and indirectly lost ones; it implies leak_track, and
    // fill_on_free unless that was given a size: a freed block keeps stale copies of pointers
    // (glibc reuses freed memory slowly), which the scan of the heap would take for references
    // and so call lost blocks reachable (`as` assembling a small file: 7 lost blocks found
    // instead of valgrind's 15 without the fill, exactly valgrind's 15 with it).
    OptionRow {
        name: "leak_unreachable",
        alias: None,
        kind: Kind::Flag {
            set: |c| {
                c.leak_unreachable = true;
                if c.fill_on_free_bytes == 0 {
                    c.fill_on_free_bytes = usize::MAX;
                }
            },
        },
        bits: LEAK_TRACK | TRACK_ALLOCS | FILL_ON_FREE,
    },
    OptionRow {
        name: "leak_suppressions",
        alias: None,
        kind: Kind::Text {
            default: b"",
            set: |c, v| c.leak_suppressions = v,
        },
        bits: 0,
    },
    OptionRow {
        name: "log_file",
        alias: None,
        kind: Kind::Text {
            default: b"",
            set: |c, v| c.log_file = v,
        },
        bits: 0,
    },
    OptionRow {
        name: "error_marker_file",
        alias: None,
        kind: Kind::Text {
            default: b"",
            set: |c, v| c.error_marker_file = v,
        },
        bits: 0,
    },
    // Adds the block's allocation backtrace after the reference's lines of every error report
    // (src/error_context.rs); it captures nothing itself, so without `backtrace` (or a signal
    // turning capture on) there is nothing to add.
    OptionRow {
        name: "error_backtraces",
        alias: None,
        kind: Kind::Flag {
            set: |c| c.error_backtraces = true,
        },
        bits: 0,
    },
];

/// Front guards are rounded up to [`MIN_ALIGN`] so the user pointer stays aligned; `n` is at most
/// `MAX_GUARD_BYTES`, so this cannot overflow.
fn align_up(n: usize) -> usize {
    n.next_multiple_of(MIN_ALIGN)
}

/// `free_track` also turns on fill-on-free and free-time backtraces, but only where those are
/// still at their zero defaults *when free_track is processed*: a value set earlier is kept, one
/// set later overwrites (docs/spec/options.md#free_track). An explicit earlier 0 for the frames
/// cannot be told from unset, so it becomes the default too, as in the reference.
fn set_free_track(config: &mut Config<'_>, n: usize) {
    config.free_track_allocations = n;
    if config.fill_on_free_bytes == 0 {
        config.fill_on_free_bytes = usize::MAX;
    }
    if config.free_track_backtrace_num_frames == 0 {
        config.free_track_backtrace_num_frames = DEFAULT_BACKTRACE_FRAMES;
    }
}
