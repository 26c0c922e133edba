//! The simulator against the papers: the scale-in paper's Tables XVI and XVII, and the
//! shape of the DMT paper's Figure 10 (docs/SIMULATOR.md explains each tolerance).

use towerrec_sim::paper::{reproduce, FIGURES};
use towerrec_sim::scale::{compare, Plan};
use towerrec_sim::{Hardware, Mode, Workload};

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

#[test]
fn dmt_speedup_rises_with_scale_to_the_papers_range() {
    let hw = Hardware::preset("h100-cluster").unwrap();
    let points = compare(
        &Workload::dmt_dlrm(),
        &hw,
        &[16, 32, 64, 128, 256, 512],
        &[Plan::Flat, Plan::Sptt, Plan::Dmt],
        Mode::Training,
        2.0,
    )
    .unwrap();
    let dmt: Vec<f64> = points
        .iter()
        .map(|p| p.speedup(Plan::Dmt).unwrap())
        .collect();
    let sptt: Vec<f64> = points
        .iter()
        .map(|p| p.speedup(Plan::Sptt).unwrap())
        .collect();
    assert!(dmt.windows(2).all(|w| w[1] > w[0]), "{dmt:?}");
    assert!(sptt.windows(2).all(|w| w[1] > w[0]), "{sptt:?}");
    // Figure 10: up to about 1.9× at 512 GPUs.
    let top = *dmt.last().unwrap();
    assert!((1.7..=2.0).contains(&top), "{dmt:?}");
    assert!(dmt[0] > 1.0 && dmt[0] < 1.5, "{dmt:?}");
    // Towers help on top of SPTT at every scale (Figure 11).
    assert!(dmt.iter().zip(&sptt).all(|(d, s)| d > s));
}
