//! Inputs for the parsers: valid files mutated the way files get damaged or crafted,
//! and bytes drawn from a parser's alphabet.

use proptest::prelude::*;

/// A position in a byte string, as a fraction of its length at the time (`u32::MAX`:
/// the end); shrinks towards the start.
#[derive(Debug, Clone, Copy)]
pub struct Pos(pub u32);

impl Pos {
    /// One of `0..n` (`n` > 0).
    fn of(self, n: usize) -> usize {
        ((u64::from(self.0) * n as u64) >> 32) as usize
    }
}

fn pos() -> impl Strategy<Value = Pos> {
    any::<u32>().prop_map(Pos)
}

/// One change to a byte string.
#[derive(Debug, Clone)]
pub enum Edit {
    /// Flip bit `1 << (b % 8)` of a byte.
    Flip(Pos, u8),
    /// Overwrite a byte.
    Set(Pos, u8),
    /// Insert bytes.
    Insert(Pos, Vec<u8>),
    /// Insert one of the parser's tokens (delimiters, keywords, extreme numbers).
    Token(Pos, Pos),
    /// Remove up to this many bytes.
    Delete(Pos, usize),
    /// Copy a range of up to this many bytes to another place.
    Duplicate(Pos, usize, Pos),
    /// Cut the input here.
    Truncate(Pos),
    /// Insert a byte repeated this many times (long lines, deep nesting).
    Run(Pos, u8, usize),
}

/// Up to 8 edits of one of `seeds`. Tokens come from `tokens` (which must not be empty);
/// a [`Edit::Run`] is at most `max_run` bytes (a few MiB for line readers, to cross
/// their line bound; small for parsers that hold the whole input anyway).
pub fn mutated(
    seeds: Vec<Vec<u8>>,
    tokens: &'static [&'static [u8]],
    max_run: usize,
) -> impl Strategy<Value = Vec<u8>> {
    assert!(!seeds.is_empty() && !tokens.is_empty());
    let run_len = prop_oneof![
        12 => 1usize..64,
        1 => 0..=max_run,
    ];
    let edit = prop_oneof![
        4 => (pos(), any::<u8>()).prop_map(|(i, b)| Edit::Flip(i, b)),
        4 => (pos(), any::<u8>()).prop_map(|(i, b)| Edit::Set(i, b)),
        3 => (pos(), prop::collection::vec(any::<u8>(), 1..8))
            .prop_map(|(i, b)| Edit::Insert(i, b)),
        6 => (pos(), pos()).prop_map(|(i, t)| Edit::Token(i, t)),
        3 => (pos(), 1usize..64).prop_map(|(i, n)| Edit::Delete(i, n)),
        2 => (pos(), 1usize..256, pos())
            .prop_map(|(i, n, j)| Edit::Duplicate(i, n, j)),
        1 => pos().prop_map(Edit::Truncate),
        1 => (pos(), any::<u8>(), run_len).prop_map(|(i, b, n)| Edit::Run(i, b, n)),
    ];
    (
        prop::sample::select(seeds),
        prop::collection::vec(edit, 0..8),
    )
        .prop_map(move |(seed, edits)| apply(seed, &edits, tokens))
}

/// Applies `edits` in order.
pub fn apply(mut bytes: Vec<u8>, edits: &[Edit], tokens: &[&[u8]]) -> Vec<u8> {
    for e in edits {
        let len = bytes.len();
        // Where to insert: any of the len + 1 gaps.
        let gap = |i: &Pos| i.of(len + 1);
        match e {
            Edit::Flip(i, b) if len > 0 => bytes[i.of(len)] ^= 1 << (b % 8),
            Edit::Set(i, b) if len > 0 => bytes[i.of(len)] = *b,
            Edit::Insert(i, b) => {
                let at = gap(i);
                bytes.splice(at..at, b.iter().copied());
            }
            Edit::Token(i, t) => {
                let at = gap(i);
                bytes.splice(at..at, tokens[t.of(tokens.len())].iter().copied());
            }
            Edit::Delete(i, n) if len > 0 => {
                let at = i.of(len);
                bytes.drain(at..(at + n).min(len));
            }
            Edit::Duplicate(i, n, j) if len > 0 => {
                let at = i.of(len);
                let piece = bytes[at..(at + n).min(len)].to_vec();
                let to = gap(j);
                bytes.splice(to..to, piece);
            }
            Edit::Truncate(i) => bytes.truncate(gap(i)),
            Edit::Run(i, b, n) => {
                let at = gap(i);
                bytes.splice(at..at, std::iter::repeat_n(*b, *n));
            }
            _ => {}
        }
    }
    bytes
}

/// Up to `max_len` bytes, mostly from `alphabet` (the bytes the parser treats
/// specially), the rest any byte.
pub fn arbitrary(alphabet: &'static [u8], max_len: usize) -> impl Strategy<Value = Vec<u8>> {
    assert!(!alphabet.is_empty());
    prop::collection::vec(
        prop_oneof![
            4 => prop::sample::select(alphabet),
            1 => any::<u8>(),
        ],
        0..max_len,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;

    #[test]
    fn edits_change_the_input_as_named() {
        let at = Pos;
        let b = apply(b"abcdef".to_vec(), &[Edit::Delete(at(0), 2)], &[b"T"]);
        assert_eq!(b, b"cdef");
        let b = apply(b"ab".to_vec(), &[Edit::Token(at(0), at(0))], &[b"T"]);
        assert_eq!(b, b"Tab");
        let b = apply(b"ab".to_vec(), &[Edit::Run(at(0), b'x', 3)], &[b"T"]);
        assert_eq!(b, b"xxxab");
        let b = apply(b"ab".to_vec(), &[Edit::Duplicate(at(0), 9, at(0))], &[b"T"]);
        assert_eq!(b, b"abab");
        // Edits that need a byte do nothing to an empty input.
        let b = apply(
            vec![],
            &[Edit::Flip(at(5), 1), Edit::Truncate(at(u32::MAX))],
            &[b"T"],
        );
        assert!(b.is_empty());
    }

    #[test]
    fn mutations_mostly_differ_from_the_seed() {
        let seed = b"0123456789".to_vec();
        let s = mutated(vec![seed.clone()], &[b"x"], 10);
        let mut runner = TestRunner::deterministic();
        let changed = (0..200)
            .filter(|_| s.new_tree(&mut runner).unwrap().current() != seed)
            .count();
        assert!(changed > 150, "{changed}");
    }
}
