//! Counting reads: one `u32` per row for tables up to [`ProfileOptions::exact_max_rows`],
//! a count-min sketch with a top-k heap (bounded memory, the hot rows only) above it.

use super::{AccessProfile, RowCounts, TableAccess};
use crate::error::{Error, Result};
use crate::record::{Record, Schema};
use crate::stream::RecordStream;
use pdatastructs::countminsketch::CountMinSketch;
use pdatastructs::topk::cmsheap::CMSHeap;
use std::ops::ControlFlow;

/// How to count.
#[derive(Debug, Clone, PartialEq)]
pub struct ProfileOptions {
    /// Tables with more rows than this are sketched, not counted exactly (4 bytes per
    /// row when exact).
    pub exact_max_rows: u64,
    /// Hot rows a sketched table keeps.
    pub sketch_top: usize,
    /// A sketched count's error bound, as a share of the table's reads.
    pub sketch_epsilon: f64,
    /// Probability that a sketched count exceeds its error bound.
    pub sketch_delta: f64,
}

impl Default for ProfileOptions {
    fn default() -> Self {
        ProfileOptions {
            exact_max_rows: 1 << 26,
            sketch_top: 1 << 16,
            sketch_epsilon: 1e-5,
            sketch_delta: 1e-3,
        }
    }
}

impl ProfileOptions {
    fn validate(&self) -> Result<()> {
        let bad = |what: &str| Err(Error::Config(format!("profile: {what}")));
        if self.sketch_top == 0 {
            return bad("the sketch must keep at least one hot row");
        }
        if !(self.sketch_epsilon > 0.0 && self.sketch_epsilon < 1.0) {
            return bad("the sketch's epsilon must be in (0, 1)");
        }
        if !(self.sketch_delta > 0.0 && self.sketch_delta < 1.0) {
            return bad("the sketch's delta must be in (0, 1)");
        }
        Ok(())
    }
}

enum Counter {
    Exact(Vec<u32>),
    Sketch(Box<Sketch>),
}

struct Sketch {
    top: CMSHeap<u64>,
    counts: CountMinSketch<u64>,
}

/// Counts the reads of a stream's records, table by table.
pub struct Profiler {
    names: Vec<String>,
    rows: Vec<u64>,
    reads: Vec<u64>,
    counters: Vec<Counter>,
    samples: u64,
    opts: ProfileOptions,
}

impl Profiler {
    pub fn new(schema: &Schema, opts: ProfileOptions) -> Result<Self> {
        opts.validate()?;
        let counters = schema
            .sparse
            .iter()
            .map(|f| {
                if f.rows <= opts.exact_max_rows {
                    let rows = usize::try_from(f.rows).map_err(|_| {
                        Error::Config(format!("profile: table {} has too many rows", f.name))
                    })?;
                    Ok(Counter::Exact(vec![0; rows]))
                } else {
                    let sketch = || {
                        CountMinSketch::with_point_query_properties(
                            opts.sketch_epsilon,
                            opts.sketch_delta,
                        )
                    };
                    Ok(Counter::Sketch(Box::new(Sketch {
                        top: CMSHeap::new(opts.sketch_top, sketch()),
                        counts: sketch(),
                    })))
                }
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Profiler {
            names: schema.sparse_names(),
            rows: schema.sparse.iter().map(|f| f.rows).collect(),
            reads: vec![0; counters.len()],
            counters,
            samples: 0,
            opts,
        })
    }

    /// Counts one record's ids. An id outside its table is an error (readers reduce
    /// ids below `rows`, so it means a broken stream).
    pub fn add(&mut self, record: &Record) -> Result<()> {
        if record.sparse.len() != self.counters.len() {
            return Err(Error::Config(format!(
                "profile: a record has {} sparse features, the schema {}",
                record.sparse.len(),
                self.counters.len()
            )));
        }
        for (t, ids) in record.sparse.iter().enumerate() {
            for &id in ids {
                if id >= self.rows[t] {
                    return Err(Error::Config(format!(
                        "profile: id {id} of {} is outside its {} rows",
                        self.names[t], self.rows[t]
                    )));
                }
                self.count(t, id)?;
            }
            self.reads[t] += ids.len() as u64;
        }
        self.samples += 1;
        Ok(())
    }

    fn count(&mut self, t: usize, id: u64) -> Result<()> {
        match &mut self.counters[t] {
            Counter::Exact(c) => {
                let n = &mut c[id as usize];
                *n = n.checked_add(1).ok_or_else(|| {
                    Error::Config(format!(
                        "profile: row {id} of {} was read more than {} times; profile fewer samples",
                        self.names[t],
                        u32::MAX
                    ))
                })?;
            }
            Counter::Sketch(s) => {
                s.top.add(id);
                s.counts.add(&id);
            }
        }
        Ok(())
    }

    /// Samples counted so far.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    pub fn finish(self, source: String) -> AccessProfile {
        let (epsilon, delta) = (self.opts.sketch_epsilon, self.opts.sketch_delta);
        let tables = self
            .counters
            .into_iter()
            .enumerate()
            .map(|(t, counter)| TableAccess {
                name: self.names[t].clone(),
                rows: self.rows[t],
                reads: self.reads[t],
                counts: match counter {
                    Counter::Exact(c) => RowCounts::Exact(c),
                    Counter::Sketch(s) => {
                        let estimate = |r: u64| (r, s.counts.query_point(&r) as u64);
                        let mut hot: Vec<(u64, u64)> = s.top.iter().map(estimate).collect();
                        hot.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
                        RowCounts::Sketch {
                            hot,
                            epsilon,
                            delta,
                        }
                    }
                },
            })
            .collect();
        AccessProfile {
            samples: self.samples,
            source,
            tables,
        }
    }
}

/// Profiles `stream` up to `max_samples` records (all when `None`); `progress` sees the
/// count after every record and may stop the profile early (what was counted is kept).
pub fn profile_stream(
    stream: &mut dyn RecordStream,
    opts: ProfileOptions,
    max_samples: Option<u64>,
    source: String,
    mut progress: impl FnMut(u64) -> ControlFlow<()>,
) -> Result<AccessProfile> {
    let mut profiler = Profiler::new(stream.schema(), opts)?;
    while max_samples.is_none_or(|m| profiler.samples() < m) {
        let Some(record) = stream.next_record()? else {
            break;
        };
        profiler.add(&record)?;
        if progress(profiler.samples()).is_break() {
            break;
        }
    }
    Ok(profiler.finish(source))
}
