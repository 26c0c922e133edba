//! `towerrec bench kernels`: our kernels beside the machine's limits, measured in the
//! same run.
//!
//! Limits ([`towerrec_core::probe`], best repetition): copy bandwidth, random-gather
//! bandwidth for each row size looked up (2 MiB pages with prefetch, 4 KiB pages with
//! and without prefetch), f32 GEMM throughput at 1024³. Kernels (median repetition):
//! the pooled lookup ([`EmbeddingBag::forward`]) and the fused SGD backward-update
//! ([`EmbeddingBag::backward_update`]) on DLRM-like batches of `--features` features
//! with uniform random ids, and forward + backward of the Kaggle-like top and bottom
//! MLPs. Each kernel line shows its percentage of the matching limit: the best gather of
//! the same row size for embeddings, GEMM for MLPs.

use anyhow::{bail, Result};
use clap::Args;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use towerrec_core::embedding::{EmbeddingBag, Pooling, SparseOptimizer};
use towerrec_core::layers::activation::Activation;
use towerrec_core::layers::mlp::Mlp;
use towerrec_core::probe::{self, HugePageBuf, Pages, Rate};
use towerrec_core::{KeyedJagged, Layer};

const GIB: f64 = (1u64 << 30) as f64;
const MIB: usize = 1 << 20;

#[derive(Args)]
pub struct KernelsArgs {
    /// Worker threads, for the probes and the kernels [default: one per core].
    #[arg(long)]
    threads: Option<usize>,
    /// Rows of each benchmarked embedding table [default: as many as fill --table-gib].
    #[arg(long)]
    rows: Option<usize>,
    /// Embedding dims to benchmark, each paired with the --pooling at the same position.
    #[arg(long, value_delimiter = ',', default_values_t = [16, 64])]
    dims: Vec<usize>,
    /// Ids per bag (pooling factor) for each of --dims (one value applies to all).
    #[arg(long, value_delimiter = ',', default_values_t = [1, 20])]
    pooling: Vec<usize>,
    /// Samples per batch, for lookups and MLPs.
    #[arg(long, default_value_t = 2048)]
    batch: usize,
    /// Sparse features per batch (all looked up in the benchmarked table).
    #[arg(long, default_value_t = 26)]
    features: usize,
    /// Size of each embedding table and of the gather probe's table, in GiB
    /// [default: 1, or 0.25 with --quick].
    #[arg(long)]
    table_gib: Option<f64>,
    /// Smaller tables and shorter timings (a few seconds in all).
    #[arg(long)]
    quick: bool,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

/// A kernel's measured rate beside the limit it is compared with.
struct KernelLine {
    label: String,
    json: Value,
    value: f64,
    unit: &'static str,
    limit_label: String,
    limit: f64,
}

/// One gather-probe result.
struct Gather {
    row_bytes: usize,
    huge: bool,
    prefetch: bool,
    gbps: f64,
}

pub fn run(a: KernelsArgs) -> Result<()> {
    let threads = a
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    if threads == 0 {
        bail!("--threads must be at least 1");
    }
    crate::commands::set_threads(crate::commands::check_threads(threads, "--threads")?)?;
    let pooling: Vec<usize> = match a.pooling.len() {
        1 => vec![a.pooling[0]; a.dims.len()],
        n if n == a.dims.len() => a.pooling.clone(),
        n => bail!(
            "--pooling has {n} values for {} --dims: give one, or one per dim",
            a.dims.len()
        ),
    };
    if a.dims.contains(&0) || a.batch == 0 || a.features == 0 {
        bail!("--dims, --batch and --features must be positive");
    }
    let gib = a.table_gib.unwrap_or(if a.quick { 0.25 } else { 1.0 });
    if !(gib > 0.0 && gib <= 64.0) {
        bail!("--table-gib must be in (0, 64], got {gib}");
    }
    let table_bytes = ((gib * GIB) as usize).max(MIB);
    let budget = Duration::from_millis(if a.quick { 150 } else { 700 });
    let started = Instant::now();
    if !a.json {
        println!(
            "bench kernels: {threads} threads, batch {} × {} features, tables {gib:.2} GiB, \
             {:.2} s per measurement",
            a.batch,
            a.features,
            budget.as_secs_f64()
        );
        println!("machine limits (best repetition)");
    }

    // Limits.
    let copy_bytes = if a.quick { 64 * MIB } else { 256 * MIB };
    let copy = probe::copy_bandwidth(copy_bytes, threads, budget, Rate::Best);
    if !a.json {
        println!(
            "  {:<46} {copy:>8.1} GB/s",
            format!("copy {} MiB (read + write)", copy_bytes / MIB)
        );
    }
    let mut row_sizes: Vec<usize> = a.dims.iter().map(|d| d * 4).collect();
    row_sizes.sort_unstable();
    row_sizes.dedup();
    let mut gathers = Vec::new();
    let mut huge_ok = false;
    for pages in [Pages::Huge, Pages::Small] {
        // One table per page size (the huge one is freed before the small one exists).
        let table = HugePageBuf::<f32>::from_elem_with(table_bytes / 4, 1.0, pages);
        let huge = pages == Pages::Huge;
        huge_ok |= table.huge_pages();
        let prefetches: &[bool] = if huge { &[true] } else { &[true, false] };
        for &rb in &row_sizes {
            for &prefetch in prefetches {
                let gbps =
                    probe::gather_bandwidth_in(&table, rb, prefetch, threads, budget, Rate::Best);
                if !a.json {
                    println!(
                        "  {:<46} {gbps:>8.1} GB/s",
                        format!(
                            "gather {rb} B rows, {}, {}",
                            if huge { "2 MiB pages" } else { "4 KiB pages" },
                            if prefetch { "prefetch" } else { "no prefetch" }
                        )
                    );
                }
                gathers.push(Gather {
                    row_bytes: rb,
                    huge,
                    prefetch,
                    gbps,
                });
            }
        }
    }
    if !a.json && !huge_ok {
        println!("  (the kernel refused huge pages: 2 MiB rows above are on 4 KiB pages)");
    }
    let gemm_n = 1024;
    let gemm = probe::gemm_gflops(gemm_n, threads, budget, Rate::Best);
    if !a.json {
        println!(
            "  {:<46} {gemm:>8.1} GFLOP/s",
            format!("GEMM f32 {gemm_n}³")
        );
        println!("kernels (median repetition)");
    }
    let best_gather = |rb: usize| {
        gathers
            .iter()
            .filter(|g| g.row_bytes == rb)
            .map(|g| g.gbps)
            .fold(0.0, f64::max)
    };

    // Embedding kernels.
    let mut lines = Vec::new();
    let mut rng = SmallRng::seed_from_u64(0x7e57);
    for (&dim, &pool) in a.dims.iter().zip(&pooling) {
        let rb = dim * 4;
        let rows = a.rows.unwrap_or(table_bytes / rb).max(1);
        let limit = best_gather(rb);
        let limit_label = format!("gather {rb} B");
        for l in bench_embedding(&a, dim, pool, rows, budget, &mut rng)? {
            let line = KernelLine {
                limit_label: limit_label.clone(),
                limit,
                ..l
            };
            print_line(&a, &line);
            lines.push(line);
        }
    }

    // MLPs.
    let mut mlp_lines = Vec::new();
    for (name, dims, last) in [
        ("top", vec![367, 512, 256, 1], Activation::Identity),
        ("bottom", vec![13, 512, 256, 64, 16], Activation::Relu),
    ] {
        let (gflops, needs_dx) = bench_mlp(
            &dims,
            last,
            name == "top",
            a.batch,
            budget,
            Rate::Median,
            &mut rng,
        );
        let dims_s: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
        let line = KernelLine {
            label: format!("{name} MLP {} fwd+bwd", dims_s.join("-")),
            json: json!({
                "kernel": "mlp_forward_backward",
                "mlp": name,
                "dims": dims,
                "batch": a.batch,
                "input_grad": needs_dx,
            }),
            value: gflops,
            unit: "GFLOP/s",
            limit_label: format!("GEMM {gemm_n}³"),
            limit: gemm,
        };
        mlp_lines.push(line);
    }
    // A limit is the best the machine reaches: measure GEMM again, since another
    // process may have disturbed the first measurement.
    let gemm_again = probe::gemm_gflops(gemm_n, threads, budget, Rate::Best);
    let gemm = gemm.max(gemm_again);
    for mut line in mlp_lines {
        line.limit = gemm;
        print_line(&a, &line);
        lines.push(line);
    }
    if !a.json {
        println!("  (GEMM f32 {gemm_n}³ measured again after the MLPs: {gemm_again:.1} GFLOP/s; the best of both is the limit)");
    }

    let elapsed = started.elapsed().as_secs_f64();
    if a.json {
        let kernels: Vec<Value> = lines
            .iter()
            .map(|l| {
                let mut j = l.json.clone();
                j["value"] = json!(l.value);
                j["unit"] = json!(l.unit);
                j["limit"] = json!(l.limit);
                j["limit_name"] = json!(l.limit_label);
                j["fraction_of_limit"] = json!(l.value / l.limit);
                j
            })
            .collect();
        let gathers: Vec<Value> = gathers
            .iter()
            .map(|g| {
                json!({
                    "row_bytes": g.row_bytes,
                    "huge_pages": g.huge,
                    "prefetch": g.prefetch,
                    "gbps": g.gbps,
                })
            })
            .collect();
        let out = json!({
            "threads": threads,
            "batch": a.batch,
            "features": a.features,
            "table_bytes": table_bytes,
            "huge_pages_available": huge_ok,
            "budget_s": budget.as_secs_f64(),
            "limits": {
                "copy_gbps": copy,
                "copy_bytes": copy_bytes,
                "gather": gathers,
                "gemm_n": gemm_n,
                "gemm_gflops": gemm,
            },
            "kernels": kernels,
            "elapsed_s": elapsed,
        });
        println!("{}", serde_json::to_string(&out)?);
    } else {
        println!(
            "GB/s are 10⁹ bytes/s: lookups count the rows gathered, updates the unique rows \
             read and written; {elapsed:.1} s in all"
        );
    }
    Ok(())
}

fn print_line(a: &KernelsArgs, l: &KernelLine) {
    if !a.json {
        println!(
            "  {:<46} {:>8.1} {:<8} {:>5.1}% of {} ({:.1})",
            l.label,
            l.value,
            l.unit,
            100.0 * l.value / l.limit,
            l.limit_label,
            l.limit
        );
    }
}

/// Distinct batches cycled over: enough that their rows (about 256 MiB) outgrow the
/// caches, at most 64, at least 2.
fn batch_count(bytes_per_batch: usize) -> usize {
    (256 * MIB).div_ceil(bytes_per_batch.max(1)).clamp(2, 64)
}

/// Median GB/s of towerrec's pooled lookup (rows read) and fused SGD backward-update
/// (distinct rows read and written) of a `rows × dim` table, `features` bags of `pool`
/// uniform ids per sample, `batch` samples per batch.
pub(crate) fn embedding_rates(
    dim: usize,
    pool: usize,
    rows: usize,
    batch: usize,
    features: usize,
    budget: Duration,
    rng: &mut SmallRng,
) -> Result<(f64, f64)> {
    let rb = dim * 4;
    let mut table = EmbeddingBag::new("bench", rows, dim, Pooling::Sum, SparseOptimizer::Sgd, rng);
    let ids_per_batch = batch * features * pool;
    let n_batches = batch_count(ids_per_batch * rb);
    let keys: Vec<String> = (0..features).map(|f| format!("f{f}")).collect();
    let lengths = vec![pool as u32; batch * features];
    let mut batches = Vec::with_capacity(n_batches);
    // Unique rows per batch, summed over features: what the update reads and writes.
    let mut unique = Vec::with_capacity(n_batches);
    for _ in 0..n_batches {
        let values: Vec<u64> = (0..ids_per_batch)
            .map(|_| rng.random_range(0..rows as u64))
            .collect();
        let mut u = 0;
        for chunk in values.chunks(batch * pool) {
            let mut s = chunk.to_vec();
            s.sort_unstable();
            s.dedup();
            u += s.len();
        }
        unique.push(u);
        batches.push(KeyedJagged::from_lengths(
            keys.clone(),
            batch,
            &lengths,
            values,
        )?);
    }
    let stride = features * dim;
    let mut out = vec![0.0f32; batch * stride];
    let grad: Vec<f32> = (0..batch * stride)
        .map(|_| rng.random_range(-1e-3..1e-3))
        .collect();

    // Warm-up: one pass over every batch, untimed.
    for kj in &batches {
        for f in 0..features {
            table.forward(kj.feature(f), &mut out, stride, f * dim)?;
        }
    }
    let mut next = 0;
    let mut err = Ok(());
    let times = probe::timed_reps(budget, probe::MIN_REPS, || {
        let kj = &batches[next % n_batches];
        next += 1;
        for f in 0..features {
            if let Err(e) = table.forward(kj.feature(f), &mut out, stride, f * dim) {
                err = Err(e);
            }
        }
        std::hint::black_box(&mut out);
    });
    err?;
    let lookup = (ids_per_batch * rb) as f64 / probe::median_secs(&times) / 1e9;

    let mut next = 0;
    let mut bytes = 0usize;
    let mut err = Ok(());
    let times = probe::timed_reps(budget, probe::MIN_REPS, || {
        let i = next % n_batches;
        next += 1;
        bytes += 2 * unique[i] * rb;
        for f in 0..features {
            if let Err(e) =
                table.backward_update(batches[i].feature(f), &grad, stride, f * dim, 1e-3)
            {
                err = Err(e);
            }
        }
    });
    err?;
    // Batches differ in unique rows only slightly: use the mean bytes per repetition.
    let update = bytes as f64 / times.len() as f64 / probe::median_secs(&times) / 1e9;
    Ok((lookup, update))
}

/// Lookup and fused SGD backward-update on a `rows × dim` table, bags of `pool` ids.
fn bench_embedding(
    a: &KernelsArgs,
    dim: usize,
    pool: usize,
    rows: usize,
    budget: Duration,
    rng: &mut SmallRng,
) -> Result<Vec<KernelLine>> {
    let (batch, features) = (a.batch, a.features);
    let (lookup, update) = embedding_rates(dim, pool, rows, batch, features, budget, rng)?;
    let rb = dim * 4;
    let common = json!({
        "dim": dim,
        "pooling": pool,
        "rows": rows,
        "row_bytes": rb,
        "batch": batch,
        "features": features,
    });
    let with = |kernel: &str| {
        let mut j = common.clone();
        j["kernel"] = json!(kernel);
        j
    };
    Ok(vec![
        KernelLine {
            label: format!("lookup dim {dim} pooling {pool} ({rb} B rows)"),
            json: with("pooled_lookup"),
            value: lookup,
            unit: "GB/s",
            limit_label: String::new(),
            limit: f64::NAN,
        },
        KernelLine {
            label: format!("SGD update dim {dim} pooling {pool} (r+w)"),
            json: with("fused_backward_update_sgd"),
            value: update,
            unit: "GB/s",
            limit_label: String::new(),
            limit: f64::NAN,
        },
    ])
}

/// Forward + backward GFLOP/s of an MLP at `batch` rows (the repetitions' `rate`), and
/// whether the input gradient was computed (a top MLP passes it on; a bottom MLP's
/// input is data). Counts `2·batch·in·out` per GEMM: one forward, one weight gradient, and one
/// input gradient for every layer whose input needs one; biases and activations are
/// not counted.
pub(crate) fn bench_mlp(
    dims: &[usize],
    last: Activation,
    input_grad: bool,
    batch: usize,
    budget: Duration,
    rate: Rate,
    rng: &mut SmallRng,
) -> (f64, bool) {
    let mut mlp = Mlp::<f32>::new(dims, Activation::Relu, last, rng);
    let (din, dout) = (dims[0], dims[dims.len() - 1]);
    let x: Vec<f32> = (0..batch * din)
        .map(|_| rng.random_range(-1.0..1.0))
        .collect();
    let dy: Vec<f32> = (0..batch * dout)
        .map(|_| rng.random_range(-1.0..1.0))
        .collect();
    let mut y = vec![0.0f32; batch * dout];
    let mut dx = vec![0.0f32; if input_grad { batch * din } else { 0 }];
    let mut step = || {
        mlp.forward(&x, &mut y, batch);
        let dx = if input_grad { Some(&mut dx[..]) } else { None };
        mlp.backward(&x, &y, &dy, dx, batch);
    };
    step();
    let times = probe::timed_reps(budget, probe::MIN_REPS, step);
    let macs: Vec<f64> = dims.windows(2).map(|w| (w[0] * w[1]) as f64).collect();
    let total: f64 = macs.iter().sum();
    let dx_macs = if input_grad { total } else { total - macs[0] };
    let flops = 2.0 * batch as f64 * (2.0 * total + dx_macs);
    (flops / rate.secs(&times) / 1e9, input_grad)
}
