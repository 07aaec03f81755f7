//! Numeric option values: `strtol(value, &end, 10)` followed by the reference's checks, in its
//! order (docs/spec/options.md#numbers): errno, no digits, trailing characters, negative, below
//! min, above max.

use super::error::ConfigError;
use super::tokens::split_run;
use core::ffi::c_long;

/// Largest magnitude a positive `long` can hold. `long` is what the reference parses into, so
/// overflow (ERANGE) happens at 64 bits on LP64 and at 32 bits on ILP32.
const LONG_MAX: u64 = c_long::MAX as u64;

/// What `strtol` reports. The value is widened to `i64` (it is always within `long`'s range).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Strtol<'a> {
    /// errno = ERANGE: the digits do not fit in a `long`.
    OutOfRange,
    /// `end == value`: no digits after the optional sign.
    NoDigits,
    /// A number, and what `end` points at.
    Parsed { value: i64, rest: &'a [u8] },
}

/// Base-10 `strtol` without the leading-whitespace skip (values never contain whitespace).
fn strtol(text: &[u8]) -> Strtol<'_> {
    let (negative, unsigned) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, text),
    };
    let (digits, rest) = split_run(unsigned, |b| b.is_ascii_digit());
    if digits.is_empty() {
        return Strtol::NoDigits;
    }
    // LONG_MIN's magnitude is one more than LONG_MAX's.
    let limit = if negative { LONG_MAX + 1 } else { LONG_MAX };
    let Some(magnitude) = accumulate(digits, limit) else {
        return Strtol::OutOfRange;
    };
    let value = if negative {
        0i64.checked_sub_unsigned(magnitude)
    } else {
        i64::try_from(magnitude).ok()
    };
    match value {
        Some(value) => Strtol::Parsed { value, rest },
        None => Strtol::OutOfRange,
    }
}

/// The decimal value of `digits` (all ASCII digits), or `None` once it exceeds `limit`.
fn accumulate(digits: &[u8], limit: u64) -> Option<u64> {
    digits.iter().try_fold(0u64, |acc, &d| {
        let next = acc
            .checked_mul(10)?
            .checked_add(u64::from(d.wrapping_sub(b'0')))?;
        (next <= limit).then_some(next)
    })
}

/// Parses the value of numeric option `name` (as typed, for the messages) and checks it
/// against `min..=max`. `usize::MAX` as `max` is effectively unbounded: a `long` never exceeds it.
pub(super) fn parse_size<'a>(
    name: &'a [u8],
    text: &'a [u8],
    min: usize,
    max: usize,
) -> Result<usize, ConfigError<'a>> {
    let (value, rest) = match strtol(text) {
        Strtol::OutOfRange => return Err(ConfigError::OutOfRange { name }),
        Strtol::NoDigits => return Err(ConfigError::NoDigits { name }),
        Strtol::Parsed { value, rest } => (value, rest),
    };
    if !rest.is_empty() {
        return Err(ConfigError::TrailingCharacters { name, rest });
    }
    // A non-negative `long` always fits in `size_t`, so this fails exactly for negatives.
    let Ok(size) = usize::try_from(value) else {
        return Err(ConfigError::Negative { name, value });
    };
    if size < min {
        return Err(ConfigError::BelowMin { name, min, value });
    }
    if size > max {
        return Err(ConfigError::AboveMax { name, max, value });
    }
    Ok(size)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(value: i64, rest: &[u8]) -> Strtol<'_> {
        Strtol::Parsed { value, rest }
    }

    #[test]
    fn strtol_signs_digits_and_rest() {
        assert_eq!(strtol(b"10"), parsed(10, b""));
        assert_eq!(strtol(b"+10"), parsed(10, b""));
        assert_eq!(strtol(b"-10"), parsed(-10, b""));
        assert_eq!(strtol(b"-0"), parsed(0, b""));
        assert_eq!(strtol(b"007"), parsed(7, b""));
        assert_eq!(strtol(b"0x10"), parsed(0, b"x10"));
        assert_eq!(strtol(b"-5abc"), parsed(-5, b"abc"));
        assert_eq!(strtol(b"10front_guard"), parsed(10, b"front_guard"));
        assert_eq!(strtol(b"1=2"), parsed(1, b"=2"));
    }

    #[test]
    fn strtol_no_digits() {
        for text in [
            &b""[..],
            b"-",
            b"+",
            b"+-1",
            b"-+1",
            b"--1",
            b"XXX",
            b"x1",
            b"=5",
        ] {
            assert_eq!(strtol(text), Strtol::NoDigits, "{text:?}");
        }
    }

    #[cfg(target_pointer_width = "64")]
    #[test]
    fn strtol_range_lp64() {
        assert_eq!(strtol(b"9223372036854775807"), parsed(i64::MAX, b""));
        assert_eq!(strtol(b"-9223372036854775808"), parsed(i64::MIN, b""));
        assert_eq!(strtol(b"9223372036854775808"), Strtol::OutOfRange);
        assert_eq!(strtol(b"-9223372036854775809"), Strtol::OutOfRange);
        assert_eq!(strtol(b"99999999999999999999"), Strtol::OutOfRange);
        assert_eq!(strtol(b"99999999999999999999abc"), Strtol::OutOfRange);
        assert_eq!(strtol(b"00000000000000000000000001"), parsed(1, b""));
    }

    #[cfg(target_pointer_width = "32")]
    #[test]
    fn strtol_range_ilp32() {
        assert_eq!(strtol(b"2147483647"), parsed(2147483647, b""));
        assert_eq!(strtol(b"-2147483648"), parsed(-2147483648, b""));
        assert_eq!(strtol(b"2147483648"), Strtol::OutOfRange);
        assert_eq!(strtol(b"-2147483649"), Strtol::OutOfRange);
        assert_eq!(strtol(b"99999999999999999999"), Strtol::OutOfRange);
    }

    #[test]
    fn check_order() {
        let n = b"n".as_slice();
        // errno beats trailing characters; trailing characters beat the sign.
        assert_eq!(
            parse_size(n, b"99999999999999999999x", 1, 5),
            Err(ConfigError::OutOfRange { name: n })
        );
        assert_eq!(
            parse_size(n, b"-5abc", 1, 5),
            Err(ConfigError::TrailingCharacters {
                name: n,
                rest: b"abc"
            })
        );
        assert_eq!(
            parse_size(n, b"-5", 1, 5),
            Err(ConfigError::Negative { name: n, value: -5 })
        );
        assert_eq!(
            parse_size(n, b"-0", 1, 5),
            Err(ConfigError::BelowMin {
                name: n,
                min: 1,
                value: 0
            })
        );
        assert_eq!(
            parse_size(n, b"6", 1, 5),
            Err(ConfigError::AboveMax {
                name: n,
                max: 5,
                value: 6
            })
        );
        assert_eq!(
            parse_size(n, b"", 1, 5),
            Err(ConfigError::NoDigits { name: n })
        );
        assert_eq!(parse_size(n, b"+5", 1, 5), Ok(5));
        assert_eq!(parse_size(n, b"-0", 0, 5), Ok(0));
    }
}
