//! The figures and paper reproductions of `towerrec simulate`: QPS against collective
//! latency and bandwidth, time breakdowns, speedup against scale, memory by row size.

use super::*;
use towerrec_sim::paper::{self, BREAKDOWN};
use towerrec_sim::plot::{self, Bar, LineChart, Series};

pub(super) const LATENCIES_US: [f64; 11] = [0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0];
pub(super) const BANDWIDTHS_GBS: [f64; 5] = [100.0, 250.0, 500.0, 750.0, 1000.0];

pub(super) fn qps_chart(
    title: String,
    w: &Workload,
    hw: &Hardware,
    scenario: Scenario,
) -> Result<LineChart> {
    let sweep = paper::qps_sweep(w, hw, scenario, &LATENCIES_US, &BANDWIDTHS_GBS)?;
    Ok(LineChart {
        title,
        x_label: "collective latency (µs)".into(),
        y_label: "QPS".into(),
        series: sweep
            .into_iter()
            .map(|(bw, points)| Series {
                label: format!("{bw:.0} GB/s"),
                points,
            })
            .collect(),
        log_x: false,
        y_from_zero: true,
    })
}

pub(super) fn breakdown_bars(
    w: &Workload,
    hw: &Hardware,
    scenario: Scenario,
    latency: f64,
) -> Result<Vec<Bar>> {
    BANDWIDTHS_GBS
        .iter()
        .map(|&bw| {
            let step = simulate(w, &paper::with_collectives(hw, latency, bw), scenario)?;
            Ok(Bar {
                label: format!("{bw:.0} GB/s"),
                parts: paper::breakdown(&step).to_vec(),
            })
        })
        .collect()
}

const QPS_PLOT: &str = "qps_vs_collectives.svg";
const BREAKDOWN_PLOT: &str = "breakdown.svg";
const SPEEDUP_PLOT: &str = "speedup.svg";
const FIG6: &str = "fig6_memory_random_access.svg";
const FIG8: &str = "fig8_inference_qps.svg";
const FIG11: &str = "fig11_training_qps.svg";
const FIG12B: &str = "fig12b_training_breakdown.svg";
const FIG13B: &str = "fig13b_training_breakdown.svg";
const FIG10: &str = "fig10_dmt_speedup.svg";

/// The files `--plots DIR` may write: of a simulation, of `--reproduce scale-in`, of
/// `--reproduce dmt`.
pub(super) const RUN_PLOTS: [&str; 3] = [QPS_PLOT, BREAKDOWN_PLOT, SPEEDUP_PLOT];
pub(super) const SCALE_IN_PLOTS: [&str; 5] = [FIG6, FIG8, FIG11, FIG12B, FIG13B];
pub(super) const DMT_PLOTS: [&str; 1] = [FIG10];

pub(super) fn write_run_plots(
    dir: &Path,
    w: &Workload,
    hw: &Hardware,
    scenario: Scenario,
    points: &[ScalePoint],
) -> Result<()> {
    let sized = hw.with_chips(points[0].chips)?;
    let chart = qps_chart(format!("{} on {}", w.name, hw.name), w, &sized, scenario)?;
    let path = dir.join(QPS_PLOT);
    plot::line_charts(&path, &[chart], 1)?;
    println!("\nwrote {}", path.display());
    let bars: Vec<Bar> = points
        .iter()
        .flat_map(|p| {
            p.steps.iter().map(move |(plan, step)| Bar {
                label: format!("{} {}", p.chips, plan.name()),
                parts: paper::breakdown(step).to_vec(),
            })
        })
        .collect();
    let path = dir.join(BREAKDOWN_PLOT);
    plot::stacked_shares(
        &path,
        &format!("{}: time per step", w.name),
        &BREAKDOWN,
        &bars,
    )?;
    println!("wrote {}", path.display());
    if points.len() > 1 && points[0].steps.len() > 1 {
        let path = dir.join(SPEEDUP_PLOT);
        plot::line_charts(&path, &[speedup_chart(points, &w.name)], 1)?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

pub(super) fn speedup_chart(points: &[ScalePoint], name: &str) -> LineChart {
    let plans: Vec<Plan> = points[0].steps.iter().map(|(p, _)| *p).collect();
    LineChart {
        title: format!("{name}: speedup over the flat exchange"),
        x_label: "GPUs".into(),
        y_label: "speedup".into(),
        series: plans
            .into_iter()
            .map(|plan| Series {
                label: plan.name().into(),
                points: points
                    .iter()
                    .filter_map(|p| Some((p.chips as f64, p.speedup(plan)?)))
                    .collect(),
            })
            .collect(),
        log_x: true,
        y_from_zero: true,
    }
}

pub(super) fn reproduce_scale_in(plots: Option<&Path>) -> Result<()> {
    let rows = paper::reproduce()?;
    println!("The scale-in paper's Tables XVI (inference) and XVII (training), simulated:\n");
    print!("{}", paper::markdown(&rows));
    println!("\nRandom row reads (Figure 6), GB/s and share of the peak:\n");
    println!("| memory | peak GB/s | 64 B | 128 B | 256 B |\n|---|---:|---:|---:|---:|");
    for s in memory_chart()?.series {
        let peak = memory_systems()
            .into_iter()
            .find(|(l, _)| *l == s.label)
            .map_or(0.0, |(_, m)| m.peak() / 1e9);
        let cell = |row: f64| {
            let gbs = s.points.iter().find(|p| p.0 == row).map_or(0.0, |p| p.1);
            format!("{gbs:.0} ({:.0}%)", gbs / peak * 100.0)
        };
        println!(
            "| {} | {peak:.0} | {} | {} | {} |",
            s.label,
            cell(64.0),
            cell(128.0),
            cell(256.0)
        );
    }
    let Some(dir) = plots else {
        return Ok(());
    };
    let path = dir.join(FIG6);
    plot::line_charts(&path, &[memory_chart()?], 1)?;
    println!("wrote {}", path.display());
    let reference = Hardware::preset("reference")?;
    for (mode, file, fig) in [
        (Mode::Inference, FIG8, "Fig. 8"),
        (Mode::Training, FIG11, "Fig. 11"),
    ] {
        let charts = paper::CONFIGS
            .iter()
            .map(|&(label, large, sharding)| {
                let scenario = Scenario {
                    mode,
                    sharding,
                    exchange: Exchange::Flat,
                };
                qps_chart(
                    format!("{fig}: {label}"),
                    &Workload::rm2(large),
                    &reference,
                    scenario,
                )
            })
            .collect::<Result<Vec<_>>>()?;
        let path = dir.join(file);
        plot::line_charts(&path, &charts, 2)?;
        println!("wrote {}", path.display());
    }
    for (large, sharding, file, title) in [
        (
            false,
            Sharding::Unsharded,
            FIG12B,
            "Fig. 12b: small, unsharded, 1 µs",
        ),
        (
            true,
            Sharding::Sharded,
            FIG13B,
            "Fig. 13b: large, sharded, 1 µs",
        ),
    ] {
        let scenario = Scenario {
            mode: Mode::Training,
            sharding,
            exchange: Exchange::Flat,
        };
        let bars = breakdown_bars(&Workload::rm2(large), &reference, scenario, 1.0)?;
        let path = dir.join(file);
        plot::stacked_shares(&path, title, &BREAKDOWN, &bars)?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// Random-access bandwidth by row size of common memory systems (the paper's Figure 6,
/// Table VIII's parts).
pub(super) fn memory_systems() -> Vec<(&'static str, towerrec_sim::MemorySystem)> {
    [
        ("DDR4-3200, 6 channels", "ddr4", 3200.0, 6),
        ("GDDR6 14 Gbps, 11 chips", "gddr6", 14000.0, 11),
        ("HBM2 2300 MT/s, 4 stacks (DGX-2)", "hbm2", 2300.0, 4),
        ("HBM2 2430 MT/s, 5 stacks (A100)", "hbm2", 2430.0, 5),
        ("HBM2E 3000 MT/s, 6 stacks (RecSpeed)", "hbm2e", 3000.0, 6),
        ("HBM3 5200 MT/s, 5 stacks (H100)", "hbm3", 5200.0, 5),
    ]
    .into_iter()
    .map(|(label, timing, rate, units)| {
        let m = towerrec_sim::MemorySystem::Dram {
            timing: towerrec_sim::TimingRef::Preset(timing.into()),
            units,
            data_rate_mts: Some(rate),
        };
        (label, m)
    })
    .collect()
}

pub(super) fn memory_chart() -> Result<LineChart> {
    let series = memory_systems()
        .into_iter()
        .map(|(label, m)| {
            let points = [32.0, 64.0, 128.0, 256.0, 512.0]
                .iter()
                .map(|&row| (row, m.random_read(row) / 1e9))
                .collect();
            Series {
                label: label.into(),
                points,
            }
        })
        .collect();
    Ok(LineChart {
        title: "Fig. 6: random row reads, one activation per row".into(),
        x_label: "row bytes".into(),
        y_label: "GB/s".into(),
        series,
        log_x: true,
        y_from_zero: true,
    })
}

/// The GPU counts of the DMT paper's Figure 10.
pub const DMT_GPUS: [usize; 6] = [16, 32, 64, 128, 256, 512];

pub(super) fn reproduce_dmt(plots: Option<&Path>) -> Result<()> {
    let hw = Hardware::preset("h100-cluster")?;
    let w = Workload::dmt_dlrm();
    let kind = Towers::module_for(&w, 2.0)?;
    let towers = |hosts: usize| Towers::per_host(&w, kind, hosts);
    let plans = [Plan::Flat, Plan::Sptt, Plan::Dmt];
    let points = scale::compare(&w, &hw, &DMT_GPUS, &plans, Mode::Training, &towers)?;
    println!(
        "The DMT paper's Figure 10 (DLRM on H100, local batch 16K, DLRM towers c = 1, p = 0, \
         D = 64: CR 2), simulated:\n"
    );
    print_header(&w, &hw, Mode::Training, Sharding::Unsharded);
    print_table_4(&w, kind)?;
    print_points(&w, &points, 1);
    let knee = hw
        .network
        .cross_host
        .as_ref()
        .map_or(f64::INFINITY, |c| c.scaling.knee);
    println!(
        "\nThe cross-host knee is not known (the paper's Figure 5 has no values; the preset's \
         {knee} is the band's middle, not fitted).\nDMT (and SPTT) speedup over flat across \
         the band of knees {:?}:\n",
        scale::KNEES
    );
    let band = scale::KNEES
        .iter()
        .map(|&k| {
            let hw = scale::with_knee(&hw, k)?;
            Ok((
                k,
                scale::compare(&w, &hw, &DMT_GPUS, &plans, Mode::Training, &towers)?,
            ))
        })
        .collect::<Result<Vec<_>>>()?;
    let mut head = String::from("| GPUs | towers |");
    let mut rule = String::from("|---:|---|");
    for (k, _) in &band {
        head += &format!(" knee {k} |");
        rule += "---:|";
    }
    println!("{head} DMT band |\n{rule}---:|");
    for (i, &n) in DMT_GPUS.iter().enumerate() {
        let t = points[i]
            .towers
            .ok_or_else(|| anyhow::anyhow!("the DMT reproduction compared no towers"))?;
        let mut row = format!("| {n} | {} × {} host(s) |", t.towers, t.hosts_per_group);
        let mut lo = f64::INFINITY;
        let mut hi: f64 = 0.0;
        for (_, pts) in &band {
            let (d, s) = (
                pts[i].speedup(Plan::Dmt).unwrap_or(f64::NAN),
                pts[i].speedup(Plan::Sptt).unwrap_or(f64::NAN),
            );
            row += &format!(" {d:.2}× ({s:.2}×) |");
            lo = lo.min(d);
            hi = hi.max(d);
        }
        println!("{row} {lo:.2}–{hi:.2}× |");
    }
    println!(
        "\nThe paper: \"up to 1.9×\" for DLRM at 512 GPUs, rising with scale (Figure 10's bars are \
         not in its text)."
    );
    if let Some(dir) = plots {
        let mut chart = speedup_chart(&points, &w.name);
        for (k, pts) in &band {
            chart.series.push(towerrec_sim::plot::Series {
                label: format!("dmt, knee {k}"),
                points: pts
                    .iter()
                    .filter_map(|p| Some((p.chips as f64, p.speedup(Plan::Dmt)?)))
                    .collect(),
            });
        }
        let path = dir.join(FIG10);
        plot::line_charts(&path, &[chart], 1)?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// The DMT paper's Table 4 analogue: trained FLOPs per sample of the model and of its
/// DMT version with towers of `kind` (2, 4, 8 towers), from the layers, not fitted.
fn print_table_4(w: &Workload, kind: towerrec_sim::TowerModuleKind) -> Result<()> {
    let flat = 3.0 * w.dense_counts().forward_flops();
    println!(
        "\nTable 4 (MFLOPs per trained sample, 3 × forward): flat {:.2} (paper 14.74)",
        flat / 1e6
    );
    for t in [2, 4, 8] {
        let c = Towers::strided(kind, w.num_tables(), t)?.costs(w, t)?;
        let dmt = 3.0 * (c.dense.forward_flops() + c.module_flops);
        println!(
            "  DMT {t} towers: {:.2} (ratio {:.3}; paper 8.95, ratio {:.3})",
            dmt / 1e6,
            dmt / flat,
            8.95 / 14.74
        );
    }
    Ok(())
}
