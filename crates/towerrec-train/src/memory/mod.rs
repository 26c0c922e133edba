//! What a run will hold in memory, counted from its config and plan before anything is
//! allocated: a request too large for the machine is then an error naming what and how
//! much instead of an abort (or the kernel's OOM killer) halfway through, and a run that
//! fits is not refused.
//!
//! The count follows what the code allocates, per process (each term's doc names where):
//! - the process itself ([`PROCESS_BYTES`], measured on a tiny run; with MPI, the
//!   library's too), and a GEMM packing slab the size of the L2 cache for every thread
//!   that multiplies;
//! - the embedding tables and their optimizer state, each buffer as the allocator maps
//!   it (from 2 MiB up, in whole 2 MiB pages);
//! - per rank: the dense weights, gradients, optimizer state and gradient-sync buffers;
//!   the layers' activation buffers, which grow to the largest slice of a batch the
//!   rank trains or scores and stay, and what the largest GEMM packs; the sharded
//!   tables' exchange buffers; the batches read ahead;
//! - two passing peaks: an evaluation (the scoring pipeline's two groups of feature
//!   rows, its batches in flight, every sample's score and label) and a checkpoint (the
//!   tables gathered whole on rank 0, their bytes and the serialized file, and the same
//!   for the dense parameters and optimizer state). They never run at once, but the
//!   allocator may still hold one's freed memory while the other runs, so both count.
//!
//! Where the ranks' timing decides what overlaps, the count takes the larger. The count
//! is meant to sit at or a little above the peak resident memory: scripts/memory-check.py
//! compares the two on every config of examples/ and bench/ (docs/data/memory-estimate-*.txt).
//! Sizes are in bytes, in `u128` so that no config can overflow them.

use crate::config::Config;
use crate::error::{Error, Result};
use towerrec_data::{DataConfig, Schema};
use towerrec_plan::Plan;

/// The process before it holds any model or data: code, libraries, thread stacks and
/// the allocator's own state. Measured as the peak RSS of a tiny run (the quickstart cut
/// to one 10-row table, one dense feature and batches of 4; scripts/memory-check.py's
/// "tiny" rows): about 7.7 MB on one rank and 8.3 MB on 2 × 2 in-process ranks, 9.0 and
/// 10.0 MB with a build that links MPI; rounded up.
pub const PROCESS_BYTES: u128 = 10 << 20;
/// What a process of an MPI run holds beyond [`PROCESS_BYTES`]: the MPI library's state
/// and its shared-memory transport. The same tiny run under `mpirun -np 4` (OpenMPI
/// 4.1.4) peaks at 20.0 to 20.2 MB a process, 10.2 MB above the run in-process.
pub const MPI_PROCESS_BYTES: u128 = 10 << 20;

mod parts;
pub(crate) use parts::dense_bytes;
use parts::*;

/// Where a process's ranks and tables are.
#[derive(Debug, Clone, Copy)]
pub enum Placement<'a> {
    /// One process, one rank, every table whole (no plan).
    Single,
    /// The ranks `ranks` of a cluster whose tables are spread by `plan`.
    Cluster { plan: &'a Plan, ranks: &'a [usize] },
}

/// What one process of a run needs, by kind, in bytes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MemoryNeed {
    /// The process itself ([`PROCESS_BYTES`], and [`MPI_PROCESS_BYTES`] for a process
    /// of an MPI run) and its threads' GEMM packing slabs.
    pub process: u128,
    /// Embedding tables and their optimizer state (this process's share), with
    /// row-partitioned tables' route caches and stores' bookkeeping.
    pub tables: u128,
    /// Dense weights, gradients, optimizer state and gradient-sync buffers, every rank
    /// in the process.
    pub dense: u128,
    /// Activation buffers and their gradients, every rank in the process.
    pub activations: u128,
    /// Batches read ahead and the sharded tables' exchange buffers, every rank.
    pub data: u128,
    /// What an evaluation holds while it runs.
    pub evaluation: u128,
    /// What writing a checkpoint holds while it runs (and moving rows to a new plan).
    pub checkpoint: u128,
}

impl MemoryNeed {
    /// The whole: what the run holds throughout, an evaluation and a checkpoint. The
    /// two never run at once, but the allocator may still hold one's freed memory while
    /// the other runs (glibc keeps freed blocks under 2 MiB), so both count.
    pub fn total(&self) -> u128 {
        self.process
            .saturating_add(self.tables)
            .saturating_add(self.dense)
            .saturating_add(self.activations)
            .saturating_add(self.data)
            .saturating_add(self.evaluation)
            .saturating_add(self.checkpoint)
    }

    /// The need of a process of a run of `cfg` placed as `placement` says;
    /// `extra_table_bytes` (row-partitioned tables' addressing) adds to the tables.
    /// The process's compute threads are those of rayon's pool it is called from (and,
    /// for an in-process cluster, each rank's pool of its share of them).
    pub fn of_run(
        cfg: &Config,
        schema: &Schema,
        placement: Placement<'_>,
        extra_table_bytes: u128,
    ) -> Self {
        let specs = crate::specs::table_specs(cfg, schema);
        let opt = cfg.optimizer.sparse;
        let shape = dense_shape(&cfg.model, schema);
        let (world, ranks): (usize, &[usize]) = match placement {
            Placement::Single => (1, &[0]),
            Placement::Cluster { plan, ranks } => (plan.topology.world_size().max(1), ranks),
        };
        let here = ranks.len() as u128;
        let world = world as u128;
        let eval_samples = eval_samples(cfg, schema);
        let batch = cfg.train.batch_size as u128;
        // A batch is no larger than the evaluation part.
        let eval_batch = (cfg.eval_batch_size() as u128).min(eval_samples.max(1));
        // A rank's slices of a training and of a scoring batch; the widest global batch
        // (the sharded tables pool every sample's bags) and its slice.
        let train_slice = batch.div_ceil(world);
        let eval_slice = eval_batch.div_ceil(world);
        let slice = train_slice.max(eval_slice);
        let (widest, widest_slice) = if eval_batch > batch {
            (eval_batch, eval_slice)
        } else {
            (batch, train_slice)
        };

        // Every table whole, as a checkpoint holds them (and one process without a plan).
        let whole: Vec<Vec<u128>> = specs
            .iter()
            .map(|s| bag_buffers(s.rows, s.dim, opt))
            .collect();
        let whole_mapped = whole
            .iter()
            .flatten()
            .fold(0u128, |a, &b| a.saturating_add(mapped(b)));
        let whole_raw = whole
            .iter()
            .flatten()
            .fold(0u128, |a, &b| a.saturating_add(b));

        let ids = ids_per_sample(&specs);
        let sample = (1 + schema.dense.len() as u128) * F32
            + (schema.sparse.len() as u128) * U64
            + (ids.ceil() as u128) * U64;
        let synthetic = matches!(&cfg.data, DataConfig::Synthetic(s) if s.eval_path.is_none());
        let params = shape.params;
        let states = dense_states(&cfg.optimizer);
        // Weights, gradients and optimizer state (`Linear`, `DenseOptimizer`).
        let mut dense_per_rank = params.saturating_mul(F32 * (2 + states));
        if world > 1 {
            // `model::GradSync`: the flat gradient, a reduce-scatter's arrivals (as
            // many) and this rank's chunk (at most half: two ranks or more); with steps
            // in halves, the first half's gradients.
            let halves = if cfg.cluster.overlap_halves { 2 } else { 0 };
            dense_per_rank =
                dense_per_rank.saturating_add(params.saturating_mul(F32 * (5 + halves)) / 2);
        }
        // The model's rows at the training slice (scoring keeps its own), the layers'
        // outputs at the larger slice, the backward's buffers at the training slice.
        let activations = buffers(&shape.rows, train_slice)
            .saturating_add(buffers(&shape.layers, slice))
            .saturating_add(buffers(&shape.backward, train_slice))
            .saturating_add(gemm_packing(&shape.products[0], slice, train_slice))
            .saturating_add(gemm_packing(&shape.products[1], slice, train_slice));
        // Batches read ahead; a reader of files cuts a rank's slice from a global batch.
        let mut read_ahead = TRAIN_BATCHES_IN_FLIGHT
            .saturating_mul(train_slice)
            .saturating_mul(sample);
        if !synthetic && world > 1 {
            read_ahead = read_ahead.saturating_add(batch.saturating_mul(sample));
        }
        // GEMM's packing slab, one per thread that multiplies (`gemm`'s thread-local
        // `L2_SLAB`, the size of a core's L2 cache): the calling thread, rayon's pool,
        // and an in-process cluster's pool per rank.
        let pool = rayon::current_num_threads() as u128;
        let rank_pools = match placement {
            Placement::Cluster { .. } if here == world => here * (pool / world).max(1),
            _ => 0,
        };
        let slabs = mapped(l2_cache_bytes()).saturating_mul(1 + pool + rank_pools);
        // An evaluation: the scoring pipeline's two groups of feature rows
        // (`forward::PipelinedForward`), its queued batches and those in flight, the
        // scores.
        let group = (crate::forward::default_group(cfg.eval_batch_size()) as u128).max(1);
        let mut evaluation = buffers(&shape.group, eval_slice)
            .saturating_mul(group.saturating_mul(2))
            .saturating_add(
                group
                    .saturating_add(EVAL_BATCHES_IN_FLIGHT)
                    .saturating_mul(eval_slice)
                    .saturating_mul(sample),
            )
            .saturating_add(eval_samples.saturating_mul(SCORE_BYTES));
        if !synthetic && world > 1 {
            evaluation = evaluation.saturating_add(eval_batch.saturating_mul(sample));
        }
        // `checkpoint::save` of whole tables: the dense tensors' bytes (weights and
        // optimizer state), every table's weights and state copied whole, each turned into
        // its bytes in turn (a buffer like its source), then one file of all the bytes.
        let dense_ckpt = params.saturating_mul(F32 * (1 + states));
        let write = dense_ckpt
            .saturating_add(whole_mapped)
            .saturating_add(mapped(whole_raw.saturating_add(dense_ckpt)));

        let (tables, exchange, checkpoint) = match placement {
            Placement::Single => {
                // `EmbeddingBag::backward`'s keys and their sorted copy, per id.
                let scratch = (batch as f64 * ids).ceil() as u128 * U64 * 2;
                (whole_mapped, scratch, write)
            }
            Placement::Cluster { plan, .. } => {
                let all: Vec<RankTables> = (0..plan.topology.world_size())
                    .map(|r| rank_tables(plan, &specs, opt, r))
                    .collect();
                let columns = specs
                    .iter()
                    .fold(0u128, |a, s| a.saturating_add(s.dim as u128));
                let mine: Vec<RankTables> = ranks
                    .iter()
                    .map(|&r| all.get(r).cloned().unwrap_or_default())
                    .collect();
                let tables = mine.iter().fold(0u128, |a, t| a.saturating_add(t.mapped));
                let exchange = mine.iter().fold(0u128, |a, t| {
                    a.saturating_add(exchange_bytes(
                        t,
                        columns,
                        (widest, widest_slice),
                        (batch, train_slice),
                        ids,
                    ))
                });
                let sent_raw = all.iter().fold(0u128, |a, t| a.saturating_add(t.sent));
                let per_pair = towerrec_comm::ROUND_BYTES as u128 / world;
                let sends = mine
                    .iter()
                    .fold(0u128, |a, t| a.saturating_add(mapped(t.sent)));
                let pieces = mine
                    .iter()
                    .fold(0u128, |a, t| a.saturating_add(t.sent.min(per_pair)));
                let mut checkpoint = if ranks.contains(&0) {
                    // `sharded::whole`: every rank's shards sent to rank 0 in rounds
                    // (`Comm::all_to_all_v_in_rounds`: each sender's piece, the round
                    // rank 0 receives, the whole it places them in), then every table
                    // whole; then `checkpoint::save` as one process would.
                    let received = sent_raw.min(towerrec_comm::ROUND_BYTES as u128);
                    let gather = sends
                        .saturating_add(mapped(sent_raw))
                        .saturating_add(whole_mapped.max(pieces.saturating_add(received)));
                    gather.max(write)
                } else {
                    sends.saturating_add(pieces)
                };
                let moves = cfg.cluster.drift.as_ref().is_some_and(|d| d.move_rows);
                if moves {
                    // Rows moved to a fresh plan: every rank gathers every table whole.
                    let respread = sends.saturating_add(
                        here.saturating_mul(mapped(sent_raw).saturating_add(whole_mapped)),
                    );
                    checkpoint = checkpoint.max(respread);
                }
                (tables, exchange, checkpoint)
            }
        };
        // A cluster's process that runs fewer than all its ranks is one of MPI's.
        let mpi = if here < world { MPI_PROCESS_BYTES } else { 0 };
        Self {
            process: PROCESS_BYTES.saturating_add(mpi).saturating_add(slabs),
            tables: tables.saturating_add(extra_table_bytes),
            dense: dense_per_rank.saturating_mul(here),
            activations: activations.saturating_mul(here),
            data: read_ahead.saturating_mul(here).saturating_add(exchange),
            evaluation: evaluation.saturating_mul(here),
            checkpoint,
        }
    }

    /// The parts, for messages: "embedding tables 0.03 GiB, dense layers …".
    fn parts(&self, decimals: usize) -> String {
        let g = |b: u128| format!("{:.*} GiB", decimals, b as f64 / GIB);
        format!(
            "embedding tables {}, dense layers {}, activations {}, data buffers {}, \
             evaluation {}, checkpoint {}, the process {}",
            g(self.tables),
            g(self.dense),
            g(self.activations),
            g(self.data),
            g(self.evaluation),
            g(self.checkpoint),
            g(self.process)
        )
    }

    /// One line for a run's start: "memory estimate: 0.123 GiB for the run (…)".
    pub fn describe(&self, whose: &str) -> String {
        format!(
            "memory estimate: {:.3} GiB for {whose} ({})",
            self.total() as f64 / GIB,
            self.parts(3)
        )
    }

    /// Refuses the run where it needs more than the machine has available now. Passes
    /// where the available memory is unknown.
    pub fn check(&self, whose: &str) -> Result<()> {
        check_fits(self.total(), || format!("{whose} ({})", self.parts(2)))
    }
}

const GIB: f64 = (1u64 << 30) as f64;

/// Refuses `need` bytes (`what()` names them) where they exceed the memory the machine
/// has available now. Passes where the available memory is unknown.
pub(crate) fn check_fits(need: u128, what: impl FnOnce() -> String) -> Result<()> {
    match towerrec_core::probe::available_memory_bytes() {
        Some(available) if need > available as u128 => Err(Error::Memory {
            what: what(),
            need,
            available,
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quickstart(sets: &[&str]) -> (Config, Schema) {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        let cfg = Config::quickstart(&sets).unwrap();
        let schema = towerrec_data::schema(&cfg.data, &cfg.base_dir).unwrap();
        (cfg, schema)
    }

    #[test]
    fn dense_count_matches_the_built_model() {
        for sets in [
            &[][..],
            &[
                "model.kind=\"dcn\"",
                "model.cross_layers=2",
                "model.bottom_mlp=[]",
            ],
            &[
                "model.kind=\"dcn\"",
                "model.cross_layers=3",
                "model.cross_rank=4",
                "model.bottom_mlp=[]",
            ],
            &[
                "model.bottom_mlp=[64, 8]",
                "model.towers={ module = \"dlrm\", count = 2, d = 8, c = 1, p = 0 }",
            ],
            &[
                "model.kind=\"dcn\"",
                "model.bottom_mlp=[]",
                "model.cross_layers=2",
                "model.towers={ module = \"dcn\", count = 2, d = 8, cross_layers = 1 }",
            ],
            // Any feature mix: DLRM and DCN without dense features, flat and DMT;
            // dense-only models.
            &["data.num_dense=0", "model.bottom_mlp=[]"],
            &[
                "data.num_dense=0",
                "model.bottom_mlp=[]",
                "model.towers={ module = \"dlrm\", count = 2, d = 8, c = 1, p = 1 }",
            ],
            &[
                "data.num_dense=0",
                "model.kind=\"dcn\"",
                "model.cross_layers=2",
                "model.bottom_mlp=[]",
                "model.towers={ module = \"dcn\", count = 2, d = 8, cross_layers = 1 }",
            ],
            &[
                "data.tables=[]",
                "cluster.hosts=1",
                "cluster.ranks_per_host=1",
            ],
            &[
                "data.tables=[]",
                "model.kind=\"dcn\"",
                "model.cross_layers=2",
                "model.bottom_mlp=[]",
            ],
        ] {
            let (cfg, schema) = quickstart(sets);
            let mut model = crate::model::Model::for_run(&cfg, &schema, 0, None).unwrap();
            let dense: usize = model.dense_params().iter().map(|p| p.value.len()).sum();
            assert_eq!(
                dense_shape(&cfg.model, &schema).params,
                dense as u128,
                "{sets:?}"
            );
        }
    }

    #[test]
    fn huge_layers_count_without_overflow() {
        let (cfg, schema) = quickstart(&["model.bottom_mlp=[2147483648, 16]"]);
        let plan = crate::cluster::resolve_plan(
            &cfg,
            &schema,
            towerrec_comm::Topology::new(2, 2).unwrap(),
            None,
            None,
        )
        .unwrap();
        let ranks = [0, 1, 2, 3];
        let need = MemoryNeed::of_run(
            &cfg,
            &schema,
            Placement::Cluster {
                plan: &plan,
                ranks: &ranks,
            },
            0,
        );
        // 13 × 2^31 weights of the first layer alone on each of 4 ranks, with gradients
        // and Adam's two moments.
        assert!(need.dense >= 4 * 13 * (1u128 << 31) * 4 * 4, "{need:?}");
        let (cfg, schema) = quickstart(&["model.top_mlp=[9223372036854775807, 1]"]);
        let need = MemoryNeed::of_run(&cfg, &schema, Placement::Single, 0);
        assert!(need.total() > i64::MAX as u128);
    }

    #[test]
    fn a_wide_top_layer_is_counted_once_per_sample_of_a_batch_slice() {
        // Before: about 19 GiB for `top_mlp = [100000, 1]` on the quickstart, whose run
        // peaks at 2.3 GB on one rank: every layer's output was counted for two scoring
        // groups of 8192 samples, three times over. A layer's output is held for one
        // batch slice (the scoring pipeline keeps only the feature rows of its groups).
        let (cfg, schema) = quickstart(&["model.top_mlp=[100000, 1]"]);
        let need = MemoryNeed::of_run(&cfg, &schema, Placement::Single, 0);
        let params = dense_shape(&cfg.model, &schema).params;
        // 367 interaction outputs into 100,000, into 1; the bottom MLP 13-64-16.
        let top = 367 * 100_000 + 100_000 + 100_001;
        assert_eq!(params, top + 13 * 64 + 64 + 64 * 16 + 16);
        // Counted here from the model alone: weights, gradients and Adam's two moments;
        // a checkpoint's bytes of weights and moments and the file of them; a packed
        // copy of the wide layer's weights; its output for a scoring slice of 1024 and
        // its dz and two gradient buffers for a training slice of 256.
        let wide = params * 4 * (4 + 6) + top * 4 + 100_000 * 4 * (1024 + 3 * 256);
        let total = need.total();
        assert!(total >= wide, "{total} < {wide}: {need:?}");
        assert!(
            total <= wide + wide / 2,
            "{:.2} GiB counted for a model whose wide layer needs {:.2} GiB: {need:?}",
            total as f64 / GIB,
            wide as f64 / GIB
        );
    }
}
