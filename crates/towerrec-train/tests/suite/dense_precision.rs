//! bf16 dense layers (`model.dense_precision = "bf16"`; docs/CONFIG.md): DLRM and DCN,
//! with and without Tower Modules, train reproducibly, apart from fp32 in their bits and
//! close to it in their losses, in one process and on an in-process cluster of 2 × 2;
//! the setting survives the config's round trip (checkpoints carry the config).

use crate::common;

use std::path::Path;
use towerrec_comm::{Comm, Topology};
use towerrec_core::matmul::DensePrecision;
use towerrec_core::Batch;
use towerrec_data::schema;
use towerrec_plan::planners;
use towerrec_train::cluster::{run_ranks, table_specs};
use towerrec_train::trainer::train_step;
use towerrec_train::{Config, Model};

fn config(model: &str, precision: &str) -> Config {
    let data = common::SYNTHETIC;
    let text = format!(
        r#"
[model]
dense_precision = "{precision}"
{model}

[optimizer]
dense = {{ kind = "adam" }}
dense_lr = 0.01
sparse = {{ kind = "sgd" }}
sparse_lr = 0.05

{data}
"#
    );
    Config::from_toml(&text, "test", Path::new(".")).expect("test config")
}

/// Losses and dense parameters' bits after training on `batches`.
fn run(model: &mut Model, batches: &[Batch]) -> (Vec<f64>, Vec<u32>) {
    let (mut logits, mut grad) = (Vec::new(), Vec::new());
    let losses = batches
        .iter()
        .map(|b| {
            let mine = train_step(model, b, (0.01, 0.05), &mut logits, &mut grad).unwrap();
            towerrec_train::cluster::global_sum(model, mine).unwrap()
        })
        .collect();
    let bits = model
        .dense_params()
        .iter()
        .flat_map(|p| p.value.iter().map(|v| v.to_bits()).collect::<Vec<_>>())
        .collect();
    (losses, bits)
}

fn single(cfg: &Config, batches: &[Batch]) -> (Vec<f64>, Vec<u32>) {
    let s = schema(&cfg.data, &cfg.base_dir).unwrap();
    let mut model = common::single(cfg, &s, cfg.train.seed).unwrap();
    run(&mut model, batches)
}

#[test]
fn bf16_dense_layers_train_close_to_fp32_everywhere() {
    let dlrm = common::DLRM.replace("bottom_mlp = [16, 8]", "bottom_mlp = [16, 4]");
    let dlrm_towers = format!("{dlrm}\n{}", common::DLRM_TOWERS);
    for model in [common::DLRM, common::DCN, dlrm_towers.as_str()] {
        let fp32 = config(model, "fp32");
        let bf16 = config(model, "bf16");
        assert_eq!(bf16.model.dense_precision, DensePrecision::Bf16);
        let again = Config::from_toml(&bf16.to_toml(), "again", Path::new(".")).unwrap();
        assert_eq!(again.model.dense_precision, DensePrecision::Bf16);
        let batches = common::uneven_batches(&fp32, 15);
        let (l32, w32) = single(&fp32, &batches);
        let (l16, w16) = single(&bf16, &batches);
        assert_eq!(
            (&l16, &w16),
            (&single(&bf16, &batches).0, &single(&bf16, &batches).1)
        );
        assert_ne!(w16, w32, "bf16 products round: other weights");
        for (step, (a, b)) in l32.iter().zip(&l16).enumerate() {
            assert!(
                (a - b).abs() <= 2e-2 * a.abs().max(1.0),
                "step {step}: fp32 {a}, bf16 {b}"
            );
        }
        // On a cluster: the same losses as one process, to the all-reduce's rounding.
        let t = Topology::new(2, 2).unwrap();
        let s = schema(&bf16.data, &bf16.base_dir).unwrap();
        let plan = planners::table_wise(&table_specs(&bf16, &s), t).unwrap();
        let outs = run_ranks(t, 1, |comm: Comm| {
            let mut m = common::sharded(&bf16, &s, bf16.train.seed, comm, &plan)?;
            Ok(run(&mut m, &batches).0)
        })
        .unwrap_or_else(|e| panic!("{e}"));
        for (a, b) in l16.iter().zip(&outs[0]) {
            assert!(
                (a - b).abs() <= 1e-3 * a.abs().max(1.0),
                "cluster {a} vs {b}"
            );
        }
    }
}

/// `auto` is resolved when the config is read: to bf16 exactly where the bf16 kernel
/// runs on bf16 instructions; the config written beside a run (and into checkpoints)
/// holds the choice, and reading that back keeps it.
#[test]
fn auto_is_resolved_when_read_and_recorded_as_chosen() {
    let auto = config(common::DLRM, "auto");
    let chosen = DensePrecision::Auto.resolve();
    assert_ne!(chosen, DensePrecision::Auto);
    assert_eq!(auto.model.dense_precision, chosen);
    assert!(auto.model.dense_precision_auto);
    let text = auto.to_toml();
    assert!(!text.contains("auto"), "{text}");
    let again = Config::from_toml(&text, "again", Path::new(".")).unwrap();
    assert_eq!(again.model.dense_precision, chosen);
    assert!(!again.model.dense_precision_auto);
    let fast = towerrec_core::matmul::bf16_kernel().is_fast();
    assert_eq!(chosen == DensePrecision::Bf16, fast);
}
