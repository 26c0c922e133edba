//! What `towerrec calibrate` writes and prints: the hardware description, its comment
//! header, and the summary.

use super::*;

/// The hardware description: `per_chip` compute and memory, `intra` (and `cross`) levels.
pub(super) fn hardware(
    topo: Topology,
    per_chip: &Machine,
    intra: Level,
    cross: Option<Level>,
    source: String,
) -> Hardware {
    Hardware {
        name: "this machine (calibrated)".into(),
        source,
        hosts: topo.hosts,
        chips_per_host: topo.ranks_per_host,
        compute: Compute {
            peak_tflops: sig(per_chip.gemm_gflops / 1000.0),
            // The dense layers run at towerrec's MLP rate, not the GEMM's.
            efficiency: sig((per_chip.mlp_gflops / per_chip.gemm_gflops).clamp(0.01, 1.0)),
            interaction: per_chip
                .interaction
                .iter()
                .map(|&(w, g)| [w as f64, sig(g)])
                .collect(),
            bf16_peak_tflops: Some(sig(per_chip.bf16_gemm_gflops / 1000.0)),
        },
        memory: MemorySystem::Measured {
            stream_gbs: sig(per_chip.copy_gbs),
            random_read: per_chip
                .gather
                .iter()
                .map(|&(r, g)| [r as f64, sig(g)])
                .collect(),
        },
        network: Network {
            intra_host: intra,
            cross_host: cross.map(|level| CrossHost {
                level,
                scaling: Scaling::default(),
            }),
        },
        system: SystemTraits {
            // A CPU: the sparse update reads, modifies and writes its rows, and the
            // dense update streams DRAM.
            on_chip_buffers: false,
            // towerrec looks up between the input and output exchanges, not under them.
            lookup_comm_overlap: 0.0,
            // towerrec all-reduces the dense gradients after the backward pass.
            allreduce_overlap: 0.0,
            lookup_overhead_ns: per_chip.lookup_bag_ns,
            update_overhead_ns: per_chip.update_bag_ns,
            step_overhead_us: 0.0,
            sync_wait: Vec::new(),
            // The reader thread's CPU time comes out of the chip's threads.
            synthetic_reader: Some(reader_costs(per_chip)),
        },
    }
}

/// The synthetic reader's wall time per chip: its CPU time over the chip's threads.
fn reader_costs(per_chip: &Machine) -> ReaderCosts {
    let r = per_chip.reader.scaled(1.0 / per_chip.threads.max(1) as f64);
    ReaderCosts {
        sample_ns: sig(r.sample),
        zipf_id_ns: sig(r.zipf_id),
        uniform_id_ns: sig(r.uniform_id),
    }
}

/// Saves `hw` with `header` (comment lines) in front, and checks that it loads back.
pub(super) fn write_hardware(out: &Path, hw: &Hardware, header: &str) -> Result<()> {
    hw.validate()
        .context("the measured figures do not make a valid hardware description")?;
    let text = hw.to_toml()?;
    towerrec_core::fsio::write_atomic(out, format!("{header}\n{text}").as_bytes())
        .with_context(|| format!("writing {}", out.display()))?;
    let back = Hardware::load(&out.to_string_lossy())
        .with_context(|| format!("loading back {}", out.display()))?;
    if back != *hw {
        bail!(
            "{} does not load back as written (a bug in towerrec calibrate)",
            out.display()
        );
    }
    Ok(())
}

pub(super) fn print_summary(
    machine: &Machine,
    hw: &Hardware,
    sweeps: &[(&Sweeps, &str)],
    out: &Path,
    started: Instant,
) {
    println!(
        "measured ({} threads{}, best repetition):",
        machine.threads,
        if machine.huge_pages {
            ""
        } else {
            "; no huge pages"
        }
    );
    println!(
        "  {:<40} {:>10.1} GFLOP/s",
        format!("GEMM f32 {GEMM_N}³"),
        machine.gemm_gflops
    );
    println!(
        "  {:<40} {:>10.1} GFLOP/s",
        format!("MLP {} fwd+bwd, batch {MLP_BATCH}", dims_label()),
        machine.mlp_gflops
    );
    for (w, g) in &machine.interaction {
        println!(
            "  {:<40} {g:>10.1} GFLOP/s",
            format!("dot interaction {INTERACTION_VECTORS} × {w} fwd+bwd")
        );
    }
    println!(
        "  {:<40} {:>10.2} GB/s",
        format!("copy {} MiB (read + write)", machine.copy_bytes / MIB),
        machine.copy_gbs
    );
    println!(
        "  {:<40} {:>10.1} ns / {:.1} ns",
        "per-bag lookup / update beyond the gather", machine.lookup_bag_ns, machine.update_bag_ns
    );
    for (rb, g) in &machine.gather {
        println!(
            "  {:<40} {g:>10.2} GB/s",
            format!("random gather, {rb} B rows")
        );
    }
    for (sw, what) in sweeps {
        for s in [&sw.all_to_all, &sw.all_reduce] {
            println!(
                "{} over {} ranks ({what}), median of the slowest rank:",
                s.op.name(),
                s.ranks
            );
            let pts: Vec<String> = s
                .points
                .iter()
                .map(|(b, t)| format!("{} {:.1} µs", human_bytes(*b), t * 1e6))
                .collect();
            println!("  {}", pts.join(", "));
            println!(
                "  fit: α = {:.2} µs, β = {:.2} GB/s (per rank, moved bytes)",
                s.fit.latency_us, s.fit.bandwidth_gbs
            );
        }
    }
    let MemorySystem::Measured {
        stream_gbs,
        random_read,
    } = &hw.memory
    else {
        unreachable!("calibrate writes measured memory")
    };
    let rr: Vec<String> = random_read
        .iter()
        .map(|p| format!("{} B {}", p[0], p[1]))
        .collect();
    println!(
        "per chip ({} host(s) × {} chip(s)): {} TFLOP/s at efficiency {}, stream {stream_gbs} GB/s, random read GB/s {}",
        hw.hosts,
        hw.chips_per_host,
        hw.compute.peak_tflops,
        hw.compute.efficiency,
        rr.join(", ")
    );
    println!(
        "wrote {} in {:.1} s",
        out.display(),
        started.elapsed().as_secs_f64()
    );
}

/// `x` rounded to 4 significant digits (the measurements are not more precise).
pub(super) fn sig(x: f64) -> f64 {
    if !x.is_finite() || x == 0.0 {
        return x;
    }
    format!("{x:.3e}").parse().unwrap_or(x)
}

pub(super) fn human_bytes(b: usize) -> String {
    if b >= MIB && b.is_multiple_of(MIB) {
        format!("{} MiB", b / MIB)
    } else if b >= KIB && b.is_multiple_of(KIB) {
        format!("{} KiB", b / KIB)
    } else {
        format!("{b} B")
    }
}

/// A progress bar over the measurements, on stderr (hidden when quiet or not a terminal).
pub(super) struct Progress {
    pub(super) bar: Option<ProgressBar>,
}

impl Progress {
    pub(super) fn new(quiet: bool, steps: u64) -> Self {
        if quiet {
            return Progress { bar: None };
        }
        let bar = ProgressBar::new(steps);
        if let Ok(style) =
            ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
        {
            bar.set_style(style.progress_chars("=> "));
        }
        Progress { bar: Some(bar) }
    }

    pub(super) fn start(&self, what: String) {
        if let Some(b) = &self.bar {
            b.set_message(what);
        }
    }

    pub(super) fn done(&self) {
        if let Some(b) = &self.bar {
            b.inc(1);
        }
    }

    pub(super) fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}
