//! Reads batches on a background thread so that parsing overlaps with training.
//!
//! On a cluster every rank trains on its slice of each global batch. Where the stream
//! can pass over records without building them (synthetic data), a rank builds only
//! its own slice; otherwise it reads the whole global batch and slices it here, off
//! the training thread. Either way a rank gets the same samples.

use crate::error::{Error, Result};
use crate::ranks::rank_slice;
use std::sync::mpsc::{sync_channel, Receiver};
use std::thread::JoinHandle;
use towerrec_comm::even_split;
use towerrec_core::Batch;
use towerrec_data::{next_batch, read_records, RecordStream};

/// What a stream yielded: rows read (skipped batches and batches read ahead
/// included) and malformed rows skipped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadCounts {
    pub rows: u64,
    pub skipped: u64,
}

/// One global batch as a rank sees it: its slice (the whole batch on one rank) and
/// the size of the whole.
#[derive(Debug, Clone, PartialEq)]
pub struct Fed {
    pub batch: Batch,
    pub global_size: usize,
}

/// Which part of every global batch the reader hands over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Share {
    /// The whole batch.
    Whole,
    /// Rank `0` of `1`'s slice of it ([`rank_slice`]).
    Rank(usize, usize),
}

/// Batches read ahead from a stream; dropping it stops the reader.
pub struct Prefetcher {
    rx: Option<Receiver<Result<Fed>>>,
    handle: Option<JoinHandle<ReadCounts>>,
}

impl Prefetcher {
    /// Starts reading `stream` in global batches of `batch_size`, after skipping
    /// `skip_batches` (a resumed run skips what it already trained on), keeping `depth`
    /// batches ready, each cut to `share`.
    pub fn start(
        mut stream: Box<dyn RecordStream>,
        batch_size: usize,
        skip_batches: u64,
        depth: usize,
        share: Share,
    ) -> Self {
        let (tx, rx) = sync_channel(depth);
        let handle = std::thread::spawn(move || {
            let mut index = 0u64;
            let mut rows = 0u64;
            loop {
                index += 1;
                let skip = index <= skip_batches;
                let fed = match read_global(stream.as_mut(), batch_size, share, skip) {
                    Ok(Some(f)) => f,
                    Ok(None) if skip => {
                        // A resumed pass whose data ends before the batches it had trained on.
                        let _ = tx.send(Err(Error::Progress(format!(
                            "the checkpoint stands at batch {skip_batches} of its epoch, but \
                             the training data ends after {} batches: it is not the data the \
                             run trained on, or the checkpoint's progress was edited",
                            index - 1
                        ))));
                        break;
                    }
                    Ok(None) => break,
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        break;
                    }
                };
                rows += fed.global_size as u64;
                if skip {
                    continue;
                }
                if tx.send(Ok(fed)).is_err() {
                    break;
                }
            }
            ReadCounts {
                rows,
                skipped: stream.skipped(),
            }
        });
        Self {
            rx: Some(rx),
            handle: Some(handle),
        }
    }

    /// The next batch, `None` at the end of the stream.
    pub fn next(&mut self) -> Option<Result<Fed>> {
        self.rx.as_ref().and_then(|rx| rx.recv().ok())
    }

    /// Stops reading and returns what the stream yielded and skipped.
    pub fn finish(mut self) -> ReadCounts {
        self.rx = None;
        self.handle
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default()
    }
}

/// The next global batch cut to `share`; `None` at the end. A batch to be skipped
/// (`pass_over`) is not built where the stream can pass over it.
fn read_global(
    stream: &mut dyn RecordStream,
    batch_size: usize,
    share: Share,
    pass_over: bool,
) -> Result<Option<Fed>> {
    let known = stream
        .remaining()
        .map(|r| r.min(batch_size as u64) as usize);
    match (share, known) {
        (_, Some(0)) => Ok(None),
        (_, Some(global_size)) if pass_over => {
            stream.skip_records(global_size as u64)?;
            Ok(Some(Fed {
                batch: Batch::default(),
                global_size,
            }))
        }
        (Share::Rank(rank, world), Some(global_size)) if world > 1 => {
            let counts = even_split(global_size, world);
            let before: usize = counts[..rank].iter().sum();
            stream.skip_records(before as u64)?;
            let batch = read_records(stream, counts[rank])?;
            stream.skip_records((global_size - before - counts[rank]) as u64)?;
            Ok(Some(Fed { batch, global_size }))
        }
        _ => {
            let Some(global) = next_batch(stream, batch_size)? else {
                return Ok(None);
            };
            let global_size = global.batch_size();
            let batch = match share {
                Share::Rank(rank, world) if world > 1 => {
                    rank_slice(&global, rank, world).into_owned()
                }
                _ => global,
            };
            Ok(Some(Fed { batch, global_size }))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use towerrec_data::{PoolingFactor, SyntheticConfig, SyntheticStream};

    /// A stream that cannot pass over records cheaply (the default `skip_records`).
    struct Opaque(SyntheticStream);
    impl RecordStream for Opaque {
        fn schema(&self) -> &towerrec_data::Schema {
            self.0.schema()
        }
        fn next_record(&mut self) -> towerrec_data::Result<Option<towerrec_data::Record>> {
            self.0.next_record()
        }
        fn skipped(&self) -> u64 {
            0
        }
    }

    fn drain(mut p: Prefetcher) -> (Vec<Fed>, ReadCounts) {
        let mut out = Vec::new();
        while let Some(f) = p.next() {
            out.push(f.unwrap());
        }
        (out, p.finish())
    }

    #[test]
    fn a_rank_gets_its_slice_of_every_global_batch_whichever_way_it_is_read() {
        let cfg = SyntheticConfig::criteo_like(40, 3, PoolingFactor::Mean { mean: 2.0 }, 1.05);
        // 23 samples in batches of 7: the last global batch has 2, so some ranks get none.
        let stream = || SyntheticStream::new(&cfg, 0..23).unwrap();
        for skip in [0, 2] {
            let (whole, read) = drain(Prefetcher::start(
                Box::new(stream()),
                7,
                skip,
                2,
                Share::Whole,
            ));
            assert_eq!(read.rows, 23);
            for world in [1, 3, 4] {
                for rank in 0..world {
                    let share = Share::Rank(rank, world);
                    let fast = drain(Prefetcher::start(Box::new(stream()), 7, skip, 2, share));
                    let slow = Box::new(Opaque(stream()));
                    let slow = drain(Prefetcher::start(slow, 7, skip, 2, share));
                    assert_eq!(fast.1, read);
                    assert_eq!(slow.1, read);
                    assert_eq!(fast.0.len(), whole.len());
                    for ((f, s), w) in fast.0.iter().zip(&slow.0).zip(&whole) {
                        let expected = rank_slice(&w.batch, rank, world).into_owned();
                        assert_eq!(f.global_size, w.batch.batch_size());
                        assert_eq!(f.batch, expected, "rank {rank} of {world}, skip {skip}");
                        assert_eq!(s, f);
                    }
                }
            }
        }
    }
}
