//! A step whose loss or gradients go NaN or infinite fails on every rank of a cluster,
//! at that step, with the message one process gives (docs/RELIABILITY.md, section 2),
//! whichever rank's samples hold the cause, on every sharding and with steps in halves
//! or whole, and without a rank left waiting in a collective.

use crate::common;

use std::path::Path;
use towerrec_comm::{Comm, Topology, Watchdog};
use towerrec_core::Batch;
use towerrec_data::schema;
use towerrec_plan::{planners, Plan};
use towerrec_train::cluster::{run_ranks_with, table_specs};
use towerrec_train::trainer::train_step;
use towerrec_train::{Config, Model};

/// The step (of 4) whose batch is spoiled.
const BAD_STEP: usize = 2;

fn config() -> Config {
    let text = format!(
        "[model]\n{}\n[optimizer]\ndense = {{ kind = \"sgd\" }}\ndense_lr = 0.1\n\
         sparse = {{ kind = \"sgd\" }}\nsparse_lr = 0.1\n{}",
        common::DLRM,
        common::SYNTHETIC
    );
    Config::from_toml(&text, "test", Path::new(".")).expect("test config")
}

/// Four global batches of 30 samples, the last sample of step [`BAD_STEP`]'s spoiled by
/// `spoil` (it falls in the last rank's slice).
fn batches(cfg: &Config, spoil: impl Fn(&mut Batch)) -> Vec<Batch> {
    let mut stream = towerrec_data::open(
        &cfg.data,
        towerrec_data::Part::Train,
        cfg.train.bad_rows,
        &cfg.base_dir,
    )
    .unwrap();
    let mut out: Vec<Batch> = (0..4)
        .map(|_| {
            towerrec_data::next_batch(stream.as_mut(), 30)
                .unwrap()
                .unwrap()
        })
        .collect();
    spoil(&mut out[BAD_STEP - 1]);
    out
}

/// Trains on `batches` until a step fails: that step (1-based) and its error, or `None`.
fn steps(model: &mut Model, batches: &[Batch]) -> Option<(usize, String)> {
    let (mut logits, mut grad) = (Vec::new(), Vec::new());
    for (i, b) in batches.iter().enumerate() {
        if let Err(e) = train_step(model, b, (0.1, 0.1), &mut logits, &mut grad) {
            return Some((i + 1, e.to_string()));
        }
    }
    None
}

fn alone(cfg: &Config, batches: &[Batch]) -> Option<(usize, String)> {
    let s = schema(&cfg.data, &cfg.base_dir).unwrap();
    let mut model = common::single(cfg, &s, cfg.train.seed).unwrap();
    steps(&mut model, batches)
}

/// Every rank's outcome on a cluster of `topology` under `plan`. A rank that went on
/// alone would wait for the others in its next collective: the watchdog ends that.
fn cluster(
    cfg: &Config,
    batches: &[Batch],
    topology: Topology,
    plan: &Plan,
    halves: bool,
) -> Vec<Option<(usize, String)>> {
    let s = schema(&cfg.data, &cfg.base_dir).unwrap();
    let watchdog = Watchdog::new(20.0).unwrap();
    run_ranks_with(topology, 1, watchdog, |comm: Comm| {
        let mut model = common::sharded(cfg, &s, cfg.train.seed, comm, plan)?;
        model.set_overlap_halves(halves);
        Ok(steps(&mut model, batches))
    })
    .unwrap_or_else(|e| panic!("{e}"))
}

/// Plans of every kind that matters here: whole tables, tables split by rows (partial
/// sums), replicas (their gradient rows gathered).
fn plans(cfg: &Config, topology: Topology) -> Vec<(&'static str, Plan)> {
    let s = schema(&cfg.data, &cfg.base_dir).unwrap();
    let specs = table_specs(cfg, &s);
    vec![
        (
            "table-wise",
            planners::table_wise(&specs, topology).unwrap(),
        ),
        ("row-wise", planners::row_wise(&specs, topology).unwrap()),
        (
            "data-parallel",
            planners::data_parallel(&specs, topology).unwrap(),
        ),
    ]
}

/// Every rank of every cluster fails at [`BAD_STEP`] with one process's message, less
/// what only a cluster says (`extra`, which every rank's message holds).
fn assert_every_rank_fails_as_one_process(cfg: &Config, batches: &[Batch], extra: &str) -> String {
    let (step, want) = alone(cfg, batches).expect("one process fails");
    assert_eq!(step, BAD_STEP, "{want}");
    for (hosts, ranks) in [(1, 4), (2, 2), (4, 1)] {
        let topology = Topology::new(hosts, ranks).unwrap();
        for (name, plan) in plans(cfg, topology) {
            for halves in [false, true] {
                let case = format!("{hosts}x{ranks} {name} halves {halves}");
                let outcomes = cluster(cfg, batches, topology, &plan, halves);
                let first = outcomes[0].clone();
                let (step, got) = first.unwrap_or_else(|| panic!("{case}: rank 0 went on"));
                assert_eq!(step, BAD_STEP, "{case}: {got}");
                for (r, o) in outcomes.iter().enumerate() {
                    assert_eq!(o.as_ref(), Some(&(step, got.clone())), "{case}: rank {r}");
                }
                let world = hosts * ranks;
                let extra = extra.replace("{world}", &world.to_string());
                assert!(got.contains(&extra), "{case}: {got}");
                assert_eq!(
                    rounding_aside(&got.replace(&extra, "")),
                    rounding_aside(&want),
                    "{case}"
                );
            }
        }
    }
    want
}

/// `message` without the largest dense weight's value, which the cluster's sums round
/// differently from one process's.
fn rounding_aside(message: &str) -> String {
    let lead = "(largest dense weight ";
    match message.find(lead) {
        Some(at) => {
            let rest = &message[at + lead.len()..];
            let end = rest.find(',').map_or(rest.len(), |e| e);
            format!("{}{lead}…{}", &message[..at], &rest[end..])
        }
        None => message.to_string(),
    }
}

#[test]
fn a_nan_label_on_one_rank_stops_every_rank_naming_that_rank() {
    let cfg = config();
    let batches = batches(&cfg, |b| *b.labels.last_mut().unwrap() = f32::NAN);
    // The last sample is the last rank's: rank 3 of 4.
    let want = assert_every_rank_fails_as_one_process(
        &cfg,
        &batches,
        "on rank 3 of {world} (its slice of the batch): ",
    );
    assert!(
        want.starts_with(
            "non-finite loss (NaN) at a training step: the label of sample 29 in the batch is NaN"
        ),
        "{want}"
    );
}

#[test]
fn a_nan_the_relu_hides_from_the_loss_stops_every_rank_at_its_gradient() {
    let cfg = config();
    // NaN into the bottom MLP: max(NaN, 0) = 0 hides it from the loss, not from the
    // first layer's weight gradient (0 · NaN).
    let batches = batches(&cfg, |b| *b.dense.last_mut().unwrap() = f32::NAN);
    let want = assert_every_rank_fails_as_one_process(
        &cfg,
        &batches,
        " after the all-reduce over {world} ranks",
    );
    assert!(
        want.starts_with(
            "non-finite gradient (NaN) at a training step: the gradient of dense parameter \
             'bottom.0.weight' holds NaN at element"
        ),
        "{want}"
    );
}
