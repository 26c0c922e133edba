//! The simulator against the papers: the scale-in paper's Tables XVI and XVII, and the
//! shape of the DMT paper's Figure 10 (docs/SIMULATOR.md explains each tolerance).

use towerrec_sim::paper::{reproduce, FIGURES};
use towerrec_sim::scale::{compare, with_knee, Plan, KNEES};
use towerrec_sim::{Hardware, Mode, Towers, Workload};

#[test]
fn scale_in_tables_are_reproduced() {
    let rows = reproduce().unwrap();
    assert_eq!(rows.len(), FIGURES.len());
    for r in &rows {
        let ratio = r.qps_ratio();
        let what = format!(
            "{} {} {:?}: simulated {:.0} vs paper {:.0}",
            r.paper.system, r.paper.config, r.paper.mode, r.qps, r.paper.qps
        );
        if r.paper.system == "dgx2" && r.paper.mode == Mode::Training {
            // The paper's DGX-2 all-reduce is a measured curve it does not print; the
            // α–β model from its own stated latency (50 µs) and bandwidth (118 GB/s) is
            // faster than that curve, so these four land high, by about a fifth.
            assert!((1.0..1.25).contains(&ratio), "{what}");
        } else {
            assert!((0.9..1.1).contains(&ratio), "{what}");
        }
        if r.paper.system == "recspeed" {
            let diff = (r.share - r.paper.share).abs();
            assert!(
                diff < 0.06,
                "{what}: share {:.3} vs {:.3}",
                r.share,
                r.paper.share
            );
        }
    }
}

/// The speedups at 16 to 512 GPUs with the cross-host knee at `knee`.
fn dmt_speedups(knee: f64) -> (Vec<f64>, Vec<f64>) {
    let hw = with_knee(&Hardware::preset("h100-cluster").unwrap(), knee).unwrap();
    let w = Workload::dmt_dlrm();
    let kind = Towers::module_for(&w, 2.0).unwrap();
    let towers = |hosts| Towers::per_host(&w, kind, hosts);
    let points = compare(
        &w,
        &hw,
        &[16, 32, 64, 128, 256, 512],
        &[Plan::Flat, Plan::Sptt, Plan::Dmt],
        Mode::Training,
        &towers,
    )
    .unwrap();
    let of = |plan| points.iter().map(|p| p.speedup(plan).unwrap()).collect();
    (of(Plan::Dmt), of(Plan::Sptt))
}

#[test]
fn dmt_across_the_knee_band() {
    // Figure 10's values are not in the paper's text and its Figure 5 gives no knee, so
    // nothing here is fitted to its 1.9×; docs/SIMULATOR.md prints the band. What holds
    // over every knee of the band:
    let mut at_512 = Vec::new();
    for knee in KNEES {
        let (dmt, sptt) = dmt_speedups(knee);
        // Towers help on top of SPTT at every size (Figure 11's direction).
        assert!(dmt.iter().zip(&sptt).all(|(d, s)| d > s), "knee {knee}");
        // With one tower per host (16 to 128 GPUs) DMT beats flat.
        assert!(dmt[..4].iter().all(|&s| s > 1.0), "knee {knee}: {dmt:?}");
        at_512.push(dmt[5]);
    }
    // A sharper loss of cross-host efficiency with scale favours DMT more.
    assert!(at_512.windows(2).all(|w| w[0] > w[1]), "{at_512:?}");
    // At the band's sharpest knee, the speedup rises with scale, as in Figure 10.
    let (dmt, _) = dmt_speedups(KNEES[0]);
    assert!(dmt[5] > dmt[3] && dmt[3] > dmt[0], "{dmt:?}");
}
