//! The sorted address index of one ELF symbol table: which symbol contains an address, picked
//! the way the table's reader picks it (libunwindstack for `.symtab`, the C library's `dladdr`
//! for `.dynsym`).
//!
//! The model: an index is built once per module per report and then answers a few hundred
//! lookups, so building it is most of its cost. A large binary makes that visible: node's two
//! tables hold 185,000 symbols and the exit leak report indexed them at every exit. The build
//! therefore touches as little memory as it can (docs/performance.md, "Leak reports, 2026-11-26
//! fourth session"):
//!
//! 1. one pass over the table writes an 8-byte key per accepted symbol (start address above,
//!    the symbol's position below) into pages mapped populated at their final size;
//! 2. a stable LSD radix sort orders the keys by start address; the positions were written in
//!    increasing order, so equal starts stay in table order, which is the tie-break both readers
//!    use;
//! 3. one pass over the sorted keys reads each symbol again from the table and writes the
//!    final entry, with the running maximum of the ends that bounds a lookup's backward walk.
//!
//! Nothing is copied twice and no array grows by doubling. A table whose addresses or size do
//! not fit the packed key (start at 2^40 or more, 2^24 symbols or more) is sorted by comparison
//! instead, with the same result.

use super::store::PageVec;

/// A symbol's address range. `order` is its position in its table (ties are broken the way the
/// table's reader breaks them); `max_end` is the largest `end` of this entry and every entry
/// before it, which bounds the backward walk of a lookup.
#[derive(Clone, Copy, Default)]
struct Entry {
    start: u64,
    end: u64,
    max_end: u64,
    order: u32,
    /// Offset of the name in the string table; `u32::MAX` when it is out of bounds.
    name: u32,
}

/// Which symbol wins when several contain the address.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Pick {
    /// The first in table order (libunwindstack's `.symtab`; bionic's `dladdr`).
    First,
    /// The one starting last, then the first in table order (glibc's `dladdr`).
    #[cfg_attr(target_os = "android", allow(dead_code))]
    Closest,
}

/// What [`SymbolIndex::build`] needs of one table.
pub struct Table<'a, R> {
    /// The raw symbols, `entry_size` bytes each.
    pub symbols: &'a [u8],
    pub entry_size: usize,
    /// Length of the table's string table (a name offset at or past it is out of bounds).
    pub strtab_len: usize,
    /// The table position of `symbols`' first entry (a `.dynsym` search may skip a prefix).
    pub first_order: usize,
    /// The [start, end) range of a symbol the reader would consider, and its name offset.
    pub range: R,
}

pub struct SymbolIndex {
    entries: PageVec<Entry>,
    pick: Pick,
}

const POSITION_BITS: u32 = 24;
const POSITION_MASK: u64 = (1 << POSITION_BITS) - 1;
const DIGIT_BITS: u32 = 11;

impl SymbolIndex {
    /// Indexes the symbols `table.range` accepts (`Some((start, end, name_offset))` with
    /// `end > start`). `None` when memory runs out.
    pub fn build<R>(table: Table<'_, R>, pick: Pick) -> Option<SymbolIndex>
    where
        R: Fn(&[u8]) -> Option<(u64, u64, u32)>,
    {
        let count = table.symbols.len() / table.entry_size.max(1);
        let accepted = |i: usize| {
            let sym = table
                .symbols
                .get(i * table.entry_size..(i + 1) * table.entry_size)?;
            let (start, end, name) = (table.range)(sym)?;
            let name = if (name as usize) < table.strtab_len {
                name
            } else {
                u32::MAX
            };
            (end > start).then_some((start, end, name))
        };
        let entry = |i: usize, (start, end, name): (u64, u64, u32)| Entry {
            start,
            end,
            max_end: 0,
            order: (table.first_order + i) as u32,
            name,
        };
        let mut entries = match by_packed_keys(count, &accepted, &entry)? {
            Some(entries) => entries,
            None => by_comparison(count, &accepted, &entry)?,
        };
        let mut max_end = 0;
        for e in entries.as_mut_slice() {
            max_end = max_end.max(e.end);
            e.max_end = max_end;
        }
        Some(SymbolIndex { entries, pick })
    }

    /// The symbol containing `vaddr`, among those whose name offset `skip` does not reject:
    /// its name offset (`u32::MAX` when out of bounds) and `vaddr` − its start. (A reader that
    /// ignores some names asks here, for the few candidates of one lookup, rather than the
    /// build reading the name of every symbol: that read was a third of indexing node.)
    pub fn find(&self, vaddr: u64, skip: impl Fn(u32) -> bool) -> Option<(u32, u64)> {
        let v = self.entries.as_slice();
        let mut best: Option<&Entry> = None;
        let mut j = v.partition_point(|e| e.start <= vaddr);
        while j > 0 && v[j - 1].max_end > vaddr {
            j -= 1;
            let e = &v[j];
            if e.end <= vaddr || skip(e.name) {
                continue;
            }
            let better = match best {
                None => true,
                Some(b) => match self.pick {
                    Pick::First => e.order < b.order,
                    Pick::Closest => e.start == b.start && e.order < b.order,
                },
            };
            if better {
                best = Some(e);
            }
            if self.pick == Pick::Closest && best.is_some_and(|b| b.start > e.start) {
                break;
            }
        }
        best.map(|e| (e.name, vaddr - e.start))
    }
}

/// Entries sorted through packed keys (the module doc's three passes); `Some(None)` when the
/// table does not fit them (2^24 symbols or more, a start at 2^40 or more), `None` when memory
/// runs out.
fn by_packed_keys(
    count: usize,
    accepted: &impl Fn(usize) -> Option<(u64, u64, u32)>,
    entry: &impl Fn(usize, (u64, u64, u32)) -> Entry,
) -> Option<Option<PageVec<Entry>>> {
    if count >= 1 << POSITION_BITS {
        return Some(None);
    }
    let mut keys = PageVec::<u64>::with_capacity_filled(count)?;
    for i in 0..count {
        if let Some((start, _, _)) = accepted(i) {
            if start >> (64 - POSITION_BITS) != 0 {
                return Some(None);
            }
            keys.push(start << POSITION_BITS | i as u64)?;
        }
    }
    radix_sort_above(&mut keys, POSITION_BITS)?;
    let mut entries = PageVec::<Entry>::with_capacity_filled(keys.len())?;
    for &k in keys.as_slice() {
        let i = (k & POSITION_MASK) as usize;
        entries.push(entry(i, accepted(i)?))?;
    }
    Some(Some(entries))
}

/// The fallback for tables the packed keys cannot describe: entries sorted by (start, order).
fn by_comparison(
    count: usize,
    accepted: &impl Fn(usize) -> Option<(u64, u64, u32)>,
    entry: &impl Fn(usize, (u64, u64, u32)) -> Entry,
) -> Option<PageVec<Entry>> {
    let mut entries = PageVec::<Entry>::with_capacity_filled(count)?;
    for i in 0..count {
        if let Some(r) = accepted(i) {
            entries.push(entry(i, r))?;
        }
    }
    entries
        .as_mut_slice()
        .sort_unstable_by_key(|e| (e.start, e.order));
    Some(entries)
}

/// Sorts `keys` stably by their bits from `low` up (least significant digit first), leaving
/// keys equal there in their present order. Digits of 11 bits, as many as the largest key
/// needs: a module's code spans a few MiB, so two or three passes.
fn radix_sort_above(keys: &mut PageVec<u64>, low: u32) -> Option<()> {
    let top = keys.as_slice().iter().fold(0, |a, &k| a | k >> low);
    let bits = 64 - top.leading_zeros();
    if bits == 0 || keys.len() < 2 {
        return Some(());
    }
    let mut other = PageVec::<u64>::zeroed_filled(keys.len())?;
    let (mut from, mut to) = (keys.as_mut_slice(), other.as_mut_slice());
    let mut shift = low;
    let mut passes = 0;
    while shift < low + bits {
        let mut counts = [0usize; 1 << DIGIT_BITS];
        let digit = |k: u64| ((k >> shift) & ((1 << DIGIT_BITS) - 1)) as usize;
        for &k in from.iter() {
            counts[digit(k)] += 1;
        }
        let mut at = 0;
        for c in counts.iter_mut() {
            let n = *c;
            *c = at;
            at += n;
        }
        for &k in from.iter() {
            let d = digit(k);
            to[counts[d]] = k;
            counts[d] += 1;
        }
        core::mem::swap(&mut from, &mut to);
        shift += DIGIT_BITS;
        passes += 1;
    }
    if passes % 2 == 1 {
        // The sorted keys are in `other`.
        keys.as_mut_slice().copy_from_slice(other.as_slice());
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys_of(v: &[u64]) -> PageVec<u64> {
        let mut k = PageVec::new();
        for &x in v {
            k.push(x).unwrap();
        }
        k
    }

    /// The radix sort agrees with a comparison sort on keys spread over one to four digits,
    /// and keeps the low bits of equal keys in their order.
    #[test]
    fn radix_sort_orders_like_a_comparison_sort() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for span in [1u64 << 5, 1 << 11, 1 << 20, 1 << 33, 1 << 39] {
            let mut v = Vec::new();
            for i in 0..5000u64 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                v.push((x % span) << POSITION_BITS | i);
            }
            let mut keys = keys_of(&v);
            radix_sort_above(&mut keys, POSITION_BITS).unwrap();
            v.sort_unstable();
            assert_eq!(keys.as_slice(), &v[..], "span {span:#x}");
        }
        let mut empty = keys_of(&[]);
        radix_sort_above(&mut empty, POSITION_BITS).unwrap();
        let mut zeros = keys_of(&[3, 1, 2]);
        radix_sort_above(&mut zeros, POSITION_BITS).unwrap();
        assert_eq!(zeros.as_slice(), &[3, 1, 2], "no address bits: order kept");
    }

    /// A table of 16-byte symbols: start, size (u32 each), then name offset.
    fn table(symbols: &[(u32, u32, u32)]) -> Vec<u8> {
        let mut t = Vec::new();
        for &(start, size, name) in symbols {
            t.extend_from_slice(&start.to_le_bytes());
            t.extend_from_slice(&size.to_le_bytes());
            t.extend_from_slice(&name.to_le_bytes());
            t.extend_from_slice(&0u32.to_le_bytes());
        }
        t
    }

    fn index(symbols: &[(u32, u32, u32)], pick: Pick, start_shift: u32) -> SymbolIndex {
        let bytes = table(symbols);
        let word = |s: &[u8], at: usize| u32::from_le_bytes(s[at..at + 4].try_into().unwrap());
        SymbolIndex::build(
            Table {
                symbols: &bytes,
                entry_size: 16,
                strtab_len: 100,
                first_order: 0,
                range: |s: &[u8]| {
                    let start = (word(s, 0) as u64) << start_shift;
                    let end = (word(s, 0) as u64 + word(s, 4) as u64) << start_shift;
                    Some((start, end, word(s, 8)))
                },
            },
            pick,
        )
        .unwrap()
    }

    /// Overlapping and nested symbols: `First` takes the earliest in table order, `Closest` the
    /// one starting last; empty ranges never match; names out of bounds are marked. The same
    /// answers with addresses too high for the packed keys (the comparison fallback).
    #[test]
    fn lookups_pick_as_the_readers_do() {
        let syms = [
            (0x100, 0x100, 1), // [0x100, 0x200)
            (0x180, 0x10, 2),  // nested, later in the table
            (0x180, 0x10, 3),  // same start, later still
            (0x300, 0, 4),     // empty: never a match
            (0x050, 0x400, 5), // spans everything, last in the table
            (0x500, 0x10, 200),
        ];
        // (pick, address, name skipped (0: none), expected (name, symbol start)).
        let cases = [
            (Pick::First, 0x185, 0, Some((1, 0x100))),
            (Pick::First, 0x300, 0, Some((5, 0x50))),
            (Pick::First, 0x500, 0, Some((u32::MAX, 0x500))),
            (Pick::First, 0x10, 0, None),
            (Pick::Closest, 0x185, 0, Some((2, 0x180))),
            (Pick::Closest, 0x1f0, 0, Some((1, 0x100))),
            (Pick::Closest, 0x460, 0, None),
            // A skipped name gives way to the next candidate in the reader's order.
            (Pick::First, 0x185, 1, Some((2, 0x180))),
            (Pick::Closest, 0x185, 2, Some((3, 0x180))),
        ];
        for shift in [0, 40] {
            let at = |v: u64| v << shift;
            for (pick, addr, skipped, want) in cases {
                let got = index(&syms, pick, shift).find(at(addr), |n| n == skipped);
                let want = want.map(|(name, start)| (name, at(addr) - at(start)));
                assert_eq!(got, want, "{pick:?} {addr:#x} shift {shift}");
            }
            let first = index(&syms, Pick::First, shift);
            assert_eq!(
                first.find(at(0x185), |n| n != 5),
                Some((5, at(0x185) - at(0x50))),
                "every name but the outermost skipped"
            );
        }
    }
}
