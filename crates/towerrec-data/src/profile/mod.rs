//! Access profiles: how often every row of every embedding table is read (OPER §3.2,
//! the access counts `A_k` of Eq. 2–3, "obtained by profiling the training dataset").
//!
//! [`Profiler`] counts the ids of a record stream, exactly (one `u32` per row) for
//! tables up to a size and with a count-min sketch and a top-k heap (the `pdatastructs`
//! crate) above it, keeping only the hot rows. An [`AccessProfile`] is saved as
//! safetensors ([`AccessProfile::save`]); [`TableAccess`] answers what a planner and a
//! reader of the summary ask: reads of a row, rows by rank, the share of reads that
//! go to the hottest rows, the fitted Zipf exponent and the access CDF.

mod count;
mod file;
mod stats;
#[cfg(test)]
mod tests;

pub use count::{profile_stream, ProfileOptions, Profiler};
pub use stats::fit_zipf;

/// Reads of every table of a data set.
#[derive(Debug, Clone, PartialEq)]
pub struct AccessProfile {
    /// Samples (records) counted.
    pub samples: u64,
    /// What was read (the data description, e.g. a path and a part).
    pub source: String,
    /// One per sparse feature of the schema, in its order.
    pub tables: Vec<TableAccess>,
}

/// Reads of one table's rows.
#[derive(Debug, Clone, PartialEq)]
pub struct TableAccess {
    pub name: String,
    pub rows: u64,
    /// Ids read, every id of every bag (the sum of all rows' counts).
    pub reads: u64,
    pub counts: RowCounts,
}

/// How a table's reads were counted.
#[derive(Debug, Clone, PartialEq)]
pub enum RowCounts {
    /// `counts[row]`: reads of every row.
    Exact(Vec<u32>),
    /// The hottest rows only, `(row, estimated reads)`, most read first: a count-min
    /// sketch's estimates, each over by at most `epsilon · reads` with probability at
    /// least `1 − delta`; rows not listed were read less than the last listed.
    Sketch {
        hot: Vec<(u64, u64)>,
        epsilon: f64,
        delta: f64,
    },
}

impl AccessProfile {
    /// The profile of `table`, if any.
    pub fn table(&self, name: &str) -> Option<&TableAccess> {
        self.tables.iter().find(|t| t.name == name)
    }
}

impl TableAccess {
    /// Whether every row's reads are known exactly.
    pub fn is_exact(&self) -> bool {
        matches!(self.counts, RowCounts::Exact(_))
    }

    /// Reads of `row`: exact, or the sketch's estimate for a listed hot row and `None`
    /// for a row the sketch did not keep.
    pub fn count(&self, row: u64) -> Option<u64> {
        match &self.counts {
            RowCounts::Exact(c) => usize::try_from(row)
                .ok()
                .and_then(|r| c.get(r))
                .map(|&n| u64::from(n)),
            RowCounts::Sketch { hot, .. } => hot.iter().find(|&&(r, _)| r == row).map(|&(_, n)| n),
        }
    }

    /// Rows read at least once (exact profiles; `None` for a sketch).
    pub fn distinct(&self) -> Option<u64> {
        match &self.counts {
            RowCounts::Exact(c) => Some(c.iter().filter(|&&n| n > 0).count() as u64),
            RowCounts::Sketch { .. } => None,
        }
    }

    /// `(row, reads)` of the rows read at least once (the hot rows of a sketch), most
    /// read first, ties by row: the order OPER's partitioning walks (§4.1).
    pub fn ranked(&self) -> Vec<(u64, u64)> {
        let mut ranked: Vec<(u64, u64)> = match &self.counts {
            RowCounts::Exact(c) => c
                .iter()
                .enumerate()
                .filter(|(_, &n)| n > 0)
                .map(|(r, &n)| (r as u64, u64::from(n)))
                .collect(),
            RowCounts::Sketch { hot, .. } => hot.clone(),
        };
        ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        ranked
    }

    /// The rows ranked once, for the questions a summary asks of them.
    pub fn ranking(&self) -> Ranking<'_> {
        Ranking {
            table: self,
            ranked: self.ranked(),
        }
    }
}

/// A table's rows ranked by reads ([`TableAccess::ranked`]), with its totals.
pub struct Ranking<'a> {
    table: &'a TableAccess,
    ranked: Vec<(u64, u64)>,
}

impl Ranking<'_> {
    /// `(row, reads)`, most read first.
    pub fn rows(&self) -> &[(u64, u64)] {
        &self.ranked
    }

    /// Share of the reads that go to the hottest `fraction` of the rows (at least one
    /// row). `None` when nothing was read, or when a sketch did not keep that many rows.
    pub fn top_share(&self, fraction: f64) -> Option<f64> {
        let t = self.table;
        if t.reads == 0 || t.rows == 0 {
            return None;
        }
        let n = ((fraction * t.rows as f64).ceil() as u64).clamp(1, t.rows);
        if !t.is_exact() && n > self.ranked.len() as u64 {
            return None;
        }
        let top: u64 = self.ranked.iter().take(n as usize).map(|&(_, c)| c).sum();
        Some(top as f64 / t.reads as f64)
    }

    /// The Zipf exponent fitted to the rank–frequency curve ([`fit_zipf`]).
    pub fn zipf_exponent(&self) -> Option<f64> {
        let counts: Vec<u64> = self.ranked.iter().map(|&(_, c)| c).collect();
        fit_zipf(&counts)
    }

    /// The access CDF: `(share of rows, hottest first; share of reads)` at up to
    /// `points` rank cut-offs spaced evenly on a log scale, from the hottest row to the
    /// last row read (the last kept row of a sketch).
    pub fn cdf(&self, points: usize) -> Vec<(f64, f64)> {
        let t = self.table;
        if self.ranked.is_empty() || t.reads == 0 || points == 0 {
            return Vec::new();
        }
        let (rows, reads) = (t.rows as f64, t.reads as f64);
        let mut out = Vec::with_capacity(points);
        let (mut sum, mut at) = (0u64, 0usize);
        for cut in stats::log_cuts(self.ranked.len(), points) {
            sum += self.ranked[at..cut].iter().map(|&(_, c)| c).sum::<u64>();
            at = cut;
            out.push((cut as f64 / rows, sum as f64 / reads));
        }
        out
    }
}
