//! One inference query or training step, phase by phase: the scale-in paper's
//! performance model (§V-B, the appendix's Algorithms 1 and 2) extended with the DMT
//! paper's topology-aware embedding exchange (SPTT, §3.1) and Tower Modules (§3.2).
//!
//! Every chip holds `b` samples of the batch. Phases are timed from the FLOPs and bytes
//! of [`Workload`] on the chip of [`Hardware`]; the step is their sum, except where the
//! paper overlaps them (§V-B): the bottom MLP runs under the index all-to-all, the
//! embedding lookups under the embedding exchange (inference: "overlapping memory
//! activity with communications"), and the dense all-reduce under the bottom MLP's
//! backward pass (training: "pipelining the collective communications with
//! backpropagation"). Looked-up rows stay buffered on chip, so the sparse update only
//! writes them, and dense weights live on chip (unless the hardware says otherwise).
//!
//! A training step may run as towerrec's runtime runs it by default, in micro-batches
//! ([`simulate_parts`]; docs/OPER.md, "A step in halves"; beyond both papers):
//! the embedding exchanges in `P = 2` parts of each chip's samples, the dense work
//! (interaction, top MLP, loss and their backward) of one part beside the other's
//! exchange. In order: the id exchange beside the bottom MLP, the lookups and part 0's
//! output exchange; part 1's output exchange beside part 0's dense work; part 0's
//! gradient exchange beside part 1's dense work; part 1's gradient exchange, the
//! sparse update, the bottom MLP's backward and the dense all-reduce. Each part's
//! collective moves half the bytes and pays its own latency. With towers the parts are
//! SPTT's chunks (the first half of the chunks carries the first half of every slice):
//! part 0's dense work runs beside the last chunk's step f, part 1's beside the first
//! chunk's step f back. Only exchanges that split do: the flat ones (whole or row-wise
//! tables over all chips), and towers whose per-feature maps run before step d
//! ([`TowerCosts::early_maps`]); others run whole steps, as the runtime does.
//! [`Step::overlaps`] says what ran beside what.

use crate::collective::{Collective, Group, LevelShares};
use crate::error::{Error, Result};
use crate::hardware::Hardware;
use crate::towers::TowerCosts;
use crate::workload::Workload;

/// Inference (forward only) or a training step (forward, backward, updates).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Inference,
    Training,
}

/// How the tables are spread: the paper's two extremes (§V-A).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sharding {
    /// Every table whole on one chip (table- or column-wise): pooled vectors are
    /// exchanged.
    Unsharded,
    /// Every table spread row-wise over all chips ("full sharding"): unpooled partial
    /// sums are reduce-scattered, pooled gradients all-gathered.
    Sharded,
}

/// How pooled embeddings travel back to the samples' owners.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Exchange {
    /// One global all-to-all (or reduce-scatter) over every chip.
    Flat,
    /// SPTT (DMT §3.1) over towers: peer permute, an all-to-all within each tower
    /// group, shuffle, and concurrent all-to-alls among each rank's peers; with Tower
    /// Modules compressing what crosses hosts (DMT §3.2), or pass-through towers (SPTT
    /// alone). [`Towers::costs`](crate::Towers::costs) gives the figures.
    Towers(TowerCosts),
}

impl Exchange {
    /// Whether a training step can run this exchange in parts (the module docs): the
    /// flat one, and towers whose maps run before step d.
    pub fn splits(&self) -> bool {
        match self {
            Exchange::Flat => true,
            Exchange::Towers(t) => t.early_maps,
        }
    }
}

/// What to simulate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scenario {
    pub mode: Mode,
    pub sharding: Sharding,
    pub exchange: Exchange,
}

/// The resource a phase occupies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    Compute,
    Memory,
    Network,
    Other,
}

/// One phase of the step.
#[derive(Debug, Clone, PartialEq)]
pub struct Phase {
    pub name: &'static str,
    pub resource: Resource,
    /// Seconds the phase takes on its own.
    pub seconds: f64,
    /// Seconds it adds to the step once overlaps are taken out.
    pub exposed: f64,
}

/// A simulated step.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub phases: Vec<Phase>,
    /// Seconds per query (inference) or training step.
    pub seconds: f64,
    pub chips: usize,
    /// Samples per step over the whole system.
    pub global_batch: f64,
    /// Parts the step's exchanges ran in (1: a whole step; see the module docs).
    pub parts: usize,
    /// What the micro-batch schedule ran side by side (none in a whole step).
    pub overlaps: Vec<Overlap>,
}

/// A part of an embedding exchange and a part's dense work run side by side in a step
/// of several parts: the shorter is hidden under the longer.
#[derive(Debug, Clone, PartialEq)]
pub struct Overlap {
    /// The exchange phase (`embedding_exchange` or `embedding_grad_exchange`).
    pub exchange: &'static str,
    /// Which part of it: `part 1`, `part 0`; with towers, `the last chunk's step f`
    /// (forward) or `the first chunk's step f` (backward).
    pub exchange_part: &'static str,
    pub exchange_seconds: f64,
    /// The part whose dense work (interaction, top MLP and their backward) runs beside it.
    pub dense_part: usize,
    pub dense_seconds: f64,
    /// Seconds taken off the step: the shorter of the two.
    pub hidden: f64,
}

/// The most parts a step's exchanges run in: the runtime runs whole steps or halves.
pub const MAX_PARTS: usize = 2;

impl Step {
    /// Queries (inference) or training steps per second: the paper's QPS.
    pub fn qps(&self) -> f64 {
        1.0 / self.seconds
    }

    /// Samples per second over the whole system.
    pub fn samples_per_s(&self) -> f64 {
        self.global_batch / self.seconds
    }

    /// Share of the step the memory system is busy with embedding rows (the paper's
    /// "Mem. Util.").
    pub fn memory_utilization(&self) -> f64 {
        self.raw(|p| p.name == "lookup" || p.name == "sparse_update") / self.seconds
    }

    /// Share of the step spent in the dense all-reduce and dense update, as exposed
    /// (the paper's "Allred. %Time").
    pub fn allreduce_share(&self) -> f64 {
        self.exposed(|p| p.name == "dense_allreduce" || p.name == "dense_update") / self.seconds
    }

    /// Exposed seconds of the phases `pick` selects.
    pub fn exposed(&self, pick: impl Fn(&Phase) -> bool) -> f64 {
        self.phases
            .iter()
            .filter(|p| pick(p))
            .map(|p| p.exposed)
            .sum::<f64>()
            // An empty f64 sum is −0.0, which would print as "-0.0%".
            + 0.0
    }

    fn raw(&self, pick: impl Fn(&Phase) -> bool) -> f64 {
        self.phases
            .iter()
            .filter(|p| pick(p))
            .map(|p| p.seconds)
            .sum::<f64>()
            + 0.0
    }

    /// A phase by name.
    pub fn phase(&self, name: &str) -> Option<&Phase> {
        self.phases.iter().find(|p| p.name == name)
    }
}

/// Builds the phase list: phases in order, with the pairs that overlap.
struct Timeline {
    phases: Vec<Phase>,
}

impl Timeline {
    fn push(&mut self, name: &'static str, resource: Resource, seconds: f64) {
        self.phases.push(Phase {
            name,
            resource,
            seconds,
            exposed: seconds,
        });
    }

    /// `a` and `b` run side by side, a fraction `overlap` of the shorter hidden.
    fn overlapped(&mut self, a: Phase, b: Phase, overlap: f64) {
        let hidden = overlap * a.seconds.min(b.seconds);
        let (mut a, mut b) = (a, b);
        if a.seconds <= b.seconds {
            a.exposed = a.seconds - hidden;
        } else {
            b.exposed = b.seconds - hidden;
        }
        self.phases.push(a);
        self.phases.push(b);
    }
}

fn phase(name: &'static str, resource: Resource, seconds: f64) -> Phase {
    Phase {
        name,
        resource,
        seconds,
        exposed: seconds,
    }
}

/// One rank's share of the embedding work against an even spread (1 = even): what a
/// particular sharding plan gives it. [`simulate`] assumes every chip does the same;
/// [`simulate_rank`] prices a rank of an uneven plan, whose step the slowest rank sets.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RankLoad {
    /// Rows the rank looks up (and updates), over an even spread's.
    pub lookups: f64,
    /// Bytes of pooled embeddings the rank exchanges (the larger of sent and received)
    /// within its host and across hosts, each over an even spread's; the gradients'
    /// exchange scales alike.
    pub exchange: LevelShares,
}

impl RankLoad {
    pub const EVEN: RankLoad = RankLoad {
        lookups: 1.0,
        exchange: LevelShares::EVEN,
    };
}

/// Simulates one step of `workload` on `hw`, every chip doing the same share.
pub fn simulate(workload: &Workload, hw: &Hardware, scenario: Scenario) -> Result<Step> {
    simulate_rank(workload, hw, scenario, RankLoad::EVEN)
}

/// Simulates one step of `workload` on `hw` as a rank with `load` sees it.
pub fn simulate_rank(
    workload: &Workload,
    hw: &Hardware,
    scenario: Scenario,
    load: RankLoad,
) -> Result<Step> {
    simulate_parts(workload, hw, scenario, load, 1)
}

/// [`simulate_rank`] with a training step's exchanges in `parts` micro-batches (1 or
/// [`MAX_PARTS`]; see the module docs) where the exchange splits; inference and
/// exchanges that do not split run whole ([`Step::parts`] says which).
pub fn simulate_parts(
    workload: &Workload,
    hw: &Hardware,
    scenario: Scenario,
    load: RankLoad,
    parts: usize,
) -> Result<Step> {
    if !(1..=MAX_PARTS).contains(&parts) {
        return Err(Error::invalid(
            "parts",
            format!("{parts}: a step runs whole (1) or in halves (2), as the runtime runs it"),
        ));
    }
    let share_ok = |x: f64| x.is_finite() && x >= 0.0;
    if ![load.lookups, load.exchange.intra, load.exchange.cross]
        .into_iter()
        .all(share_ok)
    {
        return Err(Error::invalid(
            "rank load",
            format!("{load:?}: shares must be finite numbers ≥ 0"),
        ));
    }
    workload.validate()?;
    hw.validate()?;
    let chips = hw.chips();
    let world = Group {
        hosts: hw.hosts,
        per_host: hw.chips_per_host,
    };
    let net = &hw.network;
    let mem = &hw.memory;
    let b = workload.batch_per_chip(chips);
    let row = workload.row_bytes() as f64;
    let towers = match scenario.exchange {
        Exchange::Towers(t) => {
            let ok = t.groups >= 1
                && t.hosts_per_group >= 1
                && t.groups * t.hosts_per_group == hw.hosts
                && [
                    t.busiest.intra_values,
                    t.busiest.peer_values,
                    t.busiest.module_flops,
                    t.busiest.module_params,
                    t.busiest.lookups,
                    t.module_params,
                ]
                .iter()
                .all(|x| x.is_finite() && *x >= 0.0);
            if !ok {
                return Err(Error::invalid(
                    "towers",
                    format!(
                        "{} groups of {} hosts do not fit {} hosts, or a figure is not a finite number ≥ 0",
                        t.groups, t.hosts_per_group, hw.hosts
                    ),
                ));
            }
            Some(t)
        }
        Exchange::Flat => None,
    };
    if scenario.exchange != Exchange::Flat && scenario.sharding == Sharding::Sharded {
        return Err(Error::invalid(
            "scenario",
            "SPTT and DMT are modelled for unsharded (table- or column-wise) tables only",
        ));
    }
    let dense = towers.map_or_else(|| workload.dense_counts(), |t| t.dense);
    // A rank of the busiest tower group looks up and updates its group's share.
    let lookup_share = match towers {
        Some(t) if workload.lookups_per_sample() > 0.0 => {
            t.busiest.lookups / workload.lookups_per_sample()
        }
        _ => 1.0,
    } * load.lookups;
    // The dense layers' products in the workload's precision (checked here, once).
    hw.dense_time(0.0, workload.dense_bf16)?;
    let compute = |flops_per_sample: f64| {
        hw.dense_time(flops_per_sample * b, workload.dense_bf16)
            .unwrap_or(f64::NAN)
    };
    // Pooling sums rows in f32 whatever the dense layers' precision.
    let f32_compute = |flops_per_sample: f64| hw.compute_time(flops_per_sample * b);
    let training = scenario.mode == Mode::Training;

    let mut t = Timeline { phases: Vec::new() };
    // Each rank reads its own slice of the batch (towerrec's reader builds only that).
    if let (Some(ids), Some(costs)) = (&workload.synthetic, &hw.system.synthetic_reader) {
        t.push("data_read", Resource::Compute, costs.seconds(ids, b));
    }
    // Forward (Algorithm 1).
    let index = net.flat(
        Collective::AllToAll,
        workload.index_bytes_per_sample() * b,
        world,
    );
    t.overlapped(
        phase("index_all_to_all", Resource::Network, index),
        phase("bottom_mlp", Resource::Compute, compute(dense.bottom_flops)),
        1.0,
    );
    let rows = workload.lookups_per_sample() * b * lookup_share;
    // Each chip pools the bags of its tables for the whole batch: b bags per table.
    let bags = workload.num_tables() as f64 * b * lookup_share;
    let lookup = rows * row / mem.random_read(row) + bags * hw.system.lookup_overhead_ns * 1e-9;
    let shares = load.exchange;
    // Towers are priced for an even spread; an uneven rank's larger share scales them.
    let tower_share = shares.intra.max(shares.cross);
    let parts = if training && scenario.exchange.splits() {
        parts
    } else {
        1
    };
    let split = parts > 1;
    // A flat collective of `bytes` for the whole step, or for one of two parts.
    let part = |bytes: f64| if split { bytes / 2.0 } else { bytes };
    let pooled = workload.pooled_bytes_per_sample() * b;
    let forward = match (scenario.exchange, scenario.sharding) {
        (Exchange::Flat, sharding) => {
            let one = match sharding {
                Sharding::Unsharded => {
                    net.flat_scaled(Collective::AllToAll, part(pooled), world, shares)
                }
                Sharding::Sharded => net.flat_scaled(
                    Collective::ReduceScatter,
                    part(workload.unpooled_bytes_per_sample() * b),
                    world,
                    shares,
                ),
            };
            Split::flat(one, split, "part 1")
        }
        (Exchange::Towers(tc), _) => {
            let maps = compute(tc.busiest.module_flops);
            tower_split(hw, workload, &tc, b, maps, split, Direction::Forward).scaled(tower_share)
        }
    };
    let mut lookup = phase("lookup", Resource::Memory, lookup);
    let mut exchange = phase("embedding_exchange", Resource::Network, forward.total());
    // The lookups run under the part of the exchange that runs alone.
    let hidden = hw.system.lookup_comm_overlap * lookup.seconds.min(forward.alone);
    if lookup.seconds <= forward.alone {
        lookup.exposed = lookup.seconds - hidden;
    } else {
        exchange.exposed = exchange.seconds - hidden;
    }
    t.phases.push(lookup);
    t.phases.push(exchange);
    let exchange_at = t.phases.len() - 1;
    t.push(
        "pooling",
        Resource::Compute,
        f32_compute(workload.pooling_flops() * lookup_share),
    );
    // A pipelined exchange ran its maps inside it.
    let unpipelined = |tc: &TowerCosts| tc.has_modules() && tc.chunks == 1 && !split;
    if let Some(tm) = towers.filter(unpipelined) {
        t.push(
            "tower_modules",
            Resource::Compute,
            compute(tm.busiest.module_flops),
        );
    }
    // A dot of short vectors runs at its own measured rate, not the GEMM's.
    let interaction = |flops: f64| match dense.dot_width {
        Some(width) => hw.interaction_time(flops * b, width),
        None => compute(flops),
    };
    let dense_at = t.phases.len();
    t.push(
        "interaction",
        Resource::Compute,
        interaction(dense.interaction_flops),
    );
    t.push("top_mlp", Resource::Compute, compute(dense.top_flops));

    let mut overlaps = Vec::new();
    if training {
        // Backward and updates (Algorithm 2).
        t.push(
            "top_mlp_backward",
            Resource::Compute,
            compute(2.0 * dense.top_flops) + interaction(2.0 * dense.interaction_flops),
        );
        let backward = match (scenario.exchange, scenario.sharding) {
            (Exchange::Flat, Sharding::Unsharded) => Split::flat(
                net.flat_scaled(Collective::AllToAll, part(pooled), world, shares),
                split,
                "part 0",
            ),
            (Exchange::Flat, Sharding::Sharded) => Split::flat(
                net.flat_scaled(
                    Collective::AllGather,
                    part(workload.pooled_bytes_per_sample() * workload.global_batch(chips)),
                    world,
                    shares,
                ),
                split,
                "part 0",
            ),
            (Exchange::Towers(tc), _) => {
                let maps = compute(2.0 * tc.busiest.module_flops);
                tower_split(hw, workload, &tc, b, maps, split, Direction::Backward)
                    .scaled(tower_share)
            }
        };
        t.push(
            "embedding_grad_exchange",
            Resource::Network,
            backward.total(),
        );
        if split {
            // Part 1's exchange forward beside part 0's dense work, part 0's gradient
            // exchange beside part 1's; each part's dense work is half the step's.
            let dense_phases = dense_at..dense_at + 3;
            let stages = [
                (exchange_at, &forward, 0, "embedding_exchange"),
                (t.phases.len() - 1, &backward, 1, "embedding_grad_exchange"),
            ];
            for (at, ex, dense_part, name) in stages {
                let dense_seconds: f64 = t.phases[dense_phases.clone()]
                    .iter()
                    .map(|p| p.seconds / 2.0)
                    .sum();
                let hidden = dense_seconds.min(ex.beside);
                if dense_seconds <= ex.beside {
                    for p in &mut t.phases[dense_phases.clone()] {
                        p.exposed -= p.seconds / 2.0;
                    }
                } else {
                    t.phases[at].exposed -= ex.beside;
                }
                overlaps.push(Overlap {
                    exchange: name,
                    exchange_part: ex.part,
                    exchange_seconds: ex.beside,
                    dense_part,
                    dense_seconds,
                    hidden,
                });
            }
        }
        if let Some(tm) = towers.filter(TowerCosts::has_modules) {
            if tm.chunks == 1 && !split {
                t.push(
                    "tower_modules_backward",
                    Resource::Compute,
                    compute(2.0 * tm.busiest.module_flops),
                );
            }
            // A module's gradients are summed over its tower group only (DMT §3.2):
            // within a host, or hierarchically over the group's K hosts.
            let group = Group {
                hosts: tm.hosts_per_group,
                per_host: hw.chips_per_host,
            };
            t.push(
                "tower_sync",
                Resource::Network,
                net.hierarchical_all_reduce(
                    tm.busiest.module_params * workload.grad_bytes as f64,
                    group,
                ),
            );
        }
        let on_chip = hw.system.on_chip_buffers;
        let update_passes = if on_chip { 1.0 } else { 2.0 };
        // Each distinct row is written (read too without on-chip buffers) once.
        let distinct = workload.distinct_rows_per_step(workload.global_batch(chips)) / chips as f64
            * lookup_share;
        let update = distinct * row / mem.random_read(row);
        t.push(
            "sparse_update",
            Resource::Memory,
            update_passes * update
                + bags * hw.system.update_overhead_ns * 1e-9
                + f32_compute(workload.pooling_flops() * lookup_share),
        );
        let allreduce =
            net.hierarchical_all_reduce(dense.params * workload.grad_bytes as f64, world);
        t.overlapped(
            phase(
                "bottom_mlp_backward",
                Resource::Compute,
                compute(2.0 * dense.bottom_flops),
            ),
            phase("dense_allreduce", Resource::Network, allreduce),
            hw.system.allreduce_overlap,
        );
        if !on_chip {
            // Every rank holds (and updates) every module.
            let params = dense.params + towers.map_or(0.0, |t| t.module_params);
            let update_bytes =
                params * (2.0 * workload.param_bytes as f64 + workload.grad_bytes as f64);
            t.push(
                "dense_update",
                Resource::Memory,
                update_bytes / mem.stream(),
            );
        }
    }
    let wait = sync_waits(&t.phases, &hw.system);
    if wait > 0.0 {
        t.push("sync_wait", Resource::Other, wait);
    }
    if hw.system.step_overhead_us > 0.0 {
        t.push(
            "overhead",
            Resource::Other,
            hw.system.step_overhead_us * 1e-6,
        );
    }
    let seconds: f64 = t.phases.iter().map(|p| p.exposed).sum();
    // Figures each finite and positive can still be too extreme together (a peak of
    // 1e-320 TFLOP/s): no prediction rather than an infinite or zero step time.
    if !(seconds.is_finite() && seconds > 0.0) {
        return Err(Error::invalid(
            format!("hardware '{}'", hw.name),
            format!(
                "its figures give a step time of {seconds} s; some figure is far outside any real system's range"
            ),
        ));
    }
    Ok(Step {
        phases: t.phases,
        seconds,
        chips,
        global_batch: workload.global_batch(chips),
        parts,
        overlaps,
    })
}

/// The waits of the step's collectives for each other: each network phase that
/// follows computation waits as the hardware's measured curve says for the work since
/// the previous network phase (the step repeats, so the work after the last one counts
/// before the first). Back-to-back collectives wait for none.
fn sync_waits(phases: &[Phase], system: &crate::hardware::SystemTraits) -> f64 {
    if system.sync_wait.is_empty() {
        return 0.0;
    }
    let is_sync = |p: &Phase| p.resource == Resource::Network && p.seconds > 0.0;
    let Some(last) = phases.iter().rposition(is_sync) else {
        return 0.0;
    };
    let mut work: f64 = phases[last + 1..]
        .iter()
        .filter(|p| p.resource != Resource::Network)
        .map(|p| p.exposed)
        .sum();
    let mut total = 0.0;
    for p in phases {
        if is_sync(p) {
            if work > 0.0 {
                total += system.sync_wait(work);
            }
            work = 0.0;
        } else if p.resource != Resource::Network {
            work += p.exposed;
        }
    }
    total
}

/// One direction of an embedding exchange as the step's schedule runs it: the part
/// that runs alone, and the part that runs beside a part's dense work (none in a whole
/// step).
struct Split {
    alone: f64,
    beside: f64,
    /// Which part of the exchange runs beside the dense work.
    part: &'static str,
}

impl Split {
    /// A flat exchange: `one` collective for the whole step, or each of two parts'
    /// (`part` running beside the dense work).
    fn flat(one: f64, split: bool, part: &'static str) -> Split {
        Split {
            alone: one,
            beside: if split { one } else { 0.0 },
            part,
        }
    }

    fn total(&self) -> f64 {
        self.alone + self.beside
    }

    fn scaled(self, k: f64) -> Split {
        Split {
            alone: self.alone * k,
            beside: self.beside * k,
            ..self
        }
    }
}

#[derive(Clone, Copy)]
enum Direction {
    Forward,
    Backward,
}

/// One direction of the SPTT exchange ([`tower_exchange`]) as the schedule runs it: in a
/// step of two parts the chunks are cut from the halves of every slice (`chunks` rounded
/// up to even, at least 2: the runtime's `sptt/pipeline.rs`), the last chunk's step f
/// runs beside part 0's dense work forward, and the first chunk's step f beside part
/// 1's backward: `a + (C − 1)·max(a, f)` alone and `f` beside it.
fn tower_split(
    hw: &Hardware,
    workload: &Workload,
    tc: &TowerCosts,
    b: f64,
    maps: f64,
    split: bool,
    direction: Direction,
) -> Split {
    if !split {
        return Split::flat(tower_exchange(hw, workload, tc, b, maps), false, "");
    }
    let chunks = (2 * tc.chunks.max(1).div_ceil(2)) as f64;
    let (shuffles, intra, peers) = tower_stages(hw, workload, tc, b, chunks);
    let a = maps / chunks + shuffles + intra;
    Split {
        alone: a + (chunks - 1.0) * a.max(peers),
        beside: peers,
        part: match direction {
            Direction::Forward => "the last chunk's step f",
            Direction::Backward => "the first chunk's step f",
        },
    }
}

/// Seconds of one direction of the SPTT exchange on a rank of the busiest tower group
/// (DMT §3.1, Figure 7; the runtime's steps c–f): peer permute and shuffle on the memory
/// system (each reads and writes the group rows), an all-to-all among the group's ranks
/// (crossing hosts when a tower spans several, §3.1.3), then concurrent all-to-alls among
/// each rank's peers in the other groups, carrying the modules' outputs.
///
/// In `tc.chunks` chunks of samples (the runtime's pipeline, where per-feature maps of
/// `maps` seconds run before step d), chunk `k`'s step f runs under chunk `k + 1`'s
/// maps, shuffles and step d: a two-stage pipeline of `a` (maps, shuffles, step d) and
/// `f` (step f) per chunk, `a + (chunks − 1)·max(a, f) + f`; backward the same, the
/// stages reversed. Each chunk's collectives pay their own latency.
fn tower_exchange(hw: &Hardware, workload: &Workload, tc: &TowerCosts, b: f64, maps: f64) -> f64 {
    let chunks = tc.chunks.max(1) as f64;
    let (shuffles, intra, peers) = tower_stages(hw, workload, tc, b, chunks);
    if tc.chunks <= 1 {
        return shuffles + intra + peers;
    }
    let a = maps / chunks + shuffles + intra;
    a + (chunks - 1.0) * a.max(peers) + peers
}

/// One chunk's (of `chunks`) shuffles, step d and step f in [`tower_exchange`].
fn tower_stages(
    hw: &Hardware,
    workload: &Workload,
    tc: &TowerCosts,
    b: f64,
    chunks: f64,
) -> (f64, f64, f64) {
    let part = b / chunks;
    let value = workload.wire_row_bytes() / workload.embedding_dim as f64;
    let rows = tc.busiest.intra_values * value * part;
    let shuffles = 2.0 * (2.0 * rows) / hw.memory.stream();
    let group = Group {
        hosts: tc.hosts_per_group,
        per_host: hw.chips_per_host,
    };
    let intra = hw.network.flat(Collective::AllToAll, rows, group);
    let sent = tc.busiest.peer_values * value * part;
    let peers = hw.network.peers(Collective::AllToAll, sent, tc.groups);
    (shuffles, intra, peers)
}
