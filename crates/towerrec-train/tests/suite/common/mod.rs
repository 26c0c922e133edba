//! What the integration tests of towerrec-train share: small model sections of a
//! config.

/// A small DLRM `[model]` section.
#[allow(dead_code)]
pub const DLRM: &str = r#"kind = "dlrm"
embedding_dim = 8
bottom_mlp = [16, 8]
top_mlp = [32, 1]"#;

/// A small DCN-v2 `[model]` section.
#[allow(dead_code)]
pub const DCN: &str = r#"kind = "dcn"
embedding_dim = 8
cross_layers = 2
cross_rank = 4
top_mlp = [32, 1]"#;

/// A synthetic `[data]` section (with its `[train]` seed and batch size): 400 samples,
/// 5 tables, one-hot and multi-hot.
#[allow(dead_code)]
pub const SYNTHETIC: &str = r#"[train]
batch_size = 30
seed = 3

[data]
format = "synthetic"
train_samples = 400
eval_samples = 60
num_dense = 4
seed = 5
tables = [
  { rows = 50, pooling = 1, count = 2 },
  { rows = 97, pooling = { mean = 3.0 }, count = 2 },
  { rows = 7, pooling = 2 },
]"#;

/// The first `steps` global batches of `cfg`'s training data, of 30, 29, 7, 3, 1, …
/// samples: sizes not divisible by the world and smaller than it, so that slices are
/// uneven and some ranks get none.
#[allow(dead_code)]
pub fn uneven_batches(cfg: &towerrec_train::Config, steps: usize) -> Vec<towerrec_core::Batch> {
    let data = &cfg.data;
    let mut stream = towerrec_data::open(
        data,
        towerrec_data::Part::Train,
        cfg.train.bad_rows,
        &cfg.base_dir,
    )
    .expect("training data");
    let out: Vec<_> = (0..steps)
        .map_while(|i| {
            towerrec_data::next_batch(stream.as_mut(), [30, 29, 7, 3, 1][i % 5]).expect("a batch")
        })
        .collect();
    assert_eq!(out.len(), steps, "the data ran out");
    out
}

/// An exact access profile of `cfg`'s training data.
#[allow(dead_code)]
pub fn training_profile(cfg: &towerrec_train::Config) -> towerrec_data::AccessProfile {
    let mut stream = towerrec_data::open(
        &cfg.data,
        towerrec_data::Part::Train,
        cfg.train.bad_rows,
        &cfg.base_dir,
    )
    .expect("training data");
    towerrec_data::profile::profile_stream(
        stream.as_mut(),
        towerrec_data::profile::ProfileOptions::default(),
        None,
        "train".into(),
        |_| std::ops::ControlFlow::Continue(()),
    )
    .expect("a profile")
}

/// OPER's knobs for the tests' tiny tables: 20% extra memory (so that there are
/// replicas), a 5% first threshold, `cfg`'s global batch.
#[allow(dead_code)]
pub fn oper_params(
    cfg: &towerrec_train::Config,
    mode: towerrec_plan::oper::Mode,
) -> towerrec_plan::oper::OperParams {
    towerrec_plan::oper::OperParams {
        cost: towerrec_plan::CostParams {
            batch_size: cfg.train.batch_size,
            ..towerrec_plan::CostParams::default()
        },
        extra_memory: 0.2,
        mode,
        threshold: 0.05,
        ..towerrec_plan::oper::OperParams::default()
    }
}

/// A fresh model of `cfg` for data of `schema` in one process, initialized from `seed`;
/// a DMT model's towers are the default planner's (docs/DMT.md, "Where the towers come
/// from").
#[allow(dead_code)]
pub fn single(
    cfg: &towerrec_train::Config,
    schema: &towerrec_data::Schema,
    seed: u64,
) -> towerrec_train::Result<towerrec_train::Model> {
    let towers = towerrec_train::run_towers::fresh_towers(&cfg.model, schema, None)?;
    towerrec_train::Model::build(&cfg.model, &cfg.optimizer, schema, seed, towers.as_deref())
}

/// This rank's part of a fresh model of `cfg` spread by `plan` (its towers the plan's,
/// else the default planner's).
#[allow(dead_code)]
pub fn sharded(
    cfg: &towerrec_train::Config,
    schema: &towerrec_data::Schema,
    seed: u64,
    comm: towerrec_comm::Comm,
    plan: &towerrec_plan::Plan,
) -> towerrec_train::Result<towerrec_train::Model> {
    let towers = towerrec_train::run_towers::fresh_towers(&cfg.model, schema, Some(plan))?;
    let (model, opt) = (&cfg.model, &cfg.optimizer);
    towerrec_train::Model::build_sharded(model, opt, schema, seed, comm, plan, towers.as_deref())
}

/// DMT-DLRM's towers, 2 of them: a per-tower and a per-feature map (modules between
/// SPTT's steps e and f; docs/DMT.md).
#[allow(dead_code)]
pub const DLRM_TOWERS: &str = r#"[model.towers]
module = "dlrm"
count = 2
d = 4
c = 1
p = 1"#;

/// DMT-DLRM's per-feature maps alone: SPTT runs them before its step d, in chunks.
#[allow(dead_code)]
pub const PER_FEATURE_TOWERS: &str = r#"[model.towers]
module = "dlrm"
count = 2
d = 4
c = 1
p = 0"#;
