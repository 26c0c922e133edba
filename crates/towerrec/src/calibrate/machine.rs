//! The compute and memory probes of `towerrec calibrate`: GEMM, towerrec's own MLP
//! layers and dot interaction, a large copy, and random row gathers by row size.

use super::*;

/// Number of compute and memory measurements (progress steps).
pub(super) const PROBES: usize = 7 + ROW_BYTES.len();

/// The compute and memory probes of one process.
#[derive(Debug, Clone)]
pub(super) struct Machine {
    pub(super) threads: usize,
    /// How the GEMM, MLP, copy and gather rates were taken from their repetitions.
    pub(super) rate: Rate,
    pub(super) gemm_gflops: f64,
    /// The same GEMM with bf16 operands through this build's bf16 kernel
    /// (`towerrec_core::matmul::bf16_kernel`).
    pub(super) bf16_gemm_gflops: f64,
    /// towerrec's MLP layers, forward and backward (GFLOP/s).
    pub(super) mlp_gflops: f64,
    /// `(vector width, GFLOP/s)` of towerrec's dot interaction of
    /// [`INTERACTION_VECTORS`] vectors, forward and backward, by width.
    pub(super) interaction: Vec<(usize, f64)>,
    pub(super) copy_gbs: f64,
    /// `(row bytes, GB/s)`, by row size.
    pub(super) gather: Vec<(usize, f64)>,
    /// towerrec's lookup and fused update of one 64-byte row per bag: ns per bag
    /// beyond the 64-byte gather's time (read; read and write).
    pub(super) lookup_bag_ns: f64,
    pub(super) update_bag_ns: f64,
    /// towerrec's synthetic reader on one thread (CPU time).
    pub(super) reader: ReaderNs,
    pub(super) huge_pages: bool,
    pub(super) table_bytes: usize,
    pub(super) copy_bytes: usize,
}

impl Machine {
    /// What each of `ranks` chips sharing this machine gets.
    pub(super) fn shared_by(&self, ranks: usize) -> Machine {
        let f = ranks.max(1) as f64;
        Machine {
            gemm_gflops: self.gemm_gflops / f,
            bf16_gemm_gflops: self.bf16_gemm_gflops / f,
            mlp_gflops: self.mlp_gflops / f,
            copy_gbs: self.copy_gbs / f,
            gather: self.gather.iter().map(|&(r, g)| (r, g / f)).collect(),
            interaction: self.interaction.iter().map(|&(w, g)| (w, g / f)).collect(),
            // A chip with 1/f of the machine spends f times as long per bag.
            lookup_bag_ns: self.lookup_bag_ns * f,
            update_bag_ns: self.update_bag_ns * f,
            reader: self.reader.scaled(f),
            ..self.clone()
        }
    }

    /// The figures as numbers, to gather over MPI ranks.
    #[cfg_attr(not(feature = "mpi"), allow(dead_code))]
    pub(super) fn to_vec(&self) -> Vec<f64> {
        let mut v = vec![
            self.gemm_gflops,
            self.mlp_gflops,
            self.copy_gbs,
            self.lookup_bag_ns,
            self.update_bag_ns,
            self.reader.sample,
            self.reader.zipf_id,
            self.reader.uniform_id,
            self.bf16_gemm_gflops,
        ];
        v.extend(self.gather.iter().map(|g| g.1));
        v.extend(self.interaction.iter().map(|g| g.1));
        v
    }

    /// The same probes with the figures `v` (as [`Machine::to_vec`] lays them out).
    #[cfg_attr(not(feature = "mpi"), allow(dead_code))]
    pub(super) fn with_figures(&self, v: &[f64]) -> Machine {
        Machine {
            gemm_gflops: v[0],
            mlp_gflops: v[1],
            copy_gbs: v[2],
            lookup_bag_ns: v[3],
            update_bag_ns: v[4],
            reader: ReaderNs {
                sample: v[5],
                zipf_id: v[6],
                uniform_id: v[7],
            },
            bf16_gemm_gflops: v[8],
            gather: self
                .gather
                .iter()
                .zip(&v[9..])
                .map(|(&(r, _), &g)| (r, g))
                .collect(),
            interaction: self
                .interaction
                .iter()
                .zip(&v[9 + self.gather.len()..])
                .map(|(&(w, _), &g)| (w, g))
                .collect(),
            ..self.clone()
        }
    }

    /// How a figure was taken: `alone` (the probe's own choice) or sustained.
    fn rate_label(&self, alone: &'static str) -> &'static str {
        match self.rate {
            Rate::Best | Rate::Median => alone,
            Rate::Sustained => "sustained: all repetitions, cores shared",
        }
    }

    pub(super) fn comment(&self, what: &str) -> String {
        let gathers: Vec<String> = self
            .gather
            .iter()
            .map(|(r, g)| format!("{r} B {}", sig(*g)))
            .collect();
        let dots: Vec<String> = self
            .interaction
            .iter()
            .map(|(w, g)| format!("{w} {}", sig(*g)))
            .collect();
        format!(
            "# {what}: GEMM f32 {GEMM_N}³ {} GFLOP/s ({}); bf16 {} GFLOP/s ({});\n#   MLP {} forward + backward \
             at batch {MLP_BATCH} {} GFLOP/s ({});\n#   dot interaction of {INTERACTION_VECTORS} vectors \
             forward + backward at batch {MLP_BATCH}, GFLOP/s by vector width ({}): {};\n#   embedding kernels, one 64 B row per bag: \
             lookup {} ns and update {} ns per bag beyond the gather;\n#   {} ({}): {} ns a sample, \
             {} ns a Zipf id, {} ns a uniform id (CPU time of one thread);\n#   copy {} MiB {} GB/s \
             (read + write);\n#   random gathers from a {} table ({}, prefetch), GB/s: {}.\n",
            sig(self.gemm_gflops),
            self.rate_label("best repetition"),
            sig(self.bf16_gemm_gflops),
            towerrec_core::matmul::bf16_kernel(),
            dims_label(),
            sig(self.mlp_gflops),
            self.rate_label("median"),
            self.rate_label("median"),
            dots.join(", "),
            sig(self.lookup_bag_ns),
            sig(self.update_bag_ns),
            reader::label(),
            self.rate_label("median"),
            sig(self.reader.sample),
            sig(self.reader.zipf_id),
            sig(self.reader.uniform_id),
            self.copy_bytes / MIB,
            sig(self.copy_gbs),
            human_bytes(self.table_bytes),
            if self.huge_pages {
                "2 MiB pages"
            } else {
                "4 KiB pages: the kernel refused huge pages"
            },
            gathers.join(", ")
        )
    }
}

/// GEMM, copy and gathers with `threads` threads; `sync` runs before each probe (MPI: a
/// barrier, so that the ranks of a host measure at the same time).
pub(super) fn measure_machine(
    s: &Settings,
    threads: usize,
    progress: &Progress,
    sync: &dyn Fn() -> Result<()>,
) -> Result<Machine> {
    sync()?;
    progress.start(format!("GEMM f32 {GEMM_N}³"));
    let gemm_gflops = probe::gemm_gflops(GEMM_N, threads, s.budget, s.rate);
    progress.done();
    sync()?;
    progress.start(format!("GEMM bf16 {GEMM_N}³"));
    let bf16 = towerrec_core::matmul::DensePrecision::Bf16;
    let bf16_gemm_gflops = probe::gemm_gflops_in(bf16, GEMM_N, threads, s.budget, s.rate);
    progress.done();
    sync()?;
    progress.start(format!("MLP {} forward + backward", dims_label()));
    let mlp_gflops = mlp_rate(s, threads)?;
    progress.done();
    sync()?;
    progress.start(format!(
        "dot interaction of {INTERACTION_VECTORS} vectors forward + backward"
    ));
    let interaction = interaction_rates(s, threads, &sync)?;
    progress.done();
    sync()?;
    progress.start(format!("copy {} MiB", s.copy_bytes / MIB));
    let copy_gbs = probe::copy_bandwidth(s.copy_bytes, threads, s.budget, s.rate);
    progress.done();
    progress.start(format!(
        "random gathers: filling a {} MiB table",
        s.table_bytes / MIB
    ));
    let table = HugePageBuf::<f32>::from_elem_with(s.table_bytes / 4, 1.0, Pages::Huge);
    let mut gather = Vec::with_capacity(ROW_BYTES.len());
    for rb in ROW_BYTES {
        sync()?;
        progress.start(format!("random gathers of {rb} B rows"));
        gather.push((
            rb,
            probe::gather_bandwidth_in(&table, rb, true, threads, s.budget, s.rate),
        ));
        progress.done();
    }
    sync()?;
    progress.start("embedding kernels, one 64 B row per bag".into());
    let gather64 = gather.first().map_or(f64::NAN, |g| g.1);
    let (lookup_bag_ns, update_bag_ns) = bag_overheads(s, threads, gather64)?;
    progress.done();
    progress.start("synthetic reader".into());
    let reader = reader::reader_ns(s, sync)?;
    progress.done();
    Ok(Machine {
        threads,
        rate: s.rate,
        lookup_bag_ns,
        update_bag_ns,
        reader,
        gemm_gflops,
        bf16_gemm_gflops,
        mlp_gflops,
        interaction,
        copy_gbs,
        gather,
        huge_pages: table.huge_pages(),
        table_bytes: s.table_bytes,
        copy_bytes: s.copy_bytes,
    })
}

/// GFLOP/s of towerrec's MLP layers (the code it trains with) forward and backward at
/// [`MLP_DIMS`] and [`MLP_BATCH`], on `threads` threads.
fn mlp_rate(s: &Settings, threads: usize) -> Result<f64> {
    use rand::SeedableRng;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .context("starting the MLP probe's threads")?;
    let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
    let last = towerrec_core::layers::activation::Activation::Sigmoid;
    let rate = layer_rate(s);
    let (gflops, _) = pool.install(|| {
        crate::bench_kernels::bench_mlp(&MLP_DIMS, last, true, MLP_BATCH, s.budget, rate, &mut rng)
    });
    Ok(gflops)
}

/// How a layer or reader probe's repetitions are taken: alone, the median repetition (a typical
/// step); with the cores shared, sustained.
pub(super) fn layer_rate(s: &Settings) -> Rate {
    match s.rate {
        Rate::Sustained => Rate::Sustained,
        Rate::Best | Rate::Median => Rate::Median,
    }
}

/// GFLOP/s of towerrec's dot interaction of [`INTERACTION_VECTORS`] vectors, forward
/// and backward at [`MLP_BATCH`], at each of [`INTERACTION_WIDTHS`], on `threads`
/// threads; FLOPs counted as the simulator counts them (`2·F²·D` a sample forward,
/// twice that backward).
fn interaction_rates(
    s: &Settings,
    threads: usize,
    sync: &dyn Fn() -> Result<()>,
) -> Result<Vec<(usize, f64)>> {
    use rand::{Rng, SeedableRng};
    use towerrec_core::layers::interaction::DotInteraction;
    use towerrec_core::Layer;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .context("starting the interaction probe's threads")?;
    let rate = layer_rate(s);
    let budget = s.budget / INTERACTION_WIDTHS.len() as u32;
    let mut rng = rand::rngs::SmallRng::seed_from_u64(13);
    let (f, b) = (INTERACTION_VECTORS, MLP_BATCH);
    let mut rates = Vec::with_capacity(INTERACTION_WIDTHS.len());
    for width in INTERACTION_WIDTHS {
        sync()?;
        let mut layer = DotInteraction::<f32>::new(f, width, false);
        let (ni, no) = (layer.in_dim(), layer.out_dim());
        let x: Vec<f32> = (0..b * ni).map(|_| rng.random_range(-1.0..1.0)).collect();
        let dy: Vec<f32> = (0..b * no).map(|_| rng.random_range(-1.0..1.0)).collect();
        let (mut y, mut dx) = (vec![0.0f32; b * no], vec![0.0f32; b * ni]);
        let times = pool.install(|| {
            let mut step = || {
                layer.forward(&x, &mut y, b);
                layer.backward(&x, &y, &dy, Some(&mut dx), b);
            };
            step();
            probe::timed_reps(budget, probe::MIN_REPS, step)
        });
        let flops = 3.0 * 2.0 * (f * f * width) as f64 * b as f64;
        rates.push((width, sig(flops / rate.secs(&times) / 1e9)));
    }
    Ok(rates)
}

/// ns per bag that towerrec's lookup and fused SGD update of one 64-byte row per bag
/// (dim 16, a table of a quarter of the gather probe's size, 26 features, batch 2048)
/// spend beyond the raw gather of 64-byte rows at `gather64` GB/s (bytes per ns).
fn bag_overheads(s: &Settings, threads: usize, gather64: f64) -> Result<(f64, f64)> {
    use rand::SeedableRng;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .context("starting the embedding probe's threads")?;
    let mut rng = rand::rngs::SmallRng::seed_from_u64(11);
    let rows = (s.table_bytes / 4 / 64).max(1);
    let (lookup, update) = pool.install(|| {
        crate::bench_kernels::embedding_rates(16, 1, rows, 2048, 26, s.budget, &mut rng)
    })?;
    let over = |bytes: f64, kernel_gbs: f64| (bytes / kernel_gbs - bytes / gather64).max(0.0);
    Ok((sig(over(64.0, lookup)), sig(over(128.0, update))))
}
