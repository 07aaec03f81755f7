//! Option errors and their exact ERROR texts (docs/spec/errors.md#option-errors).

use core::fmt::{self, Write};

/// bionic's `strerror(ERANGE)`. The tests expect bionic's wording on every platform (glibc says
/// "Numerical result out of range").
pub const ERANGE_TEXT: &str = "Math result not representable";

/// The first problem found in an option string. `name` is always the option name as typed
/// (an alias stays an alias), borrowed from the option string.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigError<'a> {
    /// The name is not in the option table (it may be empty, e.g. for `=5`).
    UnknownOption { name: &'a [u8] },
    /// A non-empty value was given to an option that takes none.
    ValueNotAllowed { name: &'a [u8] },
    /// `strtol` set errno to ERANGE: the number does not fit in a C `long`.
    OutOfRange { name: &'a [u8] },
    /// No digits (empty value of a required option, `XXX`, `-`, `+`).
    NoDigits { name: &'a [u8] },
    /// Characters after the number; `rest` is what `strtol` left unparsed.
    TrailingCharacters { name: &'a [u8], rest: &'a [u8] },
    /// The number is below zero.
    Negative { name: &'a [u8], value: i64 },
    /// The number is below the option's minimum.
    BelowMin {
        name: &'a [u8],
        min: usize,
        value: i64,
    },
    /// The number is above the option's maximum.
    AboveMax {
        name: &'a [u8],
        max: usize,
        value: i64,
    },
}

impl<'a> ConfigError<'a> {
    /// The option name as typed in the option string.
    pub fn name(&self) -> &'a [u8] {
        match *self {
            ConfigError::UnknownOption { name }
            | ConfigError::ValueNotAllowed { name }
            | ConfigError::OutOfRange { name }
            | ConfigError::NoDigits { name }
            | ConfigError::TrailingCharacters { name, .. }
            | ConfigError::Negative { name, .. }
            | ConfigError::BelowMin { name, .. }
            | ConfigError::AboveMax { name, .. } => name,
        }
    }
}

impl ConfigError<'_> {
    /// Writes the exact ERROR message of the spec (without trailing newline), e.g.
    /// `malloc_testing: bad value for option 'bt', value must be <= 256: 257`.
    pub fn write_message(&self, progname: &[u8], out: &mut dyn Write) -> fmt::Result {
        let prog = Text(progname);
        let name = Text(self.name());
        match *self {
            ConfigError::UnknownOption { .. } => write!(out, "{prog}: unknown option {name}"),
            ConfigError::ValueNotAllowed { .. } => {
                write!(
                    out,
                    "{prog}: value set for option '{name}' which does not take a value"
                )
            }
            ConfigError::OutOfRange { .. } => {
                write!(out, "{prog}: bad value for option '{name}': {ERANGE_TEXT}")
            }
            ConfigError::NoDigits { .. } => write!(out, "{prog}: bad value for option '{name}'"),
            ConfigError::TrailingCharacters { rest, .. } => write!(
                out,
                "{prog}: bad value for option '{name}', non space found after option: {}",
                Text(rest)
            ),
            ConfigError::Negative { value, .. } => {
                write!(
                    out,
                    "{prog}: bad value for option '{name}', value cannot be negative: {value}"
                )
            }
            ConfigError::BelowMin { min, value, .. } => {
                write!(
                    out,
                    "{prog}: bad value for option '{name}', value must be >= {min}: {value}"
                )
            }
            ConfigError::AboveMax { max, value, .. } => {
                write!(
                    out,
                    "{prog}: bad value for option '{name}', value must be <= {max}: {value}"
                )
            }
        }
    }
}

/// Displays bytes as text: valid UTF-8 as is, each invalid sequence as U+FFFD. The option string
/// is arbitrary bytes; this never fails or panics on them.
struct Text<'a>(&'a [u8]);

impl fmt::Display for Text<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for chunk in self.0.utf8_chunks() {
            f.write_str(chunk.valid())?;
            if !chunk.invalid().is_empty() {
                f.write_char(char::REPLACEMENT_CHARACTER)?;
            }
        }
        Ok(())
    }
}
