//! Quantized communication (`[cluster.qcomms]`; docs/DISTRIBUTED.md, "Quantized
//! communication") on the in-process cluster, 2 hosts × 2 ranks, for flat plans of
//! every sharding type (steps in halves and whole) and for DMT models (Tower Modules
//! between SPTT's steps e and f, and per-feature maps before step d in chunks):
//!
//! - fp16 forward and bf16 backward send exactly half the bytes of fp32 in every
//!   phase that carries pooled embeddings or their gradients (output distribution,
//!   SPTT's steps d and f), and the same bytes in every other phase; with the dense
//!   all-reduce in bf16, its phases (and the Tower Modules') halve too;
//! - a run is reproducible bit for bit for a given setting;
//! - it trains as fp32 does to within the rounding (losses), and the setting takes
//!   effect (the losses are not fp32's bits).

use crate::common;

use std::path::Path;
use towerrec_comm::{ClusterTraffic, Comm, Phase, Topology, WirePrecision};
use towerrec_core::Batch;
use towerrec_data::schema;
use towerrec_plan::{planners, Plan};
use towerrec_train::cluster::{resolve_plan, run_ranks, table_specs};
use towerrec_train::config::QComms;
use towerrec_train::trainer::train_step;
use towerrec_train::Config;

const STEPS: usize = 20;

fn config(towers: &str) -> Config {
    let bottom = if towers.is_empty() { 8 } else { 4 };
    let data = common::SYNTHETIC;
    let text = format!(
        r#"
[model]
kind = "dlrm"
embedding_dim = 8
bottom_mlp = [16, {bottom}]
top_mlp = [16, 1]
{towers}

[optimizer]
dense = {{ kind = "adam" }}
dense_lr = 0.01
sparse = {{ kind = "adam" }}
sparse_lr = 0.05

{data}
"#
    );
    Config::from_toml(&text, "test", Path::new(".")).expect("test config")
}

/// Loss bits of every step, dense parameter bits, and the cluster's bytes by phase.
struct Outcome {
    losses: Vec<u64>,
    dense: Vec<Vec<u32>>,
    traffic: ClusterTraffic,
}

fn train(cfg: &Config, batches: &[Batch], plan: &Plan, halves: bool, wire: QComms) -> Outcome {
    let s = schema(&cfg.data, &cfg.base_dir).unwrap();
    let topology = plan.topology;
    let lrs = (
        cfg.optimizer.dense_lr as f32,
        cfg.optimizer.sparse_lr as f32,
    );
    let outs = run_ranks(topology, 1, |comm: Comm| {
        let mut model = common::sharded(cfg, &s, cfg.train.seed, comm, plan)?;
        model.set_overlap_halves(halves);
        model.set_tower_chunks(3);
        model.set_qcomms(wire);
        let before = model.comm().expect("sharded").traffic();
        let (mut logits, mut grad, mut losses) = (Vec::new(), Vec::new(), Vec::new());
        for b in batches {
            let mine = train_step(&mut model, b, lrs, &mut logits, &mut grad)?;
            losses.push(towerrec_train::cluster::global_sum(&model, mine)?);
        }
        let sent = model.comm().expect("sharded").traffic().since(&before);
        model.refresh_tower_replicas()?;
        let dense: Vec<Vec<u32>> = model
            .dense_params()
            .iter()
            .map(|p| p.value.iter().map(|v| v.to_bits()).collect())
            .collect();
        Ok((losses, dense, sent.to_flat()))
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let flats: Vec<u64> = outs.iter().flat_map(|o| o.2.iter().copied()).collect();
    let (losses, dense, _) = outs.into_iter().next().unwrap();
    Outcome {
        losses: losses.iter().map(|l| l.to_bits()).collect(),
        dense,
        traffic: ClusterTraffic::from_flat(topology, &flats),
    }
}

/// The phases that carry pooled embeddings and their gradients.
const QUANTIZED: [Phase; 3] = [Phase::OutputDist, Phase::TowerIntra, Phase::TowerPeer];

fn check(what: &str, cfg: &Config, plan: &Plan, halves: bool) {
    check_with(what, cfg, plan, halves, WirePrecision::Fp32);
}

/// [`check`] with the dense gradients' all-reduce in `dense` precision: its phases
/// halve too when it is bf16.
fn check_with(what: &str, cfg: &Config, plan: &Plan, halves: bool, dense: WirePrecision) {
    let batches = common::uneven_batches(cfg, STEPS);
    let fp32 = train(cfg, &batches, plan, halves, QComms::default());
    let strong = QComms {
        forward: WirePrecision::Fp16,
        backward: WirePrecision::Bf16,
        dense,
    };
    let mut quantized = QUANTIZED.to_vec();
    if dense == WirePrecision::Bf16 {
        quantized.extend([Phase::DenseGradSync, Phase::TowerGradSync]);
    }
    let q = train(cfg, &batches, plan, halves, strong);
    let again = train(cfg, &batches, plan, halves, strong);
    assert_eq!(q.losses, again.losses, "{what}: losses reproducible");
    assert_eq!(
        q.dense, again.dense,
        "{what}: dense parameters reproducible"
    );
    let mut carried = 0;
    for phase in Phase::ALL {
        let (want, got) = (fp32.traffic.phase(phase), q.traffic.phase(phase));
        if quantized.contains(&phase) {
            assert_eq!(
                2 * got.intra_host,
                want.intra_host,
                "{what}: {} intra",
                phase.name()
            );
            assert_eq!(
                2 * got.cross_host,
                want.cross_host,
                "{what}: {} cross",
                phase.name()
            );
            carried += want.total();
        } else {
            assert_eq!(got, want, "{what}: {} unchanged", phase.name());
        }
    }
    assert!(carried > 0, "{what}: nothing exchanged");
    let (mut differ, mut worst, mut first) = (0, 0.0f64, 0.0f64);
    for (step, (&w, &g)) in fp32.losses.iter().zip(&q.losses).enumerate() {
        let (w, g) = (f64::from_bits(w), f64::from_bits(g));
        // The first step's parameters are fp32's: only its forward's rounding shows
        // (fp16 keeps 11 significant bits). Later steps drift apart as Adam follows
        // the rounded gradients (some batches hold one sample).
        let tol = if step == 0 { 1e-4 } else { 3e-2 };
        let rel = (w - g).abs() / w.abs().max(1.0);
        assert!(
            rel <= tol,
            "{what}: loss at step {step}: fp32 {w}, quantized {g}"
        );
        worst = worst.max(rel);
        if step == 0 {
            first = rel;
        }
        differ += usize::from(w.to_bits() != g.to_bits());
    }
    assert!(
        differ > 0,
        "{what}: quantized communication changed nothing"
    );
    println!("{what}: {differ} of {STEPS} losses differ from fp32 in their bits, by up to {worst:.2e} (step 0: {first:.2e})");
}

#[test]
fn flat_plans_send_half_the_bytes_reproducibly() {
    let cfg = config("");
    let s = schema(&cfg.data, &cfg.base_dir).unwrap();
    let specs = table_specs(&cfg, &s);
    let t = Topology::new(2, 2).unwrap();
    let plans = [
        ("table-wise", planners::table_wise(&specs, t).unwrap()),
        ("row-wise", planners::row_wise(&specs, t).unwrap()),
        ("column-wise", planners::column_wise(&specs, t, 2).unwrap()),
        (
            "table-row-wise",
            planners::table_row_wise(&specs, t).unwrap(),
        ),
    ];
    for (name, plan) in &plans {
        check(&format!("{name} in halves"), &cfg, plan, true);
    }
    check("table-wise, whole steps", &cfg, &plans[0].1, false);
    // The dense gradients' all-reduce in bf16 too (hierarchical, the default).
    let dense = WirePrecision::Bf16;
    check_with("row-wise, bf16 dense sync", &cfg, &plans[1].1, true, dense);
}

#[test]
fn dmt_models_send_half_the_bytes_reproducibly() {
    let t = Topology::new(2, 2).unwrap();
    for (name, towers) in [
        ("modules between e and f", common::DLRM_TOWERS),
        ("per-feature maps before d", common::PER_FEATURE_TOWERS),
    ] {
        let cfg = config(towers);
        let s = schema(&cfg.data, &cfg.base_dir).unwrap();
        let plan = resolve_plan(&cfg, &s, t, None, None).unwrap();
        assert_eq!(plan.towers.len(), 2, "{name}: a tower plan");
        check(&format!("DMT, {name}"), &cfg, &plan, true);
        let dense = WirePrecision::Bf16;
        check_with(
            &format!("DMT, {name}, bf16 dense sync"),
            &cfg,
            &plan,
            true,
            dense,
        );
    }
}
