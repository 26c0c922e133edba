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
