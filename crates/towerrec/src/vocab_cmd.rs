//! `towerrec vocab`: counts the values of every sparse feature over the training part
//! of a config's text data (never its evaluation part) and writes a vocabulary file
//! (docs/DATA.md, "Vocabularies") that `[data] vocab = "..."` then encodes with.

use crate::commands::{absolute, clean, BadRowsArg};
use anyhow::{bail, Context, Result};
use clap::Args;
use std::path::PathBuf;
use std::time::Instant;
use towerrec_data::vocab::{self, file::Counting, SketchOptions, VocabOptions};
use towerrec_data::{FileFingerprint, Part};
use towerrec_train::config::DEFAULT_MAX_BAD_FRACTION;
use towerrec_train::files::Files;
use towerrec_train::{Config, ReadCounts};

/// Bytes an exactly counted distinct value may take: a 16-byte (key, count) entry of a
/// hash map that is at least half full after growing, plus its control byte (34), and
/// its 16-byte (key, count) pair while the map is sorted into the vocabulary at the end.
const EXACT_BYTES_PER_VALUE: u64 = 50;

#[derive(Args)]
pub struct VocabArgs {
    /// Config whose [data] section describes the text data (Criteo TSV, schema CSV or Parquet).
    #[arg(long)]
    config: PathBuf,
    /// Input data file, overriding the config's (its split still applies).
    #[arg(long)]
    data: Option<PathBuf>,
    /// Override a config key (see `train --set`).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Output vocabulary file.
    #[arg(long)]
    out: PathBuf,
    /// Values seen fewer times in the training part share the out-of-vocabulary row 0.
    #[arg(long, default_value_t = 1)]
    min_count: u64,
    /// At most this many rows per table, the OOV row included: the hottest values win.
    #[arg(long)]
    max_rows: Option<u64>,
    /// Count in bounded memory (a count-min sketch with a top-k heap per feature, keeping
    /// the max_rows - 1 hottest values); needs --max-rows.
    #[arg(long)]
    sketch: bool,
    /// With --sketch: a count overestimates by at most this share of its feature's
    /// occurrences...
    #[arg(long, default_value_t = SketchOptions::default().epsilon)]
    sketch_epsilon: f64,
    /// ...except with this probability.
    #[arg(long, default_value_t = SketchOptions::default().delta)]
    sketch_delta: f64,
    /// Print the rows read every this many rows.
    #[arg(long, default_value_t = 1_000_000)]
    progress_every: u64,
    /// Whether malformed rows stop the count or are skipped and counted.
    #[arg(long, value_enum, default_value = "fail")]
    bad_rows: BadRowsArg,
    /// With --bad-rows skip: the largest share of malformed rows before the count fails.
    #[arg(long, value_name = "FRACTION", default_value_t = DEFAULT_MAX_BAD_FRACTION,
          value_parser = crate::commands::parse_fraction)]
    max_bad_fraction: f64,
}

pub fn run(a: VocabArgs) -> Result<()> {
    let mut cfg = Config::load(&a.config, &a.set)?;
    cfg.override_data(absolute(a.data)?, None);
    // The config's own vocabulary is not an input here: rebuilding it in place is the
    // usual way to refresh it.
    let mut files = Files::new("vocab");
    files.input("the config", &a.config)?;
    for (role, p) in cfg.data.input_files(&cfg.base_dir) {
        files.input(format!("the input {role} data file"), &p)?;
    }
    files.output("--out", &a.out)?;
    clean(&files);
    let opts = VocabOptions {
        min_count: a.min_count,
        max_rows: a.max_rows,
        sketch: a.sketch.then_some(SketchOptions {
            epsilon: a.sketch_epsilon,
            delta: a.sketch_delta,
        }),
    };
    let source = cfg.data.describe(Part::Train, &cfg.base_dir);
    let mut stream =
        towerrec_data::source::open_keys(&cfg.data, Part::Train, a.bad_rows.into(), &cfg.base_dir)?;
    eprintln!("counting the values of {source}");
    let started = Instant::now();
    let every = a.progress_every.max(1);
    let mut next = every;
    let mut vocab = vocab::build(stream.as_mut(), &opts, |n| {
        if n >= next {
            eprintln!("{n} rows read");
            next = (n / every + 1) * every;
        }
    })?;
    let seconds = started.elapsed().as_secs_f64();
    let read = ReadCounts {
        rows: vocab.info.rows_read,
        skipped: stream.skipped(),
    };
    if read.rows == 0 {
        bail!("{source} has no rows to count: no vocabulary written");
    }
    towerrec_train::trainer::check_read("training", read, true, a.max_bad_fraction, &source)?;
    if let Some((_, train)) = cfg
        .data
        .input_files(&cfg.base_dir)
        .into_iter()
        .find(|(role, _)| *role == "train")
    {
        let limit = cfg.train.fingerprint_whole_mib.saturating_mul(1 << 20);
        vocab.info.source = Some(FileFingerprint::of(&train, limit)?);
    }
    vocab.info.source_part = source;
    vocab
        .write(&a.out)
        .with_context(|| format!("writing --out {}", a.out.display()))?;
    summary(&vocab, &opts);
    println!(
        "wrote {} ({} features, {} rows read in {seconds:.1}s, {:.0} rows/s{}), checksum {}",
        a.out.display(),
        vocab.features.len(),
        vocab.info.rows_read,
        vocab.info.rows_read as f64 / seconds.max(1e-9),
        match stream.skipped() {
            0 => String::new(),
            n => format!(", {n} malformed rows skipped"),
        },
        vocab.checksum()
    );
    Ok(())
}

/// One line per feature, and what the counting held in memory.
fn summary(vocab: &vocab::Vocab, opts: &VocabOptions) {
    for f in &vocab.features {
        let distinct = f.distinct.map_or("? distinct (sketched)".to_string(), |d| {
            format!("{d} distinct")
        });
        let approx = if opts.sketch.is_some() { "≥" } else { "" };
        println!(
            "{}: {distinct}, {} kept ({} rows), OOV {approx}{:.2}% of {} occurrences",
            f.name,
            f.keys.len(),
            f.rows(),
            100.0 * f.oov_share(),
            f.occurrences
        );
    }
    match vocab.info.counting {
        Counting::Exact => {
            let distinct: u64 = vocab.features.iter().filter_map(|f| f.distinct).sum();
            println!(
                "exact counts: {distinct} distinct values held, at most about {:.1} MiB \
                 ({EXACT_BYTES_PER_VALUE} bytes a value)",
                (distinct * EXACT_BYTES_PER_VALUE) as f64 / (1u64 << 20) as f64
            );
        }
        Counting::Sketch { epsilon, delta } => {
            let s = SketchOptions { epsilon, delta };
            let top = opts.max_rows.unwrap_or(1).saturating_sub(1);
            let per = s.bytes_per_feature() + top * 100;
            println!(
                "sketched counts: about {:.1} MiB per feature, {:.1} MiB in all; a kept \
                 count overestimates by at most {epsilon} × its feature's occurrences \
                 ({}) except with probability {delta}, so values seen fewer than \
                 min_count times may be kept and a value's rank may be off by that much",
                per as f64 / (1u64 << 20) as f64,
                (per * vocab.features.len() as u64) as f64 / (1u64 << 20) as f64,
                vocab
                    .features
                    .iter()
                    .map(|f| format!("{} {:.0}", f.name, epsilon * f.occurrences as f64))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
    }
}
