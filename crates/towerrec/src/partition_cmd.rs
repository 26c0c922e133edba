//! `towerrec partition`: DMT's Tower Partitioner (§3.3) on a trained run. The pooled
//! embedding of every sparse feature, for samples of the run's training data, from the
//! checkpoint's tables; their interaction matrix; towers from it (or the naive strided
//! baseline); the partition as JSON (docs/DMT.md) with two SVGs beside it.

use crate::commands::{check_threads, set_threads};
use crate::partition_plot;
use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, ValueEnum};
use std::path::{Path, PathBuf};
use towerrec_core::embedding::{EmbeddingBag, SparseOptimizer};
use towerrec_data::Part;
use towerrec_plan::partition::{
    affinity, embed, naive, partition, size_bounds, InteractionAccumulator, Matrix, Method, Mode,
    PartitionOptions, StressOptions, TowerPartition,
};
use towerrec_train::checkpoint::{self, Checkpoint};
use towerrec_train::files::Files;
use towerrec_train::{Config, Model};

/// How the interaction becomes a distance.
#[derive(Clone, Copy, ValueEnum)]
pub enum ModeArg {
    /// D = 1 − I: features that interact share a tower.
    Coherent,
    /// D = I: features that interact are spread over towers.
    Diverse,
}

impl From<ModeArg> for Mode {
    fn from(m: ModeArg) -> Self {
        match m {
            ModeArg::Coherent => Mode::Coherent,
            ModeArg::Diverse => Mode::Diverse,
        }
    }
}

#[derive(Args)]
pub struct PartitionArgs {
    /// A run directory written by `towerrec train`, or its checkpoint file.
    #[arg(long)]
    checkpoint: PathBuf,
    /// Number of towers (at least 1, at most the number of sparse features).
    #[arg(long)]
    towers: usize,
    /// coherent: interacting features together; diverse: spread apart.
    #[arg(long, value_enum, default_value = "coherent")]
    mode: ModeArg,
    /// Write the partition here (its directory and parents are created); the SVGs go
    /// beside it (NAME.interaction.svg, NAME.embedding.svg) [default: partition.json in
    /// the run directory].
    #[arg(long, value_name = "FILE.json")]
    out: Option<PathBuf>,
    /// Dimensions of the feature embedding the towers are clustered in.
    #[arg(long, default_value_t = 2)]
    dims: usize,
    /// K: the largest tower holds at most K times the smallest (or one more than it, so
    /// 1 means sizes ⌊F/T⌋ and ⌈F/T⌉).
    #[arg(long, value_name = "K", default_value_t = 1.0)]
    max_ratio: f64,
    /// Seed of the embedding and the k-means starts.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Batches of the run's training data (of its batch size) to average over.
    #[arg(long, value_name = "N", default_value_t = 8)]
    batches: usize,
    /// Write the naive strided baseline (tower t: features t, t+T, t+2T, …) instead.
    #[arg(long)]
    naive: bool,
    /// Worker threads [default: one per core].
    #[arg(long)]
    threads: Option<usize>,
    /// Measure on training data whose content changed since the checkpoint (refused
    /// by default, as `train --resume` refuses it).
    #[arg(long)]
    allow_data_change: bool,
}

pub fn run(a: PartitionArgs) -> Result<()> {
    set_threads(check_threads(a.threads.unwrap_or(0), "--threads")?)?;
    if a.batches == 0 {
        bail!("--batches 0: the interaction is a mean over samples; give at least 1");
    }
    if a.dims == 0 {
        bail!("--dims 0: the embedding needs at least 1 dimension");
    }
    crate::commands::recover_run_dir(&a.checkpoint)?;
    let ckpt_path = checkpoint::resolve(&a.checkpoint);
    if !ckpt_path.is_file() {
        bail!(
            "--checkpoint {}: no checkpoint there ({} not found); give a run directory written by `towerrec train` or its checkpoint file",
            a.checkpoint.display(),
            ckpt_path.display()
        );
    }
    let ckpt = Checkpoint::read(&ckpt_path)?;
    let cfg = ckpt.config()?;
    if !a.allow_data_change {
        ckpt.check_data(&cfg)?;
    }
    let schema = towerrec_data::schema(&cfg.data, &cfg.base_dir)?;
    let names: Vec<String> = schema.sparse.iter().map(|f| f.name.clone()).collect();
    if names.is_empty() {
        bail!("the run's data has no sparse features: there is nothing to partition");
    }
    size_bounds(names.len(), a.towers, a.max_ratio)
        .with_context(|| format!("--towers {} --max-ratio {}", a.towers, a.max_ratio))?;
    let json_path = match &a.out {
        Some(p) => p.clone(),
        None => ckpt_path
            .parent()
            .unwrap_or(Path::new("."))
            .join("partition.json"),
    };
    let (heat_path, scatter_path) = (
        sibling(&json_path, "interaction.svg"),
        sibling(&json_path, "embedding.svg"),
    );
    let mut files = Files::new("partition");
    files.input("the checkpoint", &ckpt_path)?;
    files.config(None, &cfg)?;
    files.output("--out", &json_path)?;
    files.output("--out's interaction plot", &heat_path)?;
    files.output("--out's embedding plot", &scatter_path)?;
    // The folder (and its parents) made before the work, as `profile` makes its own,
    // so that a path it cannot make fails at once.
    if let Some(dir) = json_path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| {
            format!(
                "--out {}: creating the directory {}",
                json_path.display(),
                dir.display()
            )
        })?;
    }

    crate::commands::clean(&files);
    let mut model = ckpt.restore(&cfg, &schema)?;
    let (interaction, samples) = interaction(&cfg, &mut model, a.batches)?;
    drop(model);
    eprintln!(
        "interaction of {} features over {samples} samples of the training data",
        names.len()
    );

    let mode = Mode::from(a.mode);
    let opts = PartitionOptions {
        stress: StressOptions {
            dims: a.dims,
            ..StressOptions::default()
        },
        max_ratio: a.max_ratio,
        seed: a.seed,
        ..PartitionOptions::new(a.towers, mode)
    };
    let (method, towers, embedding) = if a.naive {
        // The embedding only places the features in the plot.
        let e = embed(&mode.distance(&interaction), &opts.stress, a.seed)?;
        (Method::Naive, naive(names.len(), a.towers)?, e)
    } else {
        let p = partition(&interaction, &opts)?;
        (Method::from(mode), p.towers, p.embedding)
    };
    eprintln!(
        "embedding in {} dimensions: {} Adam steps, stress-1 {:.3}",
        embedding.dims, embedding.iterations, embedding.normalized_stress
    );
    let aff = affinity(&interaction, &towers);
    let mut out = TowerPartition::new(method, &towers, &names)?;
    out.max_ratio = (!a.naive).then_some(a.max_ratio);
    out.seed = (!a.naive).then_some(a.seed);
    out.dims = Some(embedding.dims);
    out.samples = Some(samples);
    out.stress = Some(embedding.normalized_stress);
    out.affinity = Some(aff);
    towerrec_core::fsio::write_atomic(&json_path, out.to_json_pretty().as_bytes())
        .with_context(|| format!("writing {}", json_path.display()))?;
    eprintln!("wrote {}", json_path.display());
    let title = format!("{} towers ({})", towers.len(), method_name(method));
    let heading = format!("interaction |cos| by tower: {title}");
    partition_plot::heatmap(&heat_path, &interaction, &towers, &names, &heading)?;
    eprintln!("wrote {}", heat_path.display());
    partition_plot::scatter(&scatter_path, &embedding, &towers, &names, &title)?;
    eprintln!("wrote {}", scatter_path.display());
    println!("{}", summary(method, &towers, aff.within, aff.between));
    Ok(())
}

/// The interaction matrix of the model's tables over up to `batches` batches of the
/// run's training data, and the number of samples it averages.
fn interaction(cfg: &Config, model: &mut Model, batches: usize) -> Result<(Matrix, u64)> {
    let whole = model
        .whole_tables()?
        .ok_or_else(|| anyhow!("the model's tables are not whole in this process"))?;
    let dims: Vec<usize> = model.table_descs().iter().map(|d| d.dim).collect();
    let mut acc = InteractionAccumulator::new(&dims)?;
    let (f, n) = (acc.features(), acc.dim());
    // Plain tables over the checkpoint's weights, pooling as the run did.
    let tables: Vec<EmbeddingBag> = whole
        .into_iter()
        .zip(model.table_descs())
        .map(|(w, d)| {
            EmbeddingBag::try_from_fn(
                w.name,
                d.rows,
                d.dim,
                cfg.model.pooling,
                SparseOptimizer::Sgd,
                |r, row| row.copy_from_slice(&w.weights[r * d.dim..(r + 1) * d.dim]),
            )
        })
        .collect::<std::result::Result<_, _>>()?;
    let mut stream =
        towerrec_data::open(&cfg.data, Part::Train, cfg.train.bad_rows, &cfg.base_dir)?;
    let mut pooled = Vec::new();
    for _ in 0..batches {
        let Some(batch) = towerrec_data::next_batch(stream.as_mut(), cfg.train.batch_size)? else {
            break;
        };
        let b = batch.batch_size();
        pooled.clear();
        pooled.resize(b * f * n, 0.0);
        for (t, table) in tables.iter().enumerate() {
            table.forward(batch.sparse.feature(t), &mut pooled, f * n, t * n)?;
        }
        acc.add_batch(&pooled, b)?;
    }
    let samples = acc.samples();
    if samples == 0 {
        bail!(
            "the run's training data ({}) has no samples to measure the interaction on",
            cfg.data.describe(Part::Train, &cfg.base_dir)
        );
    }
    Ok((acc.finish()?, samples))
}

/// `dir/NAME.json` → `dir/NAME.<suffix>`.
fn sibling(json: &Path, suffix: &str) -> PathBuf {
    let stem = json
        .file_stem()
        .map_or_else(|| "partition".into(), |s| s.to_string_lossy().into_owned());
    json.with_file_name(format!("{stem}.{suffix}"))
}

fn method_name(m: Method) -> &'static str {
    match m {
        Method::Coherent => "coherent",
        Method::Diverse => "diverse",
        Method::Naive => "naive",
    }
}

/// One line: tower sizes and the mean interaction within and between towers.
fn summary(
    method: Method,
    towers: &[Vec<usize>],
    within: Option<f64>,
    between: Option<f64>,
) -> String {
    let sizes: Vec<String> = towers.iter().map(|t| t.len().to_string()).collect();
    let mean = |v: Option<f64>| v.map_or_else(|| "n/a".into(), |v| format!("{v:.3}"));
    format!(
        "{} partition: {} towers, sizes [{}]; mean interaction within towers {}, between {}",
        method_name(method),
        towers.len(),
        sizes.join(", "),
        mean(within),
        mean(between)
    )
}
