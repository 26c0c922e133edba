//! Counting keys for a vocabulary: exactly (a hash map per feature, counted in parallel
//! over the features while another thread reads the data), or in bounded memory (a
//! count-min sketch with a top-k heap per feature, pdatastructs, as the access profile
//! does in [`crate::profile`]).

use super::{FeatureVocab, VocabOptions};
use crate::block::RecordBlock;
use crate::encode::KeyMap;
use crate::error::{Error, Result};
use crate::stream::RecordStream;
use pdatastructs::countminsketch::CountMinSketch;
use pdatastructs::topk::cmsheap::CMSHeap;
use rayon::prelude::*;
use std::sync::mpsc::sync_channel;

/// Records handed from the reading thread to the counting one at a time.
const CHUNK: usize = 8192;

/// The bounded-memory counter's settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SketchOptions {
    /// A count's overestimate stays below `epsilon` × the feature's occurrences...
    pub epsilon: f64,
    /// ...except with probability `delta`.
    pub delta: f64,
}

impl Default for SketchOptions {
    fn default() -> Self {
        SketchOptions {
            epsilon: 1e-4,
            delta: 1e-3,
        }
    }
}

impl SketchOptions {
    /// Bytes one feature's sketches take (two count-min sketches of 8-byte counters; the
    /// heap of `top` keys comes on top: about 100 bytes a key).
    pub fn bytes_per_feature(&self) -> u64 {
        let w = (std::f64::consts::E / self.epsilon).ceil() as u64;
        let d = (1.0 / self.delta).ln().ceil() as u64;
        2 * w * d * 8
    }
}

/// One feature's tally: (key, count) hottest first (ties by key ascending), whether
/// counts are exact, distinct keys seen (exact counting only), and occurrences.
pub(super) struct Tally {
    pub pairs: Vec<(u64, u64)>,
    pub distinct: Option<u64>,
    pub occurrences: u64,
}

/// Hottest first, ties by key ascending: the vocabulary's order.
pub(super) fn sort_hot(pairs: &mut [(u64, u64)]) {
    pairs.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
}

/// Reads every record of `stream` on a thread of its own and hands them to `count` in
/// blocks of about [`CHUNK`] rows (a text reader's own blocks: no allocation per row);
/// `progress` sees the number of records read after each block. Returns the records
/// read.
fn pump(
    stream: &mut dyn RecordStream,
    mut count: impl FnMut(&RecordBlock),
    mut progress: impl FnMut(u64),
) -> Result<u64> {
    let (tx, rx) = sync_channel::<Result<RecordBlock>>(4);
    let (dense, sparse) = (stream.schema().num_dense(), stream.schema().num_sparse());
    std::thread::scope(|s| {
        s.spawn(move || {
            // Whether the stream reads blocks (the text readers) or records.
            let mut blocks = true;
            loop {
                let mut block = RecordBlock::new(dense, sparse);
                let end = loop {
                    let got = if blocks {
                        stream.read_block(CHUNK - block.len(), &mut block)
                    } else {
                        Ok(None)
                    };
                    match got {
                        Ok(Some(0)) => break true,
                        Ok(Some(_)) => {}
                        Ok(None) => {
                            blocks = false;
                            match stream.next_record() {
                                Ok(Some(r)) => block.push_record(&r),
                                Ok(None) => break true,
                                Err(e) => {
                                    let _ = tx.send(Err(e));
                                    return;
                                }
                            }
                        }
                        Err(e) => {
                            // The rows before the error count first, as one by one.
                            if !block.is_empty() {
                                let _ = tx.send(Ok(std::mem::take(&mut block)));
                            }
                            let _ = tx.send(Err(e));
                            return;
                        }
                    }
                    if block.len() >= CHUNK {
                        break false;
                    }
                };
                if (!block.is_empty() && tx.send(Ok(block)).is_err()) || end {
                    return;
                }
            }
        });
        let mut rows = 0u64;
        for block in rx {
            let block = block?;
            count(&block);
            rows += block.len() as u64;
            progress(rows);
        }
        Ok(rows)
    })
}

/// Counts every key of every feature of `stream` exactly. Returns the tallies and the
/// records read.
pub(super) fn count_exact(
    stream: &mut dyn RecordStream,
    progress: impl FnMut(u64),
) -> Result<(Vec<Tally>, u64)> {
    let features = stream.schema().num_sparse();
    let mut maps: Vec<(KeyMap<u64>, u64)> = (0..features).map(|_| Default::default()).collect();
    let rows = pump(
        stream,
        |chunk| {
            maps.par_iter_mut()
                .enumerate()
                .for_each(|(f, (map, occurrences))| {
                    for r in 0..chunk.len() {
                        for &k in chunk.ids_of(r, f) {
                            *map.entry(k).or_insert(0) += 1;
                            *occurrences += 1;
                        }
                    }
                })
        },
        progress,
    )?;
    let tallies = maps
        .into_par_iter()
        .map(|(map, occurrences)| {
            let distinct = map.len() as u64;
            let mut pairs: Vec<(u64, u64)> = map.into_iter().collect();
            sort_hot(&mut pairs);
            Tally {
                pairs,
                distinct: Some(distinct),
                occurrences,
            }
        })
        .collect();
    Ok((tallies, rows))
}

/// Counts with a count-min sketch and keeps the `top` hottest keys of each feature.
pub(super) fn count_sketch(
    stream: &mut dyn RecordStream,
    sketch: SketchOptions,
    top: usize,
    progress: impl FnMut(u64),
) -> Result<(Vec<Tally>, u64)> {
    let unit = |x: f64| x > 0.0 && x < 1.0;
    if !(unit(sketch.epsilon) && unit(sketch.delta)) {
        return Err(Error::Config(format!(
            "vocab: the sketch's epsilon and delta must be in (0, 1), got {} and {}",
            sketch.epsilon, sketch.delta
        )));
    }
    let features = stream.schema().num_sparse();
    let cms = || CountMinSketch::<u64>::with_point_query_properties(sketch.epsilon, sketch.delta);
    // The heap (not Send: it holds `Rc`s) counts on this thread.
    let mut counters: Vec<(CMSHeap<u64>, CountMinSketch<u64>, u64)> = (0..features)
        .map(|_| (CMSHeap::new(top.max(1), cms()), cms(), 0))
        .collect();
    let rows = pump(
        stream,
        |chunk| {
            for r in 0..chunk.len() {
                for (f, (heap, counts, occurrences)) in counters.iter_mut().enumerate() {
                    for &k in chunk.ids_of(r, f) {
                        heap.add(k);
                        counts.add(&k);
                        *occurrences += 1;
                    }
                }
            }
        },
        progress,
    )?;
    let tallies = counters
        .into_iter()
        .map(|(heap, counts, occurrences)| {
            let mut pairs: Vec<(u64, u64)> = if top == 0 {
                Vec::new()
            } else {
                heap.iter()
                    .map(|k| (k, counts.query_point(&k) as u64))
                    .collect()
            };
            sort_hot(&mut pairs);
            Tally {
                pairs,
                distinct: None,
                occurrences,
            }
        })
        .collect();
    Ok((tallies, rows))
}

/// A feature's vocabulary from its tally: keys seen at least `min_count` times, at most
/// `max_rows - 1` of them (row 0 is the OOV row).
pub(super) fn select(name: String, tally: Tally, opts: &VocabOptions) -> FeatureVocab {
    let cap = opts.max_rows.map_or(usize::MAX, |m| {
        usize::try_from(m.saturating_sub(1)).unwrap_or(usize::MAX)
    });
    let kept: Vec<(u64, u64)> = tally
        .pairs
        .into_iter()
        .take_while(|&(_, c)| c >= opts.min_count)
        .take(cap)
        .collect();
    FeatureVocab {
        name,
        keys: kept.iter().map(|p| p.0).collect(),
        counts: kept.iter().map(|p| p.1).collect(),
        distinct: tally.distinct,
        occurrences: tally.occurrences,
    }
}
