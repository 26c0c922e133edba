//! int8 row-wise quantized tables (`towerrec quantize`, `model.table_precision =
//! "int8"`; docs/CONFIG.md): a trained model quantized in memory scores as its
//! checkpoint, written and read back, scores (bit for bit); the checkpoint holds the
//! tables as U8 rows of `dim + 8` bytes, no optimizer state for them, and is smaller;
//! the scores stay close to fp32's; a per-table choice leaves the other tables as they
//! were; training and clusters refuse int8 tables.

use crate::common;

use std::path::Path;
use towerrec_comm::Topology;
use towerrec_core::embedding::TablePrecision;
use towerrec_core::Batch;
use towerrec_data::schema;
use towerrec_train::checkpoint::{self, Checkpoint, Progress};
use towerrec_train::trainer::train_step;
use towerrec_train::{Config, Model};

fn config() -> Config {
    let (dlrm, data) = (common::DLRM, common::SYNTHETIC);
    let text = format!(
        r#"
[model]
{dlrm}

[optimizer]
dense = {{ kind = "sgd" }}
dense_lr = 0.05
sparse = {{ kind = "row_wise_adagrad" }}
sparse_lr = 0.05

{data}
"#
    );
    Config::from_toml(&text, "test", Path::new(".")).expect("test config")
}

/// A model of `cfg` trained on 20 batches, and a batch to score.
fn trained(cfg: &Config) -> (Model, Batch) {
    let s = schema(&cfg.data, &cfg.base_dir).unwrap();
    let mut model = common::single(cfg, &s, cfg.train.seed).unwrap();
    let batches = common::uneven_batches(cfg, 21);
    let (mut logits, mut grad) = (Vec::new(), Vec::new());
    for b in &batches[..20] {
        train_step(&mut model, b, (0.05, 0.05), &mut logits, &mut grad).unwrap();
    }
    (model, batches[20].clone())
}

fn logits(model: &mut Model, batch: &Batch) -> Vec<f32> {
    let mut out = Vec::new();
    model.forward(batch, &mut out).unwrap();
    out
}

/// A directory of its own under the system's temporary one, removed when dropped.
struct Tmp(std::path::PathBuf);

impl Tmp {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("towerrec-int8-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Tmp(dir)
    }
}

impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn progress() -> Progress {
    Progress {
        step: 20,
        epoch: 0,
        batch_in_epoch: 20,
        samples: 400,
    }
}

#[test]
fn a_quantized_checkpoint_scores_as_the_quantized_model() {
    let cfg = config();
    let (mut model, batch) = trained(&cfg);
    let fp32 = logits(&mut model, &batch);
    let rows: Vec<(String, usize, usize)> = (model.table_descs().iter())
        .map(|d| (d.name.clone(), d.rows, d.dim))
        .collect();
    let done = model.quantize_tables(None).unwrap();
    assert_eq!(done.len(), rows.len());
    for (q, (_, r, d)) in done.iter().zip(&rows) {
        assert_eq!(q.bytes_before, (r * d * 4) as u64);
        assert_eq!(q.bytes_after, (r * (d + 8)) as u64);
        assert!(q.max_error > 0.0 && q.max_error < 0.01, "{q:?}");
    }
    let int8 = logits(&mut model, &batch);
    let worst = fp32
        .iter()
        .zip(&int8)
        .fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
    assert!(worst > 0.0 && worst < 0.05, "logits moved by {worst}");

    let dir = Tmp::new("int8");
    let path = dir.0.join("int8.safetensors");
    let mut qcfg = cfg.clone();
    qcfg.model.table_precision = TablePrecision::Int8;
    checkpoint::save(&path, &mut model, &qcfg, progress(), &[]).unwrap();
    // The tables are U8 rows of dim + 8 bytes, without optimizer state.
    let bytes = std::fs::read(&path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    for (name, r, d) in &rows {
        let t = st.tensor(&format!("emb.{name}.weight")).unwrap();
        assert_eq!(t.dtype(), safetensors::Dtype::U8);
        assert_eq!(t.shape(), [*r, d + 8]);
        assert!(st.tensor(&format!("emb.{name}.opt.accumulator")).is_err());
    }
    // Read back into a model built from its config: the same scores, bit for bit.
    let ckpt = Checkpoint::read(&path).unwrap();
    let read_cfg = ckpt.config().unwrap();
    assert_eq!(read_cfg.model.table_precision, TablePrecision::Int8);
    let s = schema(&read_cfg.data, &read_cfg.base_dir).unwrap();
    let mut back = ckpt.restore(&read_cfg, &s).unwrap();
    let again = logits(&mut back, &batch);
    let b = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(b(&again), b(&int8));
    // The same file read into an fp32 model's config is refused, naming the table's dtype.
    let err = match ckpt.restore(&cfg, &s) {
        Ok(_) => panic!("an int8 checkpoint loaded into fp32 tables"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("expected F32"), "{err}");
}

#[test]
fn quantizing_some_tables_leaves_the_others() {
    let cfg = config();
    let (mut model, batch) = trained(&cfg);
    let names: Vec<String> = (model.table_descs().iter())
        .map(|d| d.name.clone())
        .collect();
    let before = model.whole_tables().unwrap().unwrap();
    let chosen = vec![names[1].clone()];
    let done = model.quantize_tables(Some(&chosen)).unwrap();
    assert_eq!(done.len(), 1);
    assert!(model.quantize_tables(Some(&chosen)).unwrap().is_empty());
    let after = model.whole_tables().unwrap().unwrap();
    for (t, (b, a)) in before.iter().zip(&after).enumerate() {
        if t == 1 {
            assert!(a.packed.is_some() && a.state.is_empty());
        } else {
            assert_eq!(b, a, "table {t} unchanged");
        }
    }
    let unknown = vec!["no-such-table".to_string()];
    assert!(model.quantize_tables(Some(&unknown)).is_err());
    // Round trip through a checkpoint with a per-table precision.
    let dir = Tmp::new("some");
    let path = dir.0.join("some.safetensors");
    let mut qcfg = cfg.clone();
    qcfg.model
        .table_precisions
        .insert(names[1].clone(), TablePrecision::Int8);
    let want = logits(&mut model, &batch);
    checkpoint::save(&path, &mut model, &qcfg, progress(), &[]).unwrap();
    let ckpt = Checkpoint::read(&path).unwrap();
    let s = schema(&qcfg.data, &qcfg.base_dir).unwrap();
    let mut back = ckpt.restore(&ckpt.config().unwrap(), &s).unwrap();
    assert_eq!(logits(&mut back, &batch), want);
}

#[test]
fn int8_tables_are_refused_for_training_and_on_clusters() {
    let mut cfg = config();
    cfg.model.table_precision = TablePrecision::Int8;
    let dir = Tmp::new("refused");
    let opts = towerrec_train::TrainOptions {
        out_dir: dir.0.clone(),
        ..Default::default()
    };
    let err = match towerrec_train::train(&cfg, &opts, &mut towerrec_train::trainer::Silent) {
        Ok(_) => panic!("trained int8 tables"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("training needs fp32, fp16 or bf16"), "{err}");
    let batches = common::uneven_batches(&config(), 2);
    let timing = towerrec_train::bench::Timing {
        warmup: 1,
        steps: 1,
        reps: 1,
        group: 1,
    };
    let topology = Topology::new(1, 2).unwrap();
    let infer = towerrec_train::bench::Mode::Infer;
    let err = match towerrec_train::bench::bench_cluster(
        &cfg, &batches, infer, timing, topology, None, 1,
    ) {
        Ok(_) => panic!("int8 tables ran on a cluster"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("a cluster needs"), "{err}");
    // In one process, inference runs and training is refused.
    let train = towerrec_train::bench::Mode::Train;
    assert!(towerrec_train::bench::bench_model(&cfg, &batches, infer, timing).is_ok());
    assert!(towerrec_train::bench::bench_model(&cfg, &batches, train, timing).is_err());
}
