//! Option parsing (docs/spec/options.md#parsing): turns the option string libc hands to
//! `debug_initialize` into a [`Config`].
//!
//! The work is split by concern:
//! * [`tokens`] cuts the string into `name[=value]` pairs exactly like the reference's
//!   tokenizer (docs/spec/options.md#tokens);
//! * [`table`] is the option table (docs/spec/options.md#option-table) as data: one row per option
//!   with its alias, value kind, default, range, flag bits and setter;
//! * [`number`] is `strtol` plus the range checks, in the reference's order
//!   (docs/spec/options.md#numbers);
//! * [`error`] holds [`ConfigError`] and the exact message texts
//!   (docs/spec/errors.md#option-errors);
//! * [`check`] exports the parser to the host CLI (`malloc_debug_check_options`, an extension).
//!
//! Everything here runs inside `debug_initialize`, i.e. inside malloc: nothing allocates, the
//! result borrows from the option string, and no input can reach a panic.

#[cfg(not(target_os = "android"))]
mod check;
mod error;
mod number;
mod table;
mod tokens;

#[cfg(test)]
mod tests;

pub use error::{ConfigError, ERANGE_TEXT};

/// The option flag bits (docs/spec/options.md#option-table). Several options may set the same bit;
/// the bits, not the option names, drive the rest of the library.
pub mod bits {
    pub const FRONT_GUARD: u64 = 0x1;
    pub const REAR_GUARD: u64 = 0x2;
    pub const BACKTRACE: u64 = 0x4;
    pub const FILL_ON_ALLOC: u64 = 0x8;
    pub const FILL_ON_FREE: u64 = 0x10;
    pub const EXPAND_ALLOC: u64 = 0x20;
    pub const FREE_TRACK: u64 = 0x40;
    pub const TRACK_ALLOCS: u64 = 0x80;
    pub const LEAK_TRACK: u64 = 0x100;
    pub const RECORD_ALLOCS: u64 = 0x200;
    pub const BACKTRACE_FULL: u64 = 0x400;
    pub const ABORT_ON_ERROR: u64 = 0x800;
    pub const VERBOSE: u64 = 0x1000;
    pub const CHECK_UNREACHABLE_ON_SIGNAL: u64 = 0x2000;
    pub const BACKTRACE_SPECIFIC_SIZES: u64 = 0x4000;
    pub const LOG_ALLOCATOR_STATS_ON_SIGNAL: u64 = 0x8000;
    pub const LOG_ALLOCATOR_STATS_ON_EXIT: u64 = 0x10000;
}

/// Byte written over a new allocation with `fill_on_alloc`.
pub const FILL_ALLOC_BYTE: u8 = 0xeb;
/// Byte written over a freed allocation with `fill_on_free` / `free_track`.
pub const FILL_FREE_BYTE: u8 = 0xef;
/// Byte pattern of the front guard.
pub const FRONT_GUARD_BYTE: u8 = 0xaa;
/// Byte pattern of the rear guard.
pub const REAR_GUARD_BYTE: u8 = 0xbb;

/// The allocator's minimum alignment: 16 on LP64, 8 on ILP32. Front guards are rounded up to it
/// so the user pointer after header + front guard stays aligned.
pub const MIN_ALIGN: usize = if cfg!(target_pointer_width = "64") {
    16
} else {
    8
};

pub const DEFAULT_GUARD_BYTES: usize = 32;
pub const MAX_GUARD_BYTES: usize = 16384;
pub const DEFAULT_BACKTRACE_FRAMES: usize = 16;
pub const MAX_BACKTRACE_FRAMES: usize = 256;
pub const DEFAULT_EXPAND_BYTES: usize = 16;
pub const MAX_EXPAND_BYTES: usize = 16384;
pub const DEFAULT_FREE_TRACK_ALLOCATIONS: usize = 100;
pub const MAX_FREE_TRACK_ALLOCATIONS: usize = 16384;
pub const DEFAULT_RECORD_ALLOCS: usize = 8_000_000;
pub const MAX_RECORD_ALLOCS: usize = 50_000_000;
pub const DEFAULT_BACKTRACE_DUMP_PREFIX: &[u8] = b"/data/local/tmp/backtrace_heap";
pub const DEFAULT_RECORD_ALLOCS_FILE: &[u8] = b"/data/local/tmp/record_allocs.txt";

impl Config<'static> {
    /// Android writes dumps and records under `/data/local/tmp`. A host without that directory
    /// gets the same file names under `/tmp` (docs/spec/abi.md#the-glibc-front); explicit paths
    /// are never changed.
    pub fn localize_default_paths(mut self) -> Self {
        if cfg!(target_os = "android") || crate::platform::data_local_tmp_exists() {
            return self;
        }
        if self.backtrace_dump_prefix == DEFAULT_BACKTRACE_DUMP_PREFIX {
            self.backtrace_dump_prefix = b"/tmp/backtrace_heap";
        }
        if self.record_allocs_file == DEFAULT_RECORD_ALLOCS_FILE {
            self.record_allocs_file = b"/tmp/record_allocs.txt";
        }
        self
    }
}

/// `SIGRTMAX` on Android and Linux (docs/spec/options.md#signals). `libc::SIGRTMAX()` is a
/// function, so the signal numbers are fixed here instead of computed.
const SIGRTMAX: i32 = 64;

/// The usage text logged (one ERROR record per line) after an option error
/// (docs/spec/options.md#unknown-names-and-failure).
pub const USAGE_LINES: [&str; 2] = [
    "For malloc debug option descriptions go to:",
    "  https://android.googlesource.com/platform/bionic/+/main/libc/malloc_debug/README.md",
];

/// The parsed options. Byte-string fields borrow from the option string (or are `'static`
/// defaults), so parsing never allocates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config<'a> {
    /// OR of [`bits`] of every option given.
    pub options: u64,
    /// Already rounded up to [`MIN_ALIGN`].
    pub front_guard_bytes: usize,
    /// Exactly as given (never rounded, docs/spec/options.md#rear_guard).
    pub rear_guard_bytes: usize,
    /// Shared by `backtrace` and `backtrace_enable_on_signal`: the later one wins.
    pub backtrace_frames: usize,
    /// Capture from the start (`backtrace`).
    pub backtrace_enabled: bool,
    /// Capture toggled by [`Config::backtrace_signal`] (`backtrace_enable_on_signal`).
    pub backtrace_enable_on_signal: bool,
    pub backtrace_dump_on_exit: bool,
    pub backtrace_dump_prefix: &'a [u8],
    /// Only allocations of `min..=max` bytes get backtraces (defaults 0 / `usize::MAX`).
    pub backtrace_min_size_bytes: usize,
    pub backtrace_max_size_bytes: usize,
    pub fill_on_alloc_bytes: usize,
    pub fill_on_free_bytes: usize,
    pub expand_alloc_bytes: usize,
    pub free_track_allocations: usize,
    pub free_track_backtrace_num_frames: usize,
    pub record_allocs_num_entries: usize,
    /// Empty until `record_allocs` or `record_allocs_file` sets it
    /// (docs/spec/options.md#record_allocs).
    pub record_allocs_file: &'a [u8],
    pub record_allocs_on_exit: bool,
    pub backtrace_signal: i32,
    pub backtrace_dump_signal: i32,
    pub record_allocs_signal: i32,
    pub check_unreachable_signal: i32,
    pub log_allocator_stats_signal: i32,
    /// Extensions (README "Extensions"; none of them changes what the reference's options do).
    /// `leak_unreachable`: the exit report prints only unreachable and indirectly lost blocks.
    pub leak_unreachable: bool,
    /// `leak_suppressions=FILE`: LeakSanitizer-format rules; empty when not given.
    pub leak_suppressions: &'a [u8],
    /// `log_file=FILE`: the host log goes to FILE instead of stderr; empty when not given.
    pub log_file: &'a [u8],
    /// `error_marker_file=FILE`: a line is appended when an error or a leak is reported.
    pub error_marker_file: &'a [u8],
    /// `error_backtraces`: error reports end with the block's allocation backtrace.
    pub error_backtraces: bool,
}

impl Config<'static> {
    /// The state before any option is applied (docs/spec/options.md#defaults-before-parsing).
    pub const INITIAL: Config<'static> = Config {
        options: 0,
        front_guard_bytes: 0,
        rear_guard_bytes: 0,
        backtrace_frames: 0,
        backtrace_enabled: false,
        backtrace_enable_on_signal: false,
        backtrace_dump_on_exit: false,
        backtrace_dump_prefix: DEFAULT_BACKTRACE_DUMP_PREFIX,
        backtrace_min_size_bytes: 0,
        backtrace_max_size_bytes: usize::MAX,
        fill_on_alloc_bytes: 0,
        fill_on_free_bytes: 0,
        expand_alloc_bytes: 0,
        free_track_allocations: 0,
        free_track_backtrace_num_frames: 0,
        record_allocs_num_entries: 0,
        record_allocs_file: b"",
        record_allocs_on_exit: false,
        backtrace_signal: SIGRTMAX - 19,
        record_allocs_signal: SIGRTMAX - 18,
        backtrace_dump_signal: SIGRTMAX - 17,
        check_unreachable_signal: SIGRTMAX - 16,
        log_allocator_stats_signal: SIGRTMAX - 15,
        leak_unreachable: false,
        leak_suppressions: b"",
        log_file: b"",
        error_marker_file: b"",
        error_backtraces: false,
    };
}

impl Default for Config<'_> {
    fn default() -> Self {
        Config::INITIAL
    }
}

impl<'a> Config<'a> {
    /// Parses an option string (docs/spec/options.md#parsing). Options are applied left to right;
    /// the first error stops parsing and is returned (the caller logs it and the usage text). A NUL
    /// byte ends the string, as it would for the C string the reference parses.
    pub fn parse(options: &'a [u8]) -> Result<Config<'a>, ConfigError<'a>> {
        let mut config = Config::INITIAL;
        for token in tokens::Tokens::new(until_nul(options)) {
            let row =
                table::lookup(token.name).ok_or(ConfigError::UnknownOption { name: token.name })?;
            row.apply(&mut config, token.name, token.value)?;
        }
        Ok(config)
    }

    /// Whether any of the bits in `bit` was set by the options.
    pub fn has(&self, bit: u64) -> bool {
        self.options & bit != 0
    }
}

/// The part of `bytes` before the first NUL.
fn until_nul(bytes: &[u8]) -> &[u8] {
    match bytes.iter().position(|&b| b == 0) {
        Some(end) => bytes.get(..end).unwrap_or(bytes),
        None => bytes,
    }
}
