//! Tests of the option parser against docs/spec/options.md. Expected values are written out here
//! independently of the option table, so a wrong row fails.

use super::bits::*;
use super::*;

const PROG: &[u8] = b"malloc_testing";

fn message(error: &ConfigError<'_>) -> String {
    let mut text = String::new();
    error
        .write_message(PROG, &mut text)
        .expect("formatting an option error");
    text
}

/// Parses `options`, failing the test with the message on error.
fn ok(options: &str) -> Config<'_> {
    Config::parse(options.as_bytes()).unwrap_or_else(|e| panic!("{options:?}: {}", message(&e)))
}

/// The error message for `options`, failing the test if it parses.
fn err(options: &str) -> String {
    match Config::parse(options.as_bytes()) {
        Ok(config) => panic!("{options:?} parsed: {config:?}"),
        Err(e) => message(&e),
    }
}

fn bad(name: &str, tail: &str) -> String {
    format!("malloc_testing: bad value for option '{name}'{tail}")
}

/// `align_up(n, MIN_ALIGN)`, written independently of the implementation.
fn front(n: usize) -> usize {
    n.div_ceil(MIN_ALIGN) * MIN_ALIGN
}

// ---------------------------------------------------------------------------------------------
// Per-row expectations.

struct NumberCase {
    names: &'static [&'static str],
    /// `None`: the value is required.
    default: Option<usize>,
    min: usize,
    max: usize,
    bits: u64,
    /// The field the option writes, and how a value N is stored there.
    get: fn(&Config<'_>) -> usize,
    stored: fn(usize) -> usize,
    /// Other fields the option must set, checked after any successful parse.
    also: fn(&Config<'_>) -> bool,
}

const fn same(n: usize) -> usize {
    n
}

const NUMBER_CASES: &[NumberCase] = &[
    NumberCase {
        names: &["guard"],
        default: Some(32),
        min: 1,
        max: 16384,
        bits: FRONT_GUARD | REAR_GUARD | TRACK_ALLOCS,
        get: |c| c.rear_guard_bytes,
        stored: same,
        also: |c| c.front_guard_bytes == front(c.rear_guard_bytes),
    },
    NumberCase {
        names: &["front_guard"],
        default: Some(32),
        min: 1,
        max: 16384,
        bits: FRONT_GUARD | TRACK_ALLOCS,
        get: |c| c.front_guard_bytes,
        stored: front,
        also: |c| c.rear_guard_bytes == 0,
    },
    NumberCase {
        names: &["rear_guard"],
        default: Some(32),
        min: 1,
        max: 16384,
        bits: REAR_GUARD | TRACK_ALLOCS,
        get: |c| c.rear_guard_bytes,
        stored: same,
        also: |c| c.front_guard_bytes == 0,
    },
    NumberCase {
        names: &["backtrace", "bt"],
        default: Some(16),
        min: 1,
        max: 256,
        bits: BACKTRACE | TRACK_ALLOCS,
        get: |c| c.backtrace_frames,
        stored: same,
        also: |c| c.backtrace_enabled && !c.backtrace_enable_on_signal,
    },
    NumberCase {
        names: &["backtrace_enable_on_signal", "bt_en_on_sig"],
        default: Some(16),
        min: 1,
        max: 256,
        bits: BACKTRACE | TRACK_ALLOCS,
        get: |c| c.backtrace_frames,
        stored: same,
        also: |c| !c.backtrace_enabled && c.backtrace_enable_on_signal,
    },
    NumberCase {
        names: &["backtrace_size", "bt_sz"],
        default: None,
        min: 1,
        max: usize::MAX,
        bits: BACKTRACE_SPECIFIC_SIZES,
        get: |c| c.backtrace_min_size_bytes,
        stored: same,
        also: |c| c.backtrace_max_size_bytes == c.backtrace_min_size_bytes,
    },
    NumberCase {
        names: &["backtrace_min_size", "bt_min_sz"],
        default: None,
        min: 1,
        max: usize::MAX,
        bits: BACKTRACE_SPECIFIC_SIZES,
        get: |c| c.backtrace_min_size_bytes,
        stored: same,
        also: |c| c.backtrace_max_size_bytes == usize::MAX,
    },
    NumberCase {
        names: &["backtrace_max_size", "bt_max_sz"],
        default: None,
        min: 1,
        max: usize::MAX,
        bits: BACKTRACE_SPECIFIC_SIZES,
        get: |c| c.backtrace_max_size_bytes,
        stored: same,
        also: |c| c.backtrace_min_size_bytes == 0,
    },
    NumberCase {
        names: &["fill"],
        default: Some(usize::MAX),
        min: 1,
        max: usize::MAX,
        bits: FILL_ON_ALLOC | FILL_ON_FREE,
        get: |c| c.fill_on_alloc_bytes,
        stored: same,
        also: |c| c.fill_on_free_bytes == c.fill_on_alloc_bytes,
    },
    NumberCase {
        names: &["fill_on_alloc"],
        default: Some(usize::MAX),
        min: 1,
        max: usize::MAX,
        bits: FILL_ON_ALLOC,
        get: |c| c.fill_on_alloc_bytes,
        stored: same,
        also: |c| c.fill_on_free_bytes == 0,
    },
    NumberCase {
        names: &["fill_on_free"],
        default: Some(usize::MAX),
        min: 1,
        max: usize::MAX,
        bits: FILL_ON_FREE,
        get: |c| c.fill_on_free_bytes,
        stored: same,
        also: |c| c.fill_on_alloc_bytes == 0,
    },
    NumberCase {
        names: &["expand_alloc"],
        default: Some(16),
        min: 1,
        max: 16384,
        bits: EXPAND_ALLOC,
        get: |c| c.expand_alloc_bytes,
        stored: same,
        also: |_| true,
    },
    NumberCase {
        names: &["free_track"],
        default: Some(100),
        min: 1,
        max: 16384,
        bits: FREE_TRACK | FILL_ON_FREE | TRACK_ALLOCS,
        get: |c| c.free_track_allocations,
        stored: same,
        also: |c| c.fill_on_free_bytes == usize::MAX && c.free_track_backtrace_num_frames == 16,
    },
    NumberCase {
        names: &["free_track_backtrace_num_frames"],
        default: Some(16),
        min: 0,
        max: 256,
        bits: 0,
        get: |c| c.free_track_backtrace_num_frames,
        stored: same,
        also: |c| c.free_track_allocations == 0,
    },
    NumberCase {
        names: &["record_allocs"],
        default: Some(8_000_000),
        min: 1,
        max: 50_000_000,
        bits: RECORD_ALLOCS,
        get: |c| c.record_allocs_num_entries,
        stored: same,
        also: |c| c.record_allocs_file == b"/data/local/tmp/record_allocs.txt",
    },
];

/// Parses `name=value`, checks the stored value, the bits and the side fields.
fn check_number(case: &NumberCase, options: &str, expected: usize) {
    let config = ok(options);
    assert_eq!((case.get)(&config), expected, "{options}");
    assert_eq!(config.options, case.bits, "{options}");
    assert!((case.also)(&config), "{options}: {config:?}");
}

#[test]
fn number_rows_default_and_empty_value() {
    for case in NUMBER_CASES {
        for name in case.names {
            for options in [
                name.to_string(),
                format!("{name}="),
                format!("  {name}  =  "),
            ] {
                match case.default {
                    Some(default) => check_number(case, &options, default),
                    None => assert_eq!(err(&options), bad(name, "")),
                }
            }
        }
    }
}

#[test]
fn number_rows_explicit_values_and_bounds() {
    for case in NUMBER_CASES {
        for name in case.names {
            for n in [case.min.max(1), 7, 48, case.min] {
                check_number(case, &format!("{name}={n}"), (case.stored)(n));
            }
            if case.max != usize::MAX {
                check_number(
                    case,
                    &format!("{name}={}", case.max),
                    (case.stored)(case.max),
                );
                let over = case.max + 1;
                let expected = bad(name, &format!(", value must be <= {}: {over}", case.max));
                assert_eq!(err(&format!("{name}={over}")), expected);
            }
            let below = case.min as i64 - 1;
            let expected = if below < 0 {
                bad(name, &format!(", value cannot be negative: {below}"))
            } else {
                bad(name, &format!(", value must be >= {}: {below}", case.min))
            };
            assert_eq!(err(&format!("{name}={below}")), expected);
        }
    }
}

#[test]
fn unbounded_rows_accept_long_max_and_reject_overflow() {
    let long_max = core::ffi::c_long::MAX;
    for case in NUMBER_CASES.iter().filter(|case| case.max == usize::MAX) {
        for name in case.names {
            check_number(case, &format!("{name}={long_max}"), long_max as usize);
            let overflow = long_max as u64 + 1;
            assert_eq!(
                err(&format!("{name}={overflow}")),
                bad(name, ": Math result not representable")
            );
        }
    }
}

#[test]
fn number_rows_reject_bad_text_with_typed_name() {
    for case in NUMBER_CASES {
        for name in case.names {
            assert_eq!(err(&format!("{name}=XXX")), bad(name, ""));
            assert_eq!(err(&format!("{name}=-")), bad(name, ""));
            assert_eq!(err(&format!("{name}=+")), bad(name, ""));
            assert_eq!(
                err(&format!("{name}=0x10")),
                bad(name, ", non space found after option: x10")
            );
            assert_eq!(
                err(&format!("{name}=-5abc")),
                bad(name, ", non space found after option: abc")
            );
            assert_eq!(
                err(&format!("{name}=-5")),
                bad(name, ", value cannot be negative: -5")
            );
            assert_eq!(
                err(&format!("{name}=99999999999999999999")),
                bad(name, ": Math result not representable")
            );
        }
    }
}

struct FlagCase {
    names: &'static [&'static str],
    bits: u64,
    effect: fn(&Config<'_>) -> bool,
}

const FLAG_CASES: &[FlagCase] = &[
    FlagCase {
        names: &["backtrace_dump_on_exit", "bt_dmp_on_ex"],
        bits: 0,
        effect: |c| c.backtrace_dump_on_exit,
    },
    FlagCase {
        names: &["backtrace_full", "bt_full"],
        bits: BACKTRACE_FULL,
        effect: |_| true,
    },
    FlagCase {
        names: &["leak_track"],
        bits: LEAK_TRACK | TRACK_ALLOCS,
        effect: |_| true,
    },
    FlagCase {
        names: &["leak_unreachable"],
        bits: LEAK_TRACK | TRACK_ALLOCS | FILL_ON_FREE,
        effect: |c| c.leak_unreachable && c.fill_on_free_bytes == usize::MAX,
    },
    FlagCase {
        names: &["error_backtraces"],
        bits: 0,
        effect: |c| c.error_backtraces,
    },
    FlagCase {
        names: &["record_allocs_on_exit"],
        bits: 0,
        effect: |c| c.record_allocs_on_exit,
    },
    FlagCase {
        names: &["verify_pointers"],
        bits: TRACK_ALLOCS,
        effect: |_| true,
    },
    FlagCase {
        names: &["abort_on_error"],
        bits: ABORT_ON_ERROR,
        effect: |_| true,
    },
    FlagCase {
        names: &["verbose"],
        bits: VERBOSE,
        effect: |_| true,
    },
    FlagCase {
        names: &["check_unreachable_on_signal"],
        bits: CHECK_UNREACHABLE_ON_SIGNAL | TRACK_ALLOCS,
        effect: |_| true,
    },
    FlagCase {
        names: &["log_allocator_stats_on_signal"],
        bits: LOG_ALLOCATOR_STATS_ON_SIGNAL,
        effect: |_| true,
    },
    FlagCase {
        names: &["log_allocator_stats_on_exit"],
        bits: LOG_ALLOCATOR_STATS_ON_EXIT,
        effect: |_| true,
    },
];

#[test]
fn flag_rows() {
    for case in FLAG_CASES {
        for name in case.names {
            for options in [name.to_string(), format!("{name}="), format!("{name} = ")] {
                let config = ok(&options);
                assert_eq!(config.options, case.bits, "{options}");
                assert!((case.effect)(&config), "{options}");
                // Nothing else changes.
                assert_eq!(
                    Config {
                        options: 0,
                        ..config
                    },
                    initial_with_effect(&config),
                    "{options}"
                );
            }
            let expected = format!(
                "malloc_testing: value set for option '{name}' which does not take a value"
            );
            assert_eq!(err(&format!("{name}=1")), expected);
            assert_eq!(err(&format!("{name}= x")), expected);
        }
    }
}

/// The initial config with only the flag fields copied from `config`.
fn initial_with_effect(config: &Config<'_>) -> Config<'static> {
    Config {
        backtrace_dump_on_exit: config.backtrace_dump_on_exit,
        record_allocs_on_exit: config.record_allocs_on_exit,
        leak_unreachable: config.leak_unreachable,
        error_backtraces: config.error_backtraces,
        fill_on_free_bytes: config.fill_on_free_bytes,
        ..Config::INITIAL
    }
}

struct TextCase {
    names: &'static [&'static str],
    default: &'static [u8],
    get: for<'a> fn(&Config<'a>) -> &'a [u8],
}

const TEXT_CASES: &[TextCase] = &[
    TextCase {
        names: &["backtrace_dump_prefix", "bt_dmp_pre"],
        default: b"/data/local/tmp/backtrace_heap",
        get: |c| c.backtrace_dump_prefix,
    },
    TextCase {
        names: &["record_allocs_file"],
        default: b"/data/local/tmp/record_allocs.txt",
        get: |c| c.record_allocs_file,
    },
    TextCase {
        names: &["leak_suppressions"],
        default: b"",
        get: |c| c.leak_suppressions,
    },
    TextCase {
        names: &["log_file"],
        default: b"",
        get: |c| c.log_file,
    },
    TextCase {
        names: &["error_marker_file"],
        default: b"",
        get: |c| c.error_marker_file,
    },
];

#[test]
fn text_rows() {
    for case in TEXT_CASES {
        for name in case.names {
            for options in [name.to_string(), format!("{name}="), format!("{name} =\t")] {
                let config = ok(&options);
                assert_eq!((case.get)(&config), case.default, "{options}");
                assert_eq!(config.options, 0);
            }
            let options = format!("{name}=/x/y=z");
            let config = ok(&options);
            assert_eq!((case.get)(&config), b"/x/y=z");
            assert_eq!(config.options, 0);
            // Anything is a valid string, even what looks like a number or an option.
            assert_eq!((case.get)(&ok(&format!("{name}= -5"))), b"-5");
            assert_eq!((case.get)(&ok(&format!("{name}=verbose"))), b"verbose");
        }
    }
}

#[test]
fn table_has_exactly_the_spec_names() {
    let mut names: Vec<&str> = Vec::new();
    for row in &table::OPTIONS {
        names.push(row.name);
        names.extend(row.alias);
    }
    let mut tested: Vec<&str> = NUMBER_CASES
        .iter()
        .flat_map(|c| c.names.iter().copied())
        .collect();
    tested.extend(FLAG_CASES.iter().flat_map(|c| c.names.iter().copied()));
    tested.extend(TEXT_CASES.iter().flat_map(|c| c.names.iter().copied()));
    // The reference's 35 names and the 5 extensions.
    assert_eq!(names.len(), 40);
    names.sort_unstable();
    tested.sort_unstable();
    assert_eq!(names, tested);
    names.dedup();
    assert_eq!(names.len(), 40, "duplicate names");
}

#[test]
fn names_are_case_sensitive_and_exact() {
    for typo in [
        "Backtrace",
        "BT",
        "backtrace_",
        "guards",
        "bt_",
        "b",
        "fill_on",
        "verbose1",
    ] {
        assert_eq!(err(typo), format!("malloc_testing: unknown option {typo}"));
    }
}

// ---------------------------------------------------------------------------------------------
// Tokenizer (docs/spec/options.md#tokens).

#[test]
fn whitespace_around_equals() {
    assert_eq!(ok("backtrace  =10").backtrace_frames, 10);
    assert_eq!(ok("backtrace=  10").backtrace_frames, 10);
    assert_eq!(ok("backtrace \t\n\x0b\x0c\r=\x0b10").backtrace_frames, 10);
    assert_eq!(ok("backtrace="), ok("backtrace"));
    assert_eq!(ok("backtrace=").backtrace_frames, 16);
}

#[test]
fn value_after_equals_and_space_belongs_to_the_option() {
    assert_eq!(err("backtrace= fill"), bad("backtrace", ""));
    assert_eq!(
        err("backtrace=10front_guard"),
        bad("backtrace", ", non space found after option: front_guard")
    );
    assert_eq!(
        err("backtrace=10=5"),
        bad("backtrace", ", non space found after option: =5")
    );
    assert_eq!(err("backtrace==5"), bad("backtrace", ""));
}

#[test]
fn empty_name() {
    assert_eq!(err("=5"), "malloc_testing: unknown option ");
    assert_eq!(err("  =  5"), "malloc_testing: unknown option ");
    assert_eq!(
        err("verbose =5 =5"),
        "malloc_testing: value set for option 'verbose' which does not take a value"
    );
    assert_eq!(
        err("verbose =5"),
        "malloc_testing: value set for option 'verbose' which does not take a value"
    );
    // `verbose =` is `verbose` with an empty value, and whitespace after `=` is skipped, so
    // `verbose = =5` gives `verbose` the value `=5`; only after a complete value does `=` start
    // a token with an empty name.
    assert_eq!(ok("verbose =").options, VERBOSE);
    assert_eq!(
        err("verbose = =5"),
        "malloc_testing: value set for option 'verbose' which does not take a value"
    );
    assert_eq!(err("bt=5 =5"), "malloc_testing: unknown option ");
}

#[test]
fn names_without_values_are_separate_tokens() {
    let config = ok("leak_track verbose");
    assert_eq!(config.options, LEAK_TRACK | TRACK_ALLOCS | VERBOSE);
    assert_eq!(
        ok("\tbacktrace\nfront_guard\x0bverbose\x0c\rabort_on_error ").options,
        BACKTRACE | TRACK_ALLOCS | FRONT_GUARD | VERBOSE | ABORT_ON_ERROR
    );
}

#[test]
fn all_whitespace_and_empty_strings_enable_nothing() {
    for options in ["", " ", " \t\n\x0b\x0c\r "] {
        assert_eq!(ok(options), Config::INITIAL);
    }
}

#[test]
fn nul_ends_the_string() {
    let config = Config::parse(b"verbose\0leak_track").unwrap();
    assert_eq!(config.options, VERBOSE);
    assert_eq!(Config::parse(b"\0=5").unwrap(), Config::INITIAL);
    assert_eq!(
        Config::parse(b"backtrace=12\0x").unwrap().backtrace_frames,
        12
    );
}

#[test]
fn non_ascii_bytes_are_printed_lossily() {
    let e = Config::parse(b"caf\xc3\xa9 \xff\xfe=1").unwrap_err();
    assert_eq!(message(&e), "malloc_testing: unknown option café");
    let e = Config::parse(b"\xff\xfe=1").unwrap_err();
    assert_eq!(
        message(&e),
        "malloc_testing: unknown option \u{fffd}\u{fffd}"
    );
    let e = Config::parse(b"bt=5\xff").unwrap_err();
    assert_eq!(
        message(&e),
        bad("bt", ", non space found after option: \u{fffd}")
    );
    // Bytes >= 0x80 are not whitespace (C isspace in the "C" locale).
    let e = Config::parse(b"verbose\xa0").unwrap_err();
    assert_eq!(
        message(&e),
        "malloc_testing: unknown option verbose\u{fffd}"
    );
    let mut text = String::new();
    e.write_message(b"prog\xff", &mut text).unwrap();
    assert!(text.starts_with("prog\u{fffd}: unknown option"));
}

// ---------------------------------------------------------------------------------------------
// Processing and failure (docs/spec/options.md#unknown-names-and-failure).

#[test]
fn first_error_stops_parsing() {
    assert_eq!(
        err("verbose foo bt=0"),
        "malloc_testing: unknown option foo"
    );
    assert_eq!(err("bt=0 foo"), bad("bt", ", value must be >= 1: 0"));
}

#[test]
fn failed_option_contributes_no_bits() {
    // Parse is all-or-nothing, so check through the row handler directly.
    let mut config = Config::INITIAL;
    let row = table::lookup(b"free_track").unwrap();
    assert!(row.apply(&mut config, b"free_track", b"0").is_err());
    assert_eq!(config, Config::INITIAL);
    let row = table::lookup(b"verbose").unwrap();
    assert!(row.apply(&mut config, b"verbose", b"1").is_err());
    assert_eq!(config, Config::INITIAL);
}

#[test]
fn usage_lines() {
    assert_eq!(
        USAGE_LINES[0],
        "For malloc debug option descriptions go to:"
    );
    assert_eq!(
        USAGE_LINES[1],
        "  https://android.googlesource.com/platform/bionic/+/main/libc/malloc_debug/README.md"
    );
}

// ---------------------------------------------------------------------------------------------
// Numeric values (docs/spec/options.md#numbers).

#[test]
fn numeric_messages() {
    assert_eq!(
        err("bt=257"),
        "malloc_testing: bad value for option 'bt', value must be <= 256: 257"
    );
    assert_eq!(
        err("backtrace=0"),
        bad("backtrace", ", value must be >= 1: 0")
    );
    assert_eq!(
        err("backtrace=-0"),
        bad("backtrace", ", value must be >= 1: 0")
    );
    assert_eq!(
        err("backtrace=+0"),
        bad("backtrace", ", value must be >= 1: 0")
    );
    assert_eq!(ok("backtrace=+12").backtrace_frames, 12);
    assert_eq!(ok("backtrace=0012").backtrace_frames, 12);
    assert_eq!(
        ok("free_track_backtrace_num_frames=-0").free_track_backtrace_num_frames,
        0
    );
    assert_eq!(
        err("backtrace=-5abc"),
        bad("backtrace", ", non space found after option: abc")
    );
    assert_eq!(
        err("backtrace=0x10"),
        bad("backtrace", ", non space found after option: x10")
    );
    assert_eq!(
        err("backtrace=1.5"),
        bad("backtrace", ", non space found after option: .5")
    );
    assert_eq!(
        err("backtrace=99999999999999999999"),
        bad("backtrace", ": Math result not representable")
    );
    assert_eq!(
        err("backtrace=-99999999999999999999"),
        bad("backtrace", ": Math result not representable")
    );
    assert_eq!(err("backtrace_size"), bad("backtrace_size", ""));
    assert_eq!(err("bt_sz="), bad("bt_sz", ""));
    assert_eq!(err("bt_min_sz"), bad("bt_min_sz", ""));
}

#[cfg(target_pointer_width = "64")]
#[test]
fn long_limits_lp64() {
    assert_eq!(
        err("bt=9223372036854775807"),
        bad("bt", ", value must be <= 256: 9223372036854775807")
    );
    assert_eq!(
        err("bt=9223372036854775808"),
        bad("bt", ": Math result not representable")
    );
    assert_eq!(
        err("bt=-9223372036854775808"),
        bad("bt", ", value cannot be negative: -9223372036854775808")
    );
    assert_eq!(
        err("bt=-9223372036854775809"),
        bad("bt", ": Math result not representable")
    );
    assert_eq!(
        ok("fill=9223372036854775807").fill_on_alloc_bytes,
        9223372036854775807
    );
    // Above i32: fine on LP64.
    assert_eq!(ok("bt_sz=4294967296").backtrace_min_size_bytes, 4294967296);
}

#[cfg(target_pointer_width = "32")]
#[test]
fn long_limits_ilp32() {
    assert_eq!(
        err("bt=2147483647"),
        bad("bt", ", value must be <= 256: 2147483647")
    );
    assert_eq!(
        err("bt=2147483648"),
        bad("bt", ": Math result not representable")
    );
    assert_eq!(
        err("bt=-2147483648"),
        bad("bt", ", value cannot be negative: -2147483648")
    );
    assert_eq!(
        err("bt=-2147483649"),
        bad("bt", ": Math result not representable")
    );
    assert_eq!(
        err("bt_sz=4294967296"),
        bad("bt_sz", ": Math result not representable")
    );
}

// ---------------------------------------------------------------------------------------------
// Option table and interactions (docs/spec/options.md#option-table,
// docs/spec/options.md#interactions).

#[test]
fn initial_values() {
    let c = Config::INITIAL;
    assert_eq!(c, Config::default());
    assert_eq!(c.options, 0);
    assert_eq!(
        (c.backtrace_min_size_bytes, c.backtrace_max_size_bytes),
        (0, usize::MAX)
    );
    assert_eq!(c.backtrace_dump_prefix, b"/data/local/tmp/backtrace_heap");
    assert_eq!(c.record_allocs_file, b"");
    assert_eq!(
        (
            c.backtrace_signal,
            c.record_allocs_signal,
            c.backtrace_dump_signal
        ),
        (45, 46, 47)
    );
    assert_eq!(
        (c.check_unreachable_signal, c.log_allocator_stats_signal),
        (48, 49)
    );
    assert_eq!(
        (
            c.fill_on_free_bytes,
            c.free_track_backtrace_num_frames,
            c.backtrace_frames
        ),
        (0, 0, 0)
    );
}

#[test]
fn constants() {
    assert_eq!(
        (
            FILL_ALLOC_BYTE,
            FILL_FREE_BYTE,
            FRONT_GUARD_BYTE,
            REAR_GUARD_BYTE
        ),
        (0xeb, 0xef, 0xaa, 0xbb)
    );
    assert_eq!(
        MIN_ALIGN,
        if cfg!(target_pointer_width = "64") {
            16
        } else {
            8
        }
    );
    let all = [
        FRONT_GUARD,
        REAR_GUARD,
        BACKTRACE,
        FILL_ON_ALLOC,
        FILL_ON_FREE,
        EXPAND_ALLOC,
        FREE_TRACK,
        TRACK_ALLOCS,
        LEAK_TRACK,
        RECORD_ALLOCS,
        BACKTRACE_FULL,
        ABORT_ON_ERROR,
        VERBOSE,
        CHECK_UNREACHABLE_ON_SIGNAL,
        BACKTRACE_SPECIFIC_SIZES,
        LOG_ALLOCATOR_STATS_ON_SIGNAL,
        LOG_ALLOCATOR_STATS_ON_EXIT,
    ];
    for (i, bit) in all.iter().enumerate() {
        assert_eq!(*bit, 1 << i);
    }
}

#[test]
fn guard_rounding() {
    #[cfg(target_pointer_width = "64")]
    {
        assert_eq!(ok("front_guard=39").front_guard_bytes, 48);
        assert_eq!(ok("guard=39").front_guard_bytes, 48);
    }
    #[cfg(target_pointer_width = "32")]
    {
        assert_eq!(ok("front_guard=39").front_guard_bytes, 40);
        assert_eq!(ok("guard=39").front_guard_bytes, 40);
    }
    assert_eq!(ok("front_guard=41").front_guard_bytes, 48);
    assert_eq!(ok("front_guard=1").front_guard_bytes, MIN_ALIGN);
    assert_eq!(ok("front_guard=16384").front_guard_bytes, 16384);
    assert_eq!(ok("rear_guard=39").rear_guard_bytes, 39);
    let c = ok("guard=39");
    assert_eq!(c.rear_guard_bytes, 39);
    let c = ok("guard");
    assert_eq!((c.front_guard_bytes, c.rear_guard_bytes), (32, 32));
}

#[test]
fn guard_fields_last_write_wins() {
    let c = ok("guard=20 front_guard=50");
    assert_eq!((c.front_guard_bytes, c.rear_guard_bytes), (front(50), 20));
    let c = ok("guard=20 rear_guard=50");
    assert_eq!((c.front_guard_bytes, c.rear_guard_bytes), (front(20), 50));
    let c = ok("front_guard=50 guard=20");
    assert_eq!((c.front_guard_bytes, c.rear_guard_bytes), (front(20), 20));
    assert_eq!(c.options, FRONT_GUARD | REAR_GUARD | TRACK_ALLOCS);
    let c = ok("front_guard rear_guard=3");
    assert_eq!((c.front_guard_bytes, c.rear_guard_bytes), (32, 3));
    assert_eq!(c.options, FRONT_GUARD | REAR_GUARD | TRACK_ALLOCS);
}

#[test]
fn backtrace_options_share_frames() {
    let c = ok("backtrace=10 backtrace_enable_on_signal");
    assert_eq!(c.backtrace_frames, 16);
    assert!(c.backtrace_enabled && c.backtrace_enable_on_signal);
    let c = ok("bt_en_on_sig=100 bt=10");
    assert_eq!(c.backtrace_frames, 10);
    assert!(c.backtrace_enabled && c.backtrace_enable_on_signal);
    assert_eq!(c.options, BACKTRACE | TRACK_ALLOCS);
    assert_eq!(ok("backtrace=10 backtrace=20").backtrace_frames, 20);
}

#[test]
fn backtrace_sizes_last_write_wins() {
    let sizes = |s: &str| {
        let c = ok(s);
        (c.backtrace_min_size_bytes, c.backtrace_max_size_bytes)
    };
    assert_eq!(sizes("backtrace_size=100"), (100, 100));
    assert_eq!(sizes("bt_sz=100 bt_min_sz=10"), (10, 100));
    assert_eq!(sizes("bt_sz=100 bt_max_sz=1000"), (100, 1000));
    assert_eq!(sizes("bt_min_sz=10 bt_max_sz=1000 bt_sz=100"), (100, 100));
    assert_eq!(sizes("bt_min_sz=10 bt_max_sz=1000"), (10, 1000));
    // No cross-check between min and max.
    assert_eq!(sizes("bt_min_sz=1000 bt_max_sz=10"), (1000, 10));
    assert_eq!(ok("bt_min_sz=5").options, BACKTRACE_SPECIFIC_SIZES);
}

#[test]
fn fill_overrides() {
    let fills = |s: &str| {
        let c = ok(s);
        (c.fill_on_alloc_bytes, c.fill_on_free_bytes, c.options)
    };
    assert_eq!(
        fills("fill"),
        (usize::MAX, usize::MAX, FILL_ON_ALLOC | FILL_ON_FREE)
    );
    assert_eq!(
        fills("fill=64 fill_on_alloc=8"),
        (8, 64, FILL_ON_ALLOC | FILL_ON_FREE)
    );
    assert_eq!(
        fills("fill=64 fill_on_free=8"),
        (64, 8, FILL_ON_ALLOC | FILL_ON_FREE)
    );
    assert_eq!(
        fills("fill_on_free=8 fill=64"),
        (64, 64, FILL_ON_ALLOC | FILL_ON_FREE)
    );
    assert_eq!(fills("fill_on_alloc"), (usize::MAX, 0, FILL_ON_ALLOC));
    assert_eq!(fills("fill_on_free=20"), (0, 20, FILL_ON_FREE));
}

#[test]
fn free_track_side_effects_depend_on_order() {
    let c = ok("free_track");
    assert_eq!(
        (
            c.free_track_allocations,
            c.fill_on_free_bytes,
            c.free_track_backtrace_num_frames
        ),
        (100, usize::MAX, 16)
    );
    assert_eq!(c.options, FREE_TRACK | FILL_ON_FREE | TRACK_ALLOCS);
    assert_eq!(ok("free_track fill_on_free=60").fill_on_free_bytes, 60);
    assert_eq!(ok("fill_on_free=32 free_track=1234").fill_on_free_bytes, 32);
    assert_eq!(ok("fill=32 free_track").fill_on_free_bytes, 32);
    assert_eq!(ok("free_track=1234").free_track_allocations, 1234);
    assert_eq!(
        ok("free_track free_track_backtrace_num_frames=0").free_track_backtrace_num_frames,
        0
    );
    assert_eq!(
        ok("free_track_backtrace_num_frames=0 free_track").free_track_backtrace_num_frames,
        16
    );
    assert_eq!(
        ok("free_track_backtrace_num_frames=4 free_track").free_track_backtrace_num_frames,
        4
    );
    assert_eq!(
        ok("free_track free_track_backtrace_num_frames=4").free_track_backtrace_num_frames,
        4
    );
    assert_eq!(
        ok("free_track free_track_backtrace_num_frames").free_track_backtrace_num_frames,
        16
    );
    let c = ok("free_track_backtrace_num_frames=20");
    assert_eq!((c.free_track_backtrace_num_frames, c.options), (20, 0));
    // A second free_track does not reset what was set in between.
    let c = ok("free_track fill_on_free=60 free_track_backtrace_num_frames=0 free_track=5");
    assert_eq!(
        (
            c.free_track_allocations,
            c.fill_on_free_bytes,
            c.free_track_backtrace_num_frames
        ),
        (5, 60, 16)
    );
}

#[test]
fn record_allocs_file_ordering() {
    let c = ok("record_allocs");
    assert_eq!(
        (c.record_allocs_num_entries, c.record_allocs_file),
        (8_000_000, &b"/data/local/tmp/record_allocs.txt"[..])
    );
    assert_eq!(c.options, RECORD_ALLOCS);
    assert_eq!(
        ok("record_allocs_file=/x record_allocs").record_allocs_file,
        b"/x"
    );
    assert_eq!(
        ok("record_allocs record_allocs_file=/x").record_allocs_file,
        b"/x"
    );
    assert_eq!(
        ok("record_allocs_file=/x record_allocs record_allocs").record_allocs_file,
        b"/x"
    );
    assert_eq!(ok("record_allocs_file=/x").record_allocs_file, b"/x");
    assert_eq!(
        ok("record_allocs_file=/x record_allocs_file").record_allocs_file,
        b"/data/local/tmp/record_allocs.txt"
    );
    assert_eq!(ok("record_allocs_file").options, 0);
    assert!(ok("record_allocs=1 record_allocs_on_exit").record_allocs_on_exit);
}

#[test]
fn dump_prefix_restored_by_empty_value() {
    assert_eq!(
        ok("bt_dmp_pre=/sdcard/x").backtrace_dump_prefix,
        b"/sdcard/x"
    );
    assert_eq!(
        ok("bt_dmp_pre=/sdcard/x backtrace_dump_prefix=").backtrace_dump_prefix,
        b"/data/local/tmp/backtrace_heap"
    );
    assert_eq!(
        ok("bt_dmp_pre=/a bt_dmp_pre=/b").backtrace_dump_prefix,
        b"/b"
    );
}

#[test]
fn duplicates_apply_in_order() {
    assert_eq!(ok("expand_alloc=5 expand_alloc=7").expand_alloc_bytes, 7);
    assert_eq!(ok("expand_alloc=5 expand_alloc").expand_alloc_bytes, 16);
    assert_eq!(ok("verbose verbose").options, VERBOSE);
    assert_eq!(
        err("expand_alloc=5 expand_alloc=0"),
        bad("expand_alloc", ", value must be >= 1: 0")
    );
}

#[test]
fn tracking_and_header_bits() {
    for options in [
        "guard",
        "front_guard",
        "rear_guard",
        "bt",
        "backtrace",
        "backtrace_enable_on_signal",
        "bt_en_on_sig",
        "free_track",
        "leak_track",
        "verify_pointers",
    ] {
        assert!(ok(options).has(TRACK_ALLOCS), "{options}");
    }
    for options in [
        "backtrace_full",
        "bt_sz=1",
        "fill",
        "expand_alloc",
        "record_allocs",
        "verbose",
        "abort_on_error",
        "bt_dmp_on_ex",
    ] {
        assert!(!ok(options).has(TRACK_ALLOCS), "{options}");
    }
    let c = ok("backtrace_full");
    assert_eq!(c.options, BACKTRACE_FULL);
    assert!(c.has(BACKTRACE_FULL) && !c.has(BACKTRACE));
}

#[test]
fn everything_at_once() {
    let options = "guard=64 backtrace=32 backtrace_enable_on_signal=64 backtrace_dump_on_exit \
                   backtrace_dump_prefix=/p backtrace_full backtrace_size=10 backtrace_min_size=5 \
                   backtrace_max_size=20 fill=30 fill_on_alloc=31 fill_on_free=32 expand_alloc=8 \
                   free_track=50 free_track_backtrace_num_frames=8 leak_track record_allocs=1000 \
                   record_allocs_file=/r record_allocs_on_exit verify_pointers abort_on_error verbose \
                   check_unreachable_on_signal log_allocator_stats_on_signal log_allocator_stats_on_exit";
    let c = ok(options);
    assert_eq!(c.options, 0x1ffff);
    let expected = Config {
        options: 0x1ffff,
        front_guard_bytes: 64,
        rear_guard_bytes: 64,
        backtrace_frames: 64,
        backtrace_enabled: true,
        backtrace_enable_on_signal: true,
        backtrace_dump_on_exit: true,
        backtrace_dump_prefix: b"/p",
        backtrace_min_size_bytes: 5,
        backtrace_max_size_bytes: 20,
        fill_on_alloc_bytes: 31,
        fill_on_free_bytes: 32,
        expand_alloc_bytes: 8,
        free_track_allocations: 50,
        free_track_backtrace_num_frames: 8,
        record_allocs_num_entries: 1000,
        record_allocs_file: b"/r",
        record_allocs_on_exit: true,
        ..Config::INITIAL
    };
    assert_eq!(c, expected);
}

// ---------------------------------------------------------------------------------------------
// Property test: random option strings never panic and fail with one well-formed message.

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'t, T>(&mut self, items: &'t [T]) -> &'t T {
        &items[self.below(items.len())]
    }
}

const FUZZ_NAMES: &[&str] = &[
    "guard",
    "front_guard",
    "rear_guard",
    "backtrace",
    "bt",
    "backtrace_enable_on_signal",
    "bt_en_on_sig",
    "backtrace_dump_on_exit",
    "bt_dmp_on_ex",
    "backtrace_dump_prefix",
    "bt_dmp_pre",
    "backtrace_full",
    "bt_full",
    "backtrace_size",
    "bt_sz",
    "backtrace_min_size",
    "bt_min_sz",
    "backtrace_max_size",
    "bt_max_sz",
    "fill",
    "fill_on_alloc",
    "fill_on_free",
    "expand_alloc",
    "free_track",
    "free_track_backtrace_num_frames",
    "leak_track",
    "record_allocs",
    "record_allocs_file",
    "record_allocs_on_exit",
    "verify_pointers",
    "abort_on_error",
    "verbose",
    "check_unreachable_on_signal",
    "log_allocator_stats_on_signal",
    "log_allocator_stats_on_exit",
    "",
    "foo",
    "BT",
    "bt_",
];

const FUZZ_SPACES: &[u8] = b" \t\n\x0b\x0c\r";

fn push_number(rng: &mut XorShift, out: &mut Vec<u8>) {
    if rng.below(3) == 0 {
        out.push(*rng.pick(b"+-"));
    }
    let len = match rng.below(4) {
        0 => rng.below(25),
        _ => rng.below(6),
    };
    out.extend((0..len).map(|_| b'0' + rng.below(10) as u8));
}

fn push_garbage(rng: &mut XorShift, out: &mut Vec<u8>) {
    let len = rng.below(8);
    out.extend((0..len).map(|_| 1 + rng.below(255) as u8));
}

fn push_value(rng: &mut XorShift, out: &mut Vec<u8>) {
    match rng.below(6) {
        0 => {}
        1 | 2 => push_number(rng, out),
        3 => out.extend_from_slice(rng.pick(FUZZ_NAMES).as_bytes()),
        4 => {
            push_number(rng, out);
            push_garbage(rng, out);
        }
        _ => push_garbage(rng, out),
    }
}

fn push_spaces(rng: &mut XorShift, out: &mut Vec<u8>, at_least: usize) {
    let n = at_least + rng.below(3);
    out.extend((0..n).map(|_| *rng.pick(FUZZ_SPACES)));
}

fn random_options(rng: &mut XorShift) -> Vec<u8> {
    let mut out = Vec::new();
    for _ in 0..rng.below(6) {
        push_spaces(rng, &mut out, 0);
        match rng.below(10) {
            0 => push_garbage(rng, &mut out),
            _ => out.extend_from_slice(rng.pick(FUZZ_NAMES).as_bytes()),
        }
        if rng.below(3) != 0 {
            push_spaces(rng, &mut out, 0);
            out.push(b'=');
            push_spaces(rng, &mut out, 0);
            push_value(rng, &mut out);
        }
        push_spaces(rng, &mut out, 1);
    }
    out
}

fn check_invariants(config: &Config<'_>) {
    assert_eq!(config.options & !0x1ffff, 0);
    assert_eq!(config.front_guard_bytes % MIN_ALIGN, 0);
    assert!(config.front_guard_bytes <= 16384 && config.rear_guard_bytes <= 16384);
    assert!(config.backtrace_frames <= 256 && config.free_track_backtrace_num_frames <= 256);
    assert!(config.expand_alloc_bytes <= 16384 && config.free_track_allocations <= 16384);
    assert!(config.record_allocs_num_entries <= 50_000_000);
    assert_eq!(config.has(FRONT_GUARD), config.front_guard_bytes != 0);
    assert_eq!(config.has(REAR_GUARD), config.rear_guard_bytes != 0);
    assert_eq!(config.has(FREE_TRACK), config.free_track_allocations != 0);
    assert_eq!(
        config.has(RECORD_ALLOCS),
        config.record_allocs_num_entries != 0
    );
    assert!(!config.has(RECORD_ALLOCS) || !config.record_allocs_file.is_empty());
    assert!(!config.backtrace_dump_prefix.is_empty());
}

#[test]
fn fuzz_random_option_strings() {
    let iterations = std::env::var("MALLOC_DEBUG_FUZZ_ITERATIONS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(20_000);
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    let (mut oks, mut errs) = (0usize, 0usize);
    for _ in 0..iterations {
        let options = random_options(&mut rng);
        match Config::parse(&options) {
            Ok(config) => {
                oks += 1;
                check_invariants(&config);
            }
            Err(e) => {
                errs += 1;
                let text = message(&e);
                assert!(text.starts_with("malloc_testing: "), "{options:?}: {text}");
                assert!(!text.contains('\n'), "{options:?}: {text}");
                // The reported name is a piece of the input.
                let name = e.name();
                assert!(
                    name.is_empty() || options.windows(name.len()).any(|w| w == name),
                    "{options:?}"
                );
            }
        }
    }
    if iterations >= 1000 {
        assert!(
            oks > iterations / 20 && errs > iterations / 20,
            "oks={oks} errs={errs}"
        );
    }
}

#[test]
fn leak_unreachable_fills_freed_memory_unless_told_how_much() {
    let c = ok("leak_unreachable");
    assert_eq!(c.fill_on_free_bytes, usize::MAX);
    // A size given before or after is kept, as free_track does.
    assert_eq!(
        ok("fill_on_free=64 leak_unreachable").fill_on_free_bytes,
        64
    );
    assert_eq!(
        ok("leak_unreachable fill_on_free=64").fill_on_free_bytes,
        64
    );
    assert!(!ok("leak_track").has(FILL_ON_FREE));
}
