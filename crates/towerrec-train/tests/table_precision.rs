//! Reduced-precision tables (`model.table_precision`; docs/CONFIG.md): fp16 and bf16
//! tables train in one process and on an in-process cluster of 2 hosts × 2 ranks with
//! table-wise, row-wise, column-wise and data-parallel plans:
//!
//! - every stored value is representable in the table's precision, after training and
//!   in the whole tables a checkpoint gathers;
//! - a run is reproducible bit for bit;
//! - the first step, whose tables see the same gradients on every plan of one
//!   topology, leaves the same bits in the tables on every plan (the rounding is keyed
//!   by global row and column, not by where a row lives);
//! - later steps stay within a few units in the last place of one process (the dense
//!   gradients' sums round differently, as in fp32), and the losses close to fp32's;
//! - the planner and the memory check count 2 bytes a value;
//! - a per-table exception keeps its table in fp32; a name that is no table is refused.

mod common;

use std::path::Path;
use towerrec_comm::{Comm, Topology};
use towerrec_core::embedding::{EmbeddingBag, TablePrecision};
use towerrec_core::Batch;
use towerrec_data::schema;
use towerrec_plan::{planners, Plan};
use towerrec_train::cluster::{run_ranks, table_specs};
use towerrec_train::sharded::WholeTable;
use towerrec_train::trainer::train_step;
use towerrec_train::{Config, Model};

fn config(precision: &str, extra: &str) -> Config {
    let data = common::SYNTHETIC;
    let dlrm = common::DLRM;
    let text = format!(
        r#"
[model]
{dlrm}
table_precision = "{precision}"
{extra}

[optimizer]
dense = {{ kind = "sgd" }}
dense_lr = 0.05
sparse = {{ kind = "adam" }}
sparse_lr = 0.05

{data}
"#
    );
    Config::from_toml(&text, "test", Path::new(".")).expect("test config")
}

/// Losses and whole tables after training `model` on `batches`.
fn run(model: &mut Model, cfg: &Config, batches: &[Batch]) -> (Vec<f64>, Option<Vec<WholeTable>>) {
    let lrs = (
        cfg.optimizer.dense_lr as f32,
        cfg.optimizer.sparse_lr as f32,
    );
    let (mut logits, mut grad) = (Vec::new(), Vec::new());
    let losses = batches
        .iter()
        .map(|b| {
            let mine = train_step(model, b, lrs, &mut logits, &mut grad).unwrap();
            towerrec_train::cluster::global_sum(model, mine).unwrap()
        })
        .collect();
    (losses, model.whole_tables().unwrap())
}

fn single(cfg: &Config, batches: &[Batch]) -> (Vec<f64>, Vec<WholeTable>) {
    let s = schema(&cfg.data, &cfg.base_dir).unwrap();
    cfg.validate_against(&s).unwrap();
    let mut model = common::single(cfg, &s, cfg.train.seed).unwrap();
    let (l, t) = run(&mut model, cfg, batches);
    (l, t.unwrap())
}

fn cluster(cfg: &Config, batches: &[Batch], plan: &Plan) -> (Vec<f64>, Vec<WholeTable>) {
    let s = schema(&cfg.data, &cfg.base_dir).unwrap();
    let outs = run_ranks(plan.topology, 1, |comm: Comm| {
        let mut model = common::sharded(cfg, &s, cfg.train.seed, comm, plan)?;
        Ok(run(&mut model, cfg, batches))
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let (l, t) = outs.into_iter().next().unwrap();
    (l, t.unwrap())
}

/// Whether `v` is a value of `precision`.
fn representable(v: f32, precision: TablePrecision) -> bool {
    let t = EmbeddingBag::try_from_fn_in(
        precision,
        "x",
        1,
        1,
        towerrec_core::embedding::Pooling::Sum,
        towerrec_core::embedding::SparseOptimizer::Sgd,
        |_, row| row[0] = v,
    )
    .unwrap();
    t.weights()[0].to_bits() == v.to_bits()
}

fn bits(t: &[WholeTable]) -> Vec<Vec<u32>> {
    t.iter()
        .map(|w| w.weights.iter().map(|v| v.to_bits()).collect())
        .collect()
}

#[test]
fn reduced_precision_tables_train_alike_on_every_placement() {
    let t = Topology::new(2, 2).unwrap();
    let fp32 = config("fp32", "");
    let s = schema(&fp32.data, &fp32.base_dir).unwrap();
    let specs = table_specs(&fp32, &s);
    let plans = [
        ("table-wise", planners::table_wise(&specs, t).unwrap()),
        ("row-wise", planners::row_wise(&specs, t).unwrap()),
        ("column-wise", planners::column_wise(&specs, t, 2).unwrap()),
        ("data-parallel", planners::data_parallel(&specs, t).unwrap()),
    ];
    let batches = common::uneven_batches(&fp32, 12);
    let (fp32_losses, _) = single(&fp32, &batches);
    for (precision, name) in [
        (TablePrecision::Fp16, "fp16"),
        (TablePrecision::Bf16, "bf16"),
    ] {
        let cfg = config(name, "");
        let (losses, tables) = single(&cfg, &batches);
        assert_eq!(
            bits(&tables),
            bits(&single(&cfg, &batches).1),
            "{name}: reproducible"
        );
        for w in &tables {
            assert!(
                w.weights.iter().all(|&v| representable(v, precision)),
                "{name} {}",
                w.name
            );
        }
        for (step, (a, b)) in fp32_losses.iter().zip(&losses).enumerate() {
            assert!(
                (a - b).abs() <= 2e-2 * a.abs().max(1.0),
                "{name} step {step}: fp32 {a}, {b}"
            );
        }
        let (_, first) = cluster(&cfg, &batches[..1], &plans[0].1);
        let ulp = match precision {
            TablePrecision::Bf16 => 2f32.powi(-7),
            _ => 2f32.powi(-10),
        };
        for (plan_name, plan) in &plans {
            let what = format!("{name} on a {plan_name} plan");
            let (_, one) = cluster(&cfg, &batches[..1], plan);
            let differ: usize = bits(&one)
                .iter()
                .zip(bits(&first))
                .map(|(a, b)| a.iter().zip(&b).filter(|(x, y)| x != y).count())
                .sum();
            assert_eq!(
                differ, 0,
                "{what}: values that differ after the first step from the table-wise plan's"
            );
            let (got_losses, got) = cluster(&cfg, &batches, plan);
            for (w, g) in tables.iter().zip(&got) {
                assert!(
                    g.weights.iter().all(|&v| representable(v, precision)),
                    "{what}"
                );
                for (&a, &b) in w.weights.iter().zip(&g.weights) {
                    assert!(
                        (a - b).abs() <= 4.0 * ulp * a.abs().max(2f32.powi(-14)),
                        "{what} {}: {a} vs {b}",
                        w.name
                    );
                }
            }
            for (a, b) in losses.iter().zip(&got_losses) {
                assert!(
                    (a - b).abs() <= 1e-3 * a.abs().max(1.0),
                    "{what}: loss {a} vs {b}"
                );
            }
        }
    }
}

#[test]
fn bytes_per_row_and_exceptions_follow_the_precision() {
    let fp32 = config("fp32", "");
    let half = config("fp16", "table_precisions = { C1 = \"fp32\" }");
    let s = schema(&half.data, &half.base_dir).unwrap();
    half.validate_against(&s).unwrap();
    let (a, b) = (table_specs(&fp32, &s), table_specs(&half, &s));
    // SGD-free Adam state (2 f32 per value) stays; the weights halve except C1's.
    let dim = fp32.model.embedding_dim;
    for (x, y) in a.iter().zip(&b) {
        let want = if y.name == "C1" {
            x.bytes_per_row
        } else {
            x.bytes_per_row - 2 * dim
        };
        assert_eq!(y.bytes_per_row, want, "{}", y.name);
    }
    let mut model = common::single(&half, &s, 0).unwrap();
    let (_, tables) = run(&mut model, &half, &common::uneven_batches(&half, 2));
    let tables = tables.unwrap();
    assert!(
        tables[0]
            .weights
            .iter()
            .any(|&v| !representable(v, TablePrecision::Fp16)),
        "C1 stays fp32"
    );
    assert!(tables[1]
        .weights
        .iter()
        .all(|&v| representable(v, TablePrecision::Fp16)));
    let bad = config("fp16", "table_precisions = { nope = \"fp32\" }");
    let err = bad.validate_against(&s).unwrap_err().to_string();
    assert!(err.contains("model.table_precisions names 'nope'"), "{err}");
}
