//! What the text readers share: [`RowSelect`], the rule that picks which data rows a
//! stream yields (train/eval splits), and the cursor that applies it and the
//! [`BadRows`] policy over the lines of a file (read by [`crate::lines`], which also
//! says what a blank or an over-long line is).

use crate::error::Result;
use crate::hash::{mix2, unit_f64};
use crate::lines::Lines;
use crate::record::BadRows;
use std::ops::Range;
use std::sync::Arc;

/// Which data rows (0-based, counting every non-blank line after any header, malformed
/// or not) a stream yields. Counting malformed rows keeps a split the same whether bad
/// rows are skipped or not.
#[derive(Debug, Clone, PartialEq)]
pub enum RowSelect {
    /// Every row.
    All,
    /// Rows `start..end`.
    Range(Range<u64>),
    /// Row `i` is in the "inside" part iff `hash(seed, i) < fraction`; `inside` says
    /// which part this stream yields. Streaming and reproducible.
    Hashed {
        seed: u64,
        fraction: f64,
        inside: bool,
    },
    /// Row `i` is in the evaluation part iff `mask` says so (a split by a column's
    /// value, [`crate::column_split`]); `eval` says which part this stream yields. Rows
    /// the mask could not read are in neither.
    Mask { mask: Arc<RowMask>, eval: bool },
}

/// Which rows of a file evaluate, by a column's value: one bit per row.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RowMask {
    /// Rows counted (the file's data rows).
    pub rows: u64,
    /// Bit `i`: row `i` evaluates.
    pub eval: Vec<u64>,
    /// Bit `i`: row `i`'s column could be read (unset rows are in neither part).
    pub read: Vec<u64>,
    /// Rows whose column could not be read (skipped under `bad_rows = "skip"`).
    pub unread: u64,
}

impl RowMask {
    fn bit(bits: &[u64], i: u64) -> bool {
        bits.get((i / 64) as usize)
            .is_some_and(|w| w >> (i % 64) & 1 == 1)
    }

    fn set(bits: &mut Vec<u64>, i: u64) {
        let w = (i / 64) as usize;
        if bits.len() <= w {
            bits.resize(w + 1, 0);
        }
        bits[w] |= 1 << (i % 64);
    }

    /// Marks row `i` as read, and as evaluating if `eval`.
    pub fn mark(&mut self, i: u64, eval: bool) {
        Self::set(&mut self.read, i);
        if eval {
            Self::set(&mut self.eval, i);
        }
    }

    /// Whether row `i` is in the evaluation part (`Some(true)`), the training part
    /// (`Some(false)`) or neither (`None`).
    pub fn part_of(&self, i: u64) -> Option<bool> {
        Self::bit(&self.read, i).then(|| Self::bit(&self.eval, i))
    }
}

impl RowSelect {
    /// Whether row `i` is selected.
    pub fn contains(&self, i: u64) -> bool {
        match self {
            RowSelect::All => true,
            RowSelect::Range(r) => r.contains(&i),
            RowSelect::Hashed {
                seed,
                fraction,
                inside,
            } => (unit_f64(mix2(*seed, i)) < *fraction) == *inside,
            RowSelect::Mask { mask, eval } => mask.part_of(i) == Some(*eval),
        }
    }

    /// A row index at and past which nothing is selected, so readers can stop early.
    pub fn end(&self) -> u64 {
        match self {
            RowSelect::Range(r) => r.end,
            RowSelect::Mask { mask, .. } => mask.rows,
            RowSelect::All | RowSelect::Hashed { .. } => u64::MAX,
        }
    }
}

/// A [`Lines`] reader that counts data rows, applies a [`RowSelect`] and the
/// [`BadRows`] policy; the format readers only parse one line at a time.
pub(crate) struct RowCursor {
    pub lines: Lines,
    select: RowSelect,
    bad_rows: BadRows,
    next_row: u64,
    skipped: u64,
}

impl RowCursor {
    pub fn new(lines: Lines, bad_rows: BadRows) -> Self {
        Self {
            lines,
            select: RowSelect::All,
            bad_rows,
            next_row: 0,
            skipped: 0,
        }
    }

    pub fn set_select(&mut self, select: RowSelect) {
        self.select = select;
    }

    /// Rows skipped as malformed so far.
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// The 0-based index of the row read last (what [`RowSelect`] counts).
    pub fn last_row(&self) -> u64 {
        self.next_row.saturating_sub(1)
    }

    /// Parses the next selected row with `parse`; malformed rows are skipped and counted
    /// under [`BadRows::Skip`]. Only [`Error::Parse`] counts as malformed: an I/O error
    /// means the file itself is unreadable, and skipping would silently drop data.
    pub fn next<T>(&mut self, mut parse: impl FnMut(&Lines) -> Result<T>) -> Result<Option<T>> {
        loop {
            if self.next_row >= self.select.end() || !self.lines.next_line()? {
                return Ok(None);
            }
            let row = self.next_row;
            self.next_row += 1;
            if !self.select.contains(row) {
                continue;
            }
            let parsed = if self.lines.too_long {
                Err(self.lines.too_long_error("row"))
            } else {
                parse(&self.lines)
            };
            match parsed {
                Ok(t) => return Ok(Some(t)),
                Err(e) if self.bad_rows == BadRows::Skip && e.is_bad_row() => self.skipped += 1,
                Err(e) => return Err(e),
            }
        }
    }
}

/// Number of data rows in the text file `lines` reads: non-blank lines, less one header
/// line if `header`. Under [`BadRows::Fail`] an over-long line is an error here already,
/// as it would be when read; under `Skip` it counts as the malformed row it is.
pub(crate) fn count_lines(mut lines: Lines, header: bool, bad_rows: BadRows) -> Result<u64> {
    let mut n = 0u64;
    while lines.next_line()? {
        if lines.too_long && bad_rows == BadRows::Fail {
            let field = if header && n == 0 { "header" } else { "row" };
            return Err(lines.too_long_error(field));
        }
        n += 1;
    }
    Ok(if header { n.saturating_sub(1) } else { n })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashed_selection_partitions_rows_by_fraction() {
        let eval = RowSelect::Hashed {
            seed: 3,
            fraction: 0.2,
            inside: true,
        };
        let train = RowSelect::Hashed {
            seed: 3,
            fraction: 0.2,
            inside: false,
        };
        let n = 20_000;
        let e = (0..n).filter(|&i| eval.contains(i)).count();
        assert!((0..n).all(|i| eval.contains(i) != train.contains(i)));
        assert!((3_600..4_400).contains(&e), "{e}");
        assert_eq!(RowSelect::Range(2..5).end(), 5);
        assert!(!RowSelect::Range(2..5).contains(5));
    }
}
