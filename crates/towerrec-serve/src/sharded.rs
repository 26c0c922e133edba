//! Serving on a cluster of in-process ranks (docs/SERVING.md, "Sharded serving"): the
//! model's tables spread by a plan (any plan `towerrec plan` writes, OPER's inference
//! copies of Algorithm 1 and DMT towers included), every rank scoring its slice of
//! each micro-batch in lockstep as `towerrec eval` does on a cluster, and the bytes
//! each micro-batch moved between ranks counted as in training.

use crate::batcher::Scorer;
use crate::error::{Error, Result};
use crate::metrics::{BATCH_BYTES, BATCH_LOOKUP_BYTES};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use towerrec_comm::{Comm, Phase, Topology};
use towerrec_core::Batch;
use towerrec_data::Schema;
use towerrec_plan::Plan;
use towerrec_train::checkpoint::Checkpoint;
use towerrec_train::cluster::{build_rank_model, rank_slice, run_ranks};
use towerrec_train::Config;

/// Bytes one micro-batch moved between ranks, all ranks together.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchBytes {
    /// The embedding exchange (every phase but control), intra-host and cross-host.
    pub lookup_intra: u64,
    pub lookup_cross: u64,
    /// Gathering the scores (control), intra-host and cross-host.
    pub gather_intra: u64,
    pub gather_cross: u64,
}

type Reply = std::result::Result<(Vec<f32>, BatchBytes), String>;

/// The ranks of an in-process cluster, scoring together.
pub struct ShardedScorer {
    to_ranks: Vec<Sender<Arc<Batch>>>,
    from_root: Receiver<Reply>,
    thread: Option<JoinHandle<std::result::Result<(), String>>>,
    /// Bytes of every micro-batch scored so far, summed.
    pub total: Arc<Mutex<(u64, BatchBytes)>>,
}

impl ShardedScorer {
    /// Starts `topology`'s ranks, each building its part of `cfg`'s model under `plan`
    /// and loading its tables from `ckpt`, with `threads_per_rank` compute threads;
    /// returns once every rank is ready (or with the first rank's error).
    pub fn start(
        cfg: Config,
        ckpt: Arc<Checkpoint>,
        schema: Schema,
        topology: Topology,
        plan: Plan,
        threads_per_rank: usize,
    ) -> Result<Self> {
        let world = topology.world_size();
        let (senders, receivers): (Vec<_>, Vec<_>) = (0..world).map(|_| mpsc::channel()).unzip();
        let receivers = Mutex::new(receivers.into_iter().map(Some).collect::<Vec<_>>());
        let (root_tx, from_root) = mpsc::channel::<Reply>();
        let root_tx = Mutex::new(root_tx);
        let thread = std::thread::Builder::new()
            .name("towerrec-ranks".into())
            .spawn(move || {
                run_ranks(topology, threads_per_rank, |comm: Comm| {
                    let r = comm.rank();
                    let rx = receivers.lock().expect("receivers")[r]
                        .take()
                        .expect("each rank takes its receiver once");
                    let tx = (r == 0).then(|| root_tx.lock().expect("root").clone());
                    rank_loop(&cfg, &ckpt, &schema, &plan, comm, rx, tx)
                })
                .map(|_| ())
                .map_err(|e| e.to_string())
            })
            .map_err(|e| Error::Server(format!("starting the ranks: {e}")))?;
        let mut scorer = Self {
            to_ranks: senders,
            from_root,
            thread: Some(thread),
            total: Arc::new(Mutex::new((0, BatchBytes::default()))),
        };
        // Rank 0 says it is ready with an empty reply; a failed start ends the thread.
        match scorer.from_root.recv() {
            Ok(Ok(_)) => Ok(scorer),
            Ok(Err(e)) => Err(Error::Server(e)),
            Err(_) => Err(Error::Server(scorer.join_error())),
        }
    }

    /// The error the ranks' thread ended with.
    fn join_error(&mut self) -> String {
        self.to_ranks.clear();
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(Err(e))) => e,
            Some(Err(_)) => "a rank panicked".into(),
            _ => "the ranks stopped".into(),
        }
    }
}

impl Scorer for ShardedScorer {
    fn score(&mut self, batch: &Batch) -> std::result::Result<Vec<f32>, String> {
        let shared = Arc::new(batch.clone());
        for tx in &self.to_ranks {
            if tx.send(shared.clone()).is_err() {
                return Err(self.join_error());
            }
        }
        match self.from_root.recv() {
            Ok(Ok((logits, bytes))) => {
                metrics::histogram!(BATCH_LOOKUP_BYTES, "link" => "intra_host")
                    .record(bytes.lookup_intra as f64);
                metrics::histogram!(BATCH_LOOKUP_BYTES, "link" => "cross_host")
                    .record(bytes.lookup_cross as f64);
                metrics::counter!(BATCH_BYTES, "link" => "intra_host", "what" => "lookup")
                    .increment(bytes.lookup_intra);
                metrics::counter!(BATCH_BYTES, "link" => "cross_host", "what" => "lookup")
                    .increment(bytes.lookup_cross);
                metrics::counter!(BATCH_BYTES, "link" => "intra_host", "what" => "gather")
                    .increment(bytes.gather_intra);
                metrics::counter!(BATCH_BYTES, "link" => "cross_host", "what" => "gather")
                    .increment(bytes.gather_cross);
                if let Ok(mut t) = self.total.lock() {
                    t.0 += 1;
                    t.1.lookup_intra += bytes.lookup_intra;
                    t.1.lookup_cross += bytes.lookup_cross;
                    t.1.gather_intra += bytes.gather_intra;
                    t.1.gather_cross += bytes.gather_cross;
                }
                Ok(logits)
            }
            Ok(Err(e)) => Err(e),
            Err(_) => Err(self.join_error()),
        }
    }
}

impl Drop for ShardedScorer {
    fn drop(&mut self) {
        // Closing the channels ends every rank's loop.
        self.to_ranks.clear();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One rank: build, load, then score each batch's slice until the channel closes.
fn rank_loop(
    cfg: &Config,
    ckpt: &Checkpoint,
    schema: &Schema,
    plan: &Plan,
    comm: Comm,
    rx: Receiver<Arc<Batch>>,
    tx: Option<Sender<Reply>>,
) -> towerrec_train::Result<()> {
    let (r, world) = (comm.rank(), comm.size());
    let recorded = ckpt.towers()?;
    let mut model = build_rank_model(cfg, schema, comm, plan, recorded.as_deref())?;
    ckpt.check_towers(&mut model)?;
    ckpt.apply(&mut model)?;
    if let Some(tx) = &tx {
        let _ = tx.send(Ok((Vec::new(), BatchBytes::default())));
    }
    let mut logits = Vec::new();
    while let Ok(batch) = rx.recv() {
        let comm = model.comm().expect("a sharded model has a communicator");
        let before = comm.traffic();
        let mine = rank_slice(&batch, r, world);
        model.forward(&mine, &mut logits)?;
        let comm = model.comm().expect("a sharded model has a communicator");
        let mid = comm.traffic();
        let (all, _) = comm.all_gather(&logits, Phase::Control)?;
        let after = comm.traffic();
        let lookup = mid.since(&before);
        let gather = after.since(&mid);
        let mut counts = [0u64; 4];
        for p in Phase::ALL.into_iter().filter(|&p| p != Phase::Control) {
            counts[0] += lookup.phase(p).intra_host;
            counts[1] += lookup.phase(p).cross_host;
        }
        counts[2] = gather.total().intra_host;
        counts[3] = gather.total().cross_host;
        // Every rank's bytes together (the sum itself is not counted).
        comm.all_reduce(&mut counts, Phase::Control)?;
        if let Some(tx) = &tx {
            let bytes = BatchBytes {
                lookup_intra: counts[0],
                lookup_cross: counts[1],
                gather_intra: counts[2],
                gather_cross: counts[3],
            };
            if tx.send(Ok((all, bytes))).is_err() {
                break;
            }
        }
    }
    Ok(())
}
