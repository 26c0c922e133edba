//! Scoring a stream with consecutive batches overlapped gives bit for bit the logits
//! of one forward per batch: DLRM and DCN, one process on 1–3 threads and an
//! in-process 2×2 cluster; and a failing batch leaves the pipeline empty.

use std::borrow::Cow;
use std::cell::RefCell;
use std::path::Path;
use towerrec_comm::{Comm, Topology};
use towerrec_core::Batch;
use towerrec_data::{next_batch, open, schema, Part};
use towerrec_plan::planners;
use towerrec_train::cluster::{rank_slice, run_ranks};
use towerrec_train::forward::PipelinedForward;
use towerrec_train::trainer::train_step;
use towerrec_train::{Config, Model};

use crate::common;
use crate::common::{DCN, DLRM};

fn config(model: &str, rows: u64) -> Config {
    let text = format!(
        r#"
[model]
{model}

[optimizer]
dense = {{ kind = "adam" }}
dense_lr = 0.01
sparse = {{ kind = "sgd" }}
sparse_lr = 0.1

[train]
batch_size = 30
seed = 3

[data]
format = "synthetic"
train_samples = 400
eval_samples = 60
num_dense = 4
seed = 5
tables = [
  {{ rows = {rows}, pooling = {{ mean = 3.0 }}, count = 3 }},
  {{ rows = 7, pooling = 2 }},
]
"#
    );
    Config::from_toml(&text, "test", Path::new(".")).expect("test config")
}

/// Batches of uneven sizes, so that consecutive batches in the pipeline differ.
fn batches(cfg: &Config) -> Vec<Batch> {
    let mut stream = open(&cfg.data, Part::Train, cfg.train.bad_rows, &cfg.base_dir).unwrap();
    let mut out = Vec::new();
    for size in [30, 29, 7, 3, 1, 30, 16] {
        out.push(next_batch(stream.as_mut(), size).unwrap().unwrap());
    }
    out
}

/// A model trained for a few steps, so that its layers are not at their initial values.
fn trained(cfg: &Config, model: &mut Model, batches: &[Batch]) {
    let (mut logits, mut grad) = (Vec::new(), Vec::new());
    let (rank, world) = model.comm().map_or((0, 1), |c| (c.rank(), c.size()));
    for b in batches {
        let lrs = (
            cfg.optimizer.dense_lr as f32,
            cfg.optimizer.sparse_lr as f32,
        );
        let mine = rank_slice(b, rank, world);
        train_step(model, &mine, lrs, &mut logits, &mut grad).unwrap();
    }
}

/// Each batch's logits, one forward at a time and through a pipeline of `group`.
fn both_ways(model: &mut Model, batches: &[Batch], group: usize) -> (Vec<Vec<f32>>, Vec<Vec<f32>>) {
    let (rank, world) = model.comm().map_or((0, 1), |c| (c.rank(), c.size()));
    let mut logits = Vec::new();
    let mut one_by_one = Vec::new();
    for b in batches {
        model
            .forward(&rank_slice(b, rank, world), &mut logits)
            .unwrap();
        one_by_one.push(logits.clone());
    }
    let pipelined = RefCell::new(Vec::new());
    let done = |logits: &[f32], _: Option<&Comm>| {
        pipelined.borrow_mut().push(logits.to_vec());
        Ok(())
    };
    let mut pipeline = PipelinedForward::new(model, group);
    for (i, b) in batches.iter().enumerate() {
        pipeline.push(rank_slice(b, rank, world), done).unwrap();
        // A group's logits come out when the group after it is full.
        let want = ((i + 1) / group).saturating_sub(1) * group;
        assert_eq!(
            pipelined.borrow().len(),
            want,
            "after push {i}, group {group}"
        );
    }
    pipeline.finish(done).unwrap();
    assert_eq!(pipelined.borrow().len(), batches.len());
    pipeline.finish(done).unwrap();
    (one_by_one, pipelined.into_inner())
}

fn single_process(model_text: &str, threads: usize) {
    let cfg = config(model_text, 50);
    let s = schema(&cfg.data, &cfg.base_dir).unwrap();
    let data = batches(&cfg);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap();
    for group in [1, 2, 3, 8] {
        let (one_by_one, pipelined) = pool.install(|| {
            let mut model = common::single(&cfg, &s, cfg.train.seed).unwrap();
            trained(&cfg, &mut model, &data[..3]);
            both_ways(&mut model, &data, group)
        });
        assert_eq!(one_by_one.len(), data.len());
        for (i, (a, b)) in one_by_one.iter().zip(&pipelined).enumerate() {
            assert_eq!(a.len(), data[i].batch_size());
            assert_eq!(a, b, "batch {i} on {threads} threads, group {group}");
        }
    }
}

#[test]
fn dlrm_pipelined_logits_equal_one_forward_per_batch() {
    for threads in [1, 2, 3] {
        single_process(DLRM, threads);
    }
}

#[test]
fn dcn_pipelined_logits_equal_one_forward_per_batch() {
    for threads in [1, 2] {
        single_process(DCN, threads);
    }
}

#[test]
fn sharded_pipelined_logits_equal_one_forward_per_batch() {
    let cfg = config(DLRM, 50);
    let s = schema(&cfg.data, &cfg.base_dir).unwrap();
    let data = batches(&cfg);
    let topology = Topology::new(2, 2).unwrap();
    let specs = towerrec_train::cluster::table_specs(&cfg, &s);
    let plan = planners::row_wise(&specs, topology).unwrap();
    let outs = run_ranks(topology, 2, |comm: Comm| {
        let mut model = common::sharded(&cfg, &s, cfg.train.seed, comm, &plan)?;
        trained(&cfg, &mut model, &data[..3]);
        Ok([1, 3].map(|group| both_ways(&mut model, &data, group)))
    })
    .unwrap();
    for (rank, per_group) in outs.iter().enumerate() {
        for (one_by_one, pipelined) in per_group {
            assert_eq!(one_by_one, pipelined, "rank {rank}");
        }
    }
}

#[test]
fn a_failing_batch_empties_the_pipeline_and_the_next_starts_afresh() {
    let cfg = config(DLRM, 50);
    // Same shapes, ids up to 5000: out of range for the model's 50-row tables.
    let wide = batches(&config(DLRM, 5000));
    let s = schema(&cfg.data, &cfg.base_dir).unwrap();
    let good = batches(&cfg);
    let mut model = common::single(&cfg, &s, cfg.train.seed).unwrap();
    let mut want = Vec::new();
    for b in &good[..3] {
        let mut logits = Vec::new();
        model.forward(b, &mut logits).unwrap();
        want.push(logits);
    }

    let got = RefCell::new(Vec::new());
    let done = |logits: &[f32], _: Option<&Comm>| {
        got.borrow_mut().push(logits.to_vec());
        Ok(())
    };
    let mut pipeline = PipelinedForward::new(&mut model, 2);
    for b in &good[..2] {
        pipeline.push(Cow::Borrowed(b), done).unwrap();
    }
    pipeline.push(Cow::Borrowed(&good[2]), done).unwrap();
    let err = pipeline.push(Cow::Borrowed(&wide[0]), done).unwrap_err();
    assert!(err.to_string().contains("out of range"), "{err}");
    // The group before the failing one was finished and handed over.
    assert_eq!(*got.borrow(), want[..2]);
    pipeline.finish(done).unwrap();
    assert_eq!(got.borrow().len(), 2, "the failed group was dropped");
    pipeline.push(Cow::Borrowed(&good[2]), done).unwrap();
    pipeline.finish(done).unwrap();
    assert_eq!(*got.borrow(), want[..3]);
}
