//! The option-string tokenizer (docs/spec/options.md#tokens).
//!
//! The rules are the reference's, including its oddities: whitespace is allowed on both sides of
//! `=`, so `backtrace= fill` hands `fill` to `backtrace`; a token starting with `=` has an empty
//! name; a value runs to the next whitespace and may itself contain `=`.

/// One `name[=value]` occurrence. Both parts borrow from the option string; an absent value and
/// an empty one (`name=`) are the same thing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Token<'a> {
    pub name: &'a [u8],
    pub value: &'a [u8],
}

/// Iterator over the tokens of an option string (which must not contain NUL).
pub(super) struct Tokens<'a> {
    rest: &'a [u8],
}

impl<'a> Tokens<'a> {
    pub fn new(options: &'a [u8]) -> Self {
        Tokens { rest: options }
    }
}

impl<'a> Iterator for Tokens<'a> {
    type Item = Token<'a>;

    fn next(&mut self) -> Option<Token<'a>> {
        let start = skip_space(self.rest);
        if start.is_empty() {
            self.rest = start;
            return None;
        }
        // `start` begins with a non-space byte, so either the name is non-empty or the next byte
        // is `=` and gets consumed below: every call makes progress.
        let (name, after_name) = split_run(start, |b| !is_space(b) && b != b'=');
        let after_name = skip_space(after_name);
        let (value, rest) = match after_name.split_first() {
            Some((b'=', after_eq)) => split_run(skip_space(after_eq), |b| !is_space(b)),
            // No `=`: the next token starts right here (`a b` is two names).
            _ => (&after_name[..0], after_name),
        };
        self.rest = rest;
        Some(Token { name, value })
    }
}

/// C `isspace` in the "C" locale. Unlike `u8::is_ascii_whitespace` this includes `\v`.
pub(super) fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

fn skip_space(s: &[u8]) -> &[u8] {
    split_run(s, is_space).1
}

/// Splits `s` after its longest prefix whose bytes all satisfy `keep`.
pub(super) fn split_run(s: &[u8], keep: impl Fn(u8) -> bool) -> (&[u8], &[u8]) {
    let end = s.iter().position(|&b| !keep(b)).unwrap_or(s.len());
    // `end <= s.len()` by construction; the fallback only keeps the function panic-free.
    s.split_at_checked(end).unwrap_or((s, &[]))
}
