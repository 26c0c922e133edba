//! A diverging run stops at the same step on every topology, naming the step and the
//! tensor, and writes no summary (docs/RELIABILITY.md, section 2): on the shape of
//! examples/criteo.toml's DLRM, whose backward overflows while its loss stays finite,
//! in one process and on in-process clusters (MPI: `mpi_train.rs`).

use crate::common;

use crate::common::{assert_fails_with, towerrec};
use crate::diverging::{diverging_criteo, step_named, tensor_named};

fn tmp(name: &str) -> std::path::PathBuf {
    common::tmp("nonfinite", name)
}

#[test]
fn a_diverging_criteo_dlrm_stops_at_the_same_step_on_every_topology() {
    let dir = tmp("criteo");
    let cfg = diverging_criteo(&dir);
    let mut seen = Vec::new();
    for (hosts, ranks) in [(1, 1), (2, 2), (1, 4), (4, 1)] {
        let out = dir.join(format!("run-{hosts}x{ranks}"));
        let (h, r) = (hosts.to_string(), ranks.to_string());
        let args = [
            "train",
            "-q",
            "--config",
            cfg.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--hosts",
            &h,
            "--ranks-per-host",
            &r,
        ];
        let o = towerrec(&args);
        let err = assert_fails_with(&o, &["non-finite ", " at step ", "(epoch 1, batch "]);
        let step = step_named(&err).unwrap_or_else(|| panic!("no step in: {err}"));
        let tensor = tensor_named(&err).unwrap_or_else(|| panic!("no tensor in: {err}"));
        if hosts * ranks > 1 {
            // Every rank checked the same sums: the message says over what.
            let world = hosts * ranks;
            assert!(
                err.contains("cluster: rank ")
                    && (err.contains(&format!("after the all-reduce over {world} ranks"))
                        || err.contains("after their exchange")),
                "{err}"
            );
        }
        assert!(!out.join("summary.json").exists(), "{hosts}x{ranks}: {err}");
        assert!(!out.join("checkpoint.safetensors").exists(), "{err}");
        seen.push((format!("{hosts}x{ranks}"), step, tensor.to_string(), err));
    }
    let (_, step, tensor, _) = &seen[0];
    for (topology, s, t, err) in &seen {
        assert_eq!((s, t), (step, tensor), "{topology} differs from 1x1: {err}");
    }
    // Long before the end of the data (12 steps): where it went wrong, not at the end.
    assert!(*step < 12, "{seen:?}");
    std::fs::remove_dir_all(dir).ok();
}
