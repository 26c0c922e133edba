//! Reduced-precision tables (`model.table_precision`; docs/CONFIG.md): fp16 and bf16
//! tables train in one process and on an in-process cluster of 2 hosts × 2 ranks with
//! table-wise, row-wise, column-wise and data-parallel plans:
//!
//! - every stored value is representable in the table's precision, after training and
//!   in the whole tables a checkpoint gathers;
//! - a run is reproducible bit for bit;
//! - the first step, whose tables see the same gradients on every plan of one
//!   topology, leaves the same bits in the tables on every plan (the rounding is keyed
//!   by global row and column, not by where a row lives; OPER's row-partitioned stores
//!   included);
//! - later steps stay within a few units in the last place of one process (the dense
//!   gradients' sums round differently, as in fp32), and the losses close to fp32's;
//! - the planner and the memory check count 2 bytes a value;
//! - a per-table exception keeps its table in fp32; a name that is no table is refused.

use crate::common;

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
        ("OPER (row-partitioned stores, replicas)", {
            let profile = common::training_profile(&fp32);
            let p = common::oper_params(&fp32, towerrec_plan::oper::Mode::Training);
            towerrec_plan::oper::plan(&specs, &profile, t, &p)
                .unwrap()
                .plan
        }),
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

#[test]
fn checkpoints_store_each_table_in_its_precision_and_read_f32_ones() {
    use towerrec_train::checkpoint::{self, Checkpoint, Progress};
    let cfg = config("fp16", r#"table_precisions = { C2 = "bf16", C3 = "fp32" }"#);
    let s = schema(&cfg.data, &cfg.base_dir).unwrap();
    cfg.validate_against(&s).unwrap();
    let mut model = common::single(&cfg, &s, cfg.train.seed).unwrap();
    let batches = common::uneven_batches(&cfg, 5);
    let (_, tables) = run(&mut model, &cfg, &batches);
    let want = bits(&tables.unwrap());
    let progress = Progress {
        step: 5,
        epoch: 0,
        batch_in_epoch: 5,
        samples: 70,
    };
    let dir = std::env::temp_dir().join(format!("towerrec-precision-ckpt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("c.safetensors");
    checkpoint::save(&path, &mut model, &cfg, progress, &[]).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    for d in model.table_descs() {
        let t = st.tensor(&format!("emb.{}.weight", d.name)).unwrap();
        let dtype = match cfg.model.precision_of(&d.name) {
            TablePrecision::Fp16 => safetensors::Dtype::F16,
            TablePrecision::Bf16 => safetensors::Dtype::BF16,
            _ => safetensors::Dtype::F32,
        };
        assert_eq!(t.dtype(), dtype, "{}", d.name);
    }
    // Read back: the same bits.
    let back = Checkpoint::read(&path)
        .unwrap()
        .restore(&cfg, &s)
        .unwrap()
        .whole_tables()
        .unwrap()
        .unwrap();
    assert_eq!(bits(&back), want);
    // A checkpoint that stores the reduced-precision tables widened to f32, as towerrec
    // wrote them before, loads to the same bits.
    let mut as_f32 = cfg.clone();
    as_f32.model.table_precision = TablePrecision::Fp32;
    as_f32.model.table_precisions.clear();
    let s32 = schema(&as_f32.data, &as_f32.base_dir).unwrap();
    let mut wide = common::single(&as_f32, &s32, as_f32.train.seed).unwrap();
    wide.load_whole_tables(&model.whole_tables().unwrap().unwrap())
        .unwrap();
    let old = dir.join("old.safetensors");
    checkpoint::save(&old, &mut wide, &cfg, progress, &[]).unwrap();
    let old_bytes = std::fs::read(&old).unwrap();
    assert!(bytes.len() < old_bytes.len(), "2 bytes a value are smaller");
    let st = safetensors::SafeTensors::deserialize(&old_bytes).unwrap();
    let name = &model.table_descs()[0].name;
    let t = st.tensor(&format!("emb.{name}.weight")).unwrap();
    assert_eq!(t.dtype(), safetensors::Dtype::F32);
    let back = Checkpoint::read(&old)
        .unwrap()
        .restore(&cfg, &s)
        .unwrap()
        .whole_tables()
        .unwrap()
        .unwrap();
    assert_eq!(bits(&back), want);
    let _ = std::fs::remove_dir_all(&dir);
}
