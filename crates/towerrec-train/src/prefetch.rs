//! Reads batches on a background thread so that parsing overlaps with training.

use crate::error::Result;
use std::sync::mpsc::{sync_channel, Receiver};
use std::thread::JoinHandle;
use towerrec_core::Batch;
use towerrec_data::{next_batch, RecordStream};

/// What a stream yielded: rows read (skipped batches and batches read ahead
/// included) and malformed rows skipped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadCounts {
    pub rows: u64,
    pub skipped: u64,
}

/// Batches read ahead from a stream; dropping it stops the reader.
pub struct Prefetcher {
    rx: Option<Receiver<Result<Batch>>>,
    handle: Option<JoinHandle<ReadCounts>>,
}

impl Prefetcher {
    /// Starts reading `stream` in batches of `batch_size`, after skipping `skip_batches`
    /// (a resumed run skips what it already trained on), keeping `depth` batches ready.
    pub fn start(
        mut stream: Box<dyn RecordStream>,
        batch_size: usize,
        skip_batches: u64,
        depth: usize,
    ) -> Self {
        let (tx, rx) = sync_channel(depth);
        let handle = std::thread::spawn(move || {
            let mut index = 0u64;
            let mut rows = 0u64;
            loop {
                let next = next_batch(stream.as_mut(), batch_size).map_err(Into::into);
                let batch = match next {
                    Ok(Some(b)) => b,
                    Ok(None) => break,
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        break;
                    }
                };
                index += 1;
                rows += batch.batch_size() as u64;
                if index <= skip_batches {
                    continue;
                }
                if tx.send(Ok(batch)).is_err() {
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
    pub fn next(&mut self) -> Option<Result<Batch>> {
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
