//! Dynamic micro-batching (docs/SERVING.md, "Micro-batching"): requests queue for one
//! scoring thread, which takes the first waiting request, adds those that arrive within
//! `max_wait` of it up to `max_rows` rows, scores them as one batch and hands each
//! request its scores. A full queue refuses a request (503) instead of growing.

use crate::error::{Error, Result};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use towerrec_core::Batch;

/// Scores batches: one process's model, or the ranks of a cluster in lockstep.
pub trait Scorer: Send {
    /// One logit per row of `batch`.
    fn score(&mut self, batch: &Batch) -> std::result::Result<Vec<f32>, String>;
}

/// How requests are grouped.
#[derive(Debug, Clone, Copy)]
pub struct BatchLimits {
    /// The most rows scored together (a request with more is scored alone).
    pub max_rows: usize,
    /// How long the first request of a batch waits for others.
    pub max_wait: Duration,
    /// Requests waiting to be scored before new ones are refused.
    pub queue: usize,
}

struct Job {
    batch: Batch,
    reply: tokio::sync::oneshot::Sender<std::result::Result<Vec<f32>, String>>,
}

enum Msg {
    Job(Job),
    Stop,
}

/// The handle requests submit to; [`Batcher::stop`] ends the scoring thread.
pub struct Batcher {
    tx: SyncSender<Msg>,
    thread: std::sync::Mutex<Option<JoinHandle<()>>>,
}

impl Batcher {
    /// Starts the scoring thread with `scorer`.
    pub fn start(scorer: Box<dyn Scorer>, limits: BatchLimits) -> Result<Self> {
        let (tx, rx) = mpsc::sync_channel(limits.queue.max(1));
        let thread = std::thread::Builder::new()
            .name("towerrec-score".into())
            .spawn(move || run(scorer, rx, limits))
            .map_err(|e| Error::Server(format!("starting the scoring thread: {e}")))?;
        Ok(Self {
            tx,
            thread: std::sync::Mutex::new(Some(thread)),
        })
    }

    /// The logits of `batch`'s rows, scored with whatever else is waiting.
    pub async fn score(&self, batch: Batch) -> Result<Vec<f32>> {
        let (reply, rx) = tokio::sync::oneshot::channel();
        self.tx
            .try_send(Msg::Job(Job { batch, reply }))
            .map_err(|e| match e {
                TrySendError::Full(_) => {
                    Error::Overloaded("the scoring queue is full (--queue); retry later".into())
                }
                TrySendError::Disconnected(_) => {
                    Error::Overloaded("the server is shutting down".into())
                }
            })?;
        rx.await
            .map_err(|_| Error::Overloaded("the server is shutting down".into()))?
            .map_err(Error::Scoring)
    }

    /// Scores what is queued, then ends the scoring thread and waits for it.
    pub fn stop(&self) {
        let thread = self.thread.lock().ok().and_then(|mut t| t.take());
        if let Some(thread) = thread {
            // Blocks while the queue is full: the thread is emptying it.
            let _ = self.tx.send(Msg::Stop);
            let _ = thread.join();
        }
    }
}

impl Drop for Batcher {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The scoring thread: batches until [`Msg::Stop`] or every sender is gone.
fn run(mut scorer: Box<dyn Scorer>, rx: Receiver<Msg>, limits: BatchLimits) {
    let mut carried: Option<Job> = None;
    loop {
        let first = match carried.take() {
            Some(job) => job,
            None => match rx.recv() {
                Ok(Msg::Job(job)) => job,
                Ok(Msg::Stop) | Err(_) => return,
            },
        };
        let deadline = Instant::now() + limits.max_wait;
        let mut rows = first.batch.batch_size();
        let mut jobs = vec![first];
        let mut stop = false;
        while rows < limits.max_rows {
            let wait = deadline.saturating_duration_since(Instant::now());
            let msg = if wait.is_zero() {
                rx.try_recv().map_err(|e| match e {
                    mpsc::TryRecvError::Empty => RecvTimeoutError::Timeout,
                    mpsc::TryRecvError::Disconnected => RecvTimeoutError::Disconnected,
                })
            } else {
                rx.recv_timeout(wait)
            };
            match msg {
                Ok(Msg::Job(job)) => {
                    if rows + job.batch.batch_size() > limits.max_rows {
                        carried = Some(job);
                        break;
                    }
                    rows += job.batch.batch_size();
                    jobs.push(job);
                }
                Ok(Msg::Stop) | Err(RecvTimeoutError::Disconnected) => {
                    stop = true;
                    break;
                }
                Err(RecvTimeoutError::Timeout) => break,
            }
        }
        score_jobs(&mut *scorer, jobs);
        if stop {
            if let Some(job) = carried.take() {
                score_jobs(&mut *scorer, vec![job]);
            }
            return;
        }
    }
}

/// Scores `jobs` as one batch and replies to each with its rows' logits.
fn score_jobs(scorer: &mut dyn Scorer, jobs: Vec<Job>) {
    let (batches, replies): (Vec<Batch>, Vec<_>) =
        jobs.into_iter().map(|j| (j.batch, j.reply)).unzip();
    let sizes: Vec<usize> = batches.iter().map(Batch::batch_size).collect();
    metrics::histogram!(crate::metrics::BATCH_ROWS).record(sizes.iter().sum::<usize>() as f64);
    metrics::histogram!(crate::metrics::BATCH_REQUESTS).record(sizes.len() as f64);
    let logits = if batches.len() == 1 {
        scorer.score(&batches[0])
    } else {
        Batch::concat(&batches)
            .map_err(|e| e.to_string())
            .and_then(|b| scorer.score(&b))
    };
    match logits {
        Ok(all) if all.len() == sizes.iter().sum::<usize>() => {
            let mut start = 0;
            for (reply, n) in replies.into_iter().zip(sizes) {
                let _ = reply.send(Ok(all[start..start + n].to_vec()));
                start += n;
            }
        }
        Ok(all) => {
            let e = format!(
                "the scorer gave {} logits for {} rows",
                all.len(),
                sizes.iter().sum::<usize>()
            );
            replies.into_iter().for_each(|r| {
                let _ = r.send(Err(e.clone()));
            });
        }
        Err(e) => replies.into_iter().for_each(|r| {
            let _ = r.send(Err(e.clone()));
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use towerrec_core::KeyedJagged;

    /// Logit = the row's dense value; records each batch's size.
    struct Echo(Arc<Mutex<Vec<usize>>>);

    impl Scorer for Echo {
        fn score(&mut self, batch: &Batch) -> std::result::Result<Vec<f32>, String> {
            self.0.lock().unwrap().push(batch.batch_size());
            std::thread::sleep(Duration::from_millis(20));
            Ok(batch.dense.clone())
        }
    }

    fn rows(values: &[f32]) -> Batch {
        let n = values.len();
        let kj = KeyedJagged::from_lengths(vec![], n, &[], vec![]).unwrap();
        Batch::new(values.to_vec(), 1, kj, vec![0.0; n]).unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn requests_are_batched_up_to_the_limit_and_get_their_own_scores() {
        let sizes = Arc::new(Mutex::new(Vec::new()));
        let limits = BatchLimits {
            max_rows: 5,
            max_wait: Duration::from_millis(200),
            queue: 16,
        };
        let batcher = Arc::new(Batcher::start(Box::new(Echo(sizes.clone())), limits).unwrap());
        let tasks: Vec<_> = (0..6)
            .map(|i| {
                let b = batcher.clone();
                tokio::spawn(async move { b.score(rows(&[i as f32, i as f32 + 0.5])).await })
            })
            .collect();
        for (i, t) in tasks.into_iter().enumerate() {
            assert_eq!(t.await.unwrap().unwrap(), [i as f32, i as f32 + 0.5]);
        }
        let sizes = sizes.lock().unwrap().clone();
        assert_eq!(sizes.iter().sum::<usize>(), 12);
        assert!(sizes.iter().all(|&s| s <= 5), "{sizes:?}");
        assert!(sizes.len() < 6, "no two requests were batched: {sizes:?}");
        batcher.stop();
        let err = batcher.score(rows(&[1.0])).await.unwrap_err();
        assert!(matches!(err, Error::Overloaded(_)), "{err}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_full_queue_refuses_with_overloaded() {
        let sizes = Arc::new(Mutex::new(Vec::new()));
        let limits = BatchLimits {
            max_rows: 1,
            max_wait: Duration::ZERO,
            queue: 1,
        };
        let batcher = Arc::new(Batcher::start(Box::new(Echo(sizes)), limits).unwrap());
        let tasks: Vec<_> = (0..20)
            .map(|i| {
                let b = batcher.clone();
                tokio::spawn(async move { b.score(rows(&[i as f32])).await })
            })
            .collect();
        let mut overloaded = 0;
        for t in tasks {
            match t.await.unwrap() {
                Ok(_) => {}
                Err(Error::Overloaded(_)) => overloaded += 1,
                Err(e) => panic!("{e}"),
            }
        }
        assert!(
            overloaded > 0,
            "20 requests into a queue of 1 were all taken"
        );
    }
}
