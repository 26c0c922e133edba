//! `towerrec calibrate` end to end: a quick calibration of a 1 × 2 in-process cluster
//! writes a hardware file the simulator loads, with sane figures; bad arguments fail
//! with a message.

use towerrec_sim::{Collective, Hardware, MemorySystem};

use crate::common;

use crate::common::{describe, towerrec};

/// A fresh scratch directory for this file's tests.
fn tmp_dir(name: &str) -> std::path::PathBuf {
    common::tmp("calibrate", name)
}

fn sane(x: f64) -> bool {
    x.is_finite() && x > 0.0
}

#[test]
fn quick_calibration_writes_a_loadable_hardware_file() {
    let dir = tmp_dir("quick");
    let out = dir.join("hw.toml");
    let o = towerrec(&[
        "calibrate",
        "--quick",
        "--quiet",
        "--hosts",
        "1",
        "--ranks-per-host",
        "2",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", describe(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains("GFLOP/s") && stdout.contains("all_to_all_v"),
        "{}",
        describe(&o)
    );

    let hw = Hardware::load(out.to_str().unwrap()).expect("the file loads");
    assert_eq!((hw.hosts, hw.chips_per_host, hw.chips()), (1, 2, 2));
    assert!(sane(hw.compute.peak_tflops), "{hw:?}");
    assert!(
        hw.compute.efficiency > 0.0 && hw.compute.efficiency <= 1.0,
        "{hw:?}"
    );
    assert_eq!(hw.system.allreduce_overlap, 0.0);
    assert!(!hw.system.on_chip_buffers);
    assert_eq!(hw.system.lookup_comm_overlap, 0.0);
    assert!(hw.network.cross_host.is_none());
    let MemorySystem::Measured {
        stream_gbs,
        random_read,
    } = &hw.memory
    else {
        panic!("measured memory expected: {hw:?}")
    };
    assert!(sane(*stream_gbs), "{hw:?}");
    let rows: Vec<f64> = random_read.iter().map(|p| p[0]).collect();
    assert_eq!(rows, [64.0, 128.0, 256.0, 512.0]);
    assert!(random_read.iter().all(|p| sane(p[1])), "{hw:?}");
    // Random 64 B rows cannot beat streaming by much.
    assert!(
        random_read[0][1] <= stream_gbs * 1.5,
        "random 64 B {} GB/s vs stream {stream_gbs} GB/s",
        random_read[0][1]
    );
    for op in [Collective::AllToAll, Collective::AllReduce] {
        let ab = hw.network.intra_host.get(op);
        assert!(
            sane(ab.latency_us) && sane(ab.bandwidth_gbs),
            "{op:?}: {ab:?}"
        );
    }
    assert!(hw.source.contains("2 in-process ranks"), "{}", hw.source);

    // The file says what was measured in its comments, and round-trips.
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.starts_with("# This machine"), "{text}");
    let again = dir.join("again.toml");
    hw.save(&again).unwrap();
    assert_eq!(Hardware::load(again.to_str().unwrap()).unwrap(), hw);

    // The simulator predicts the DMT speed run from it, per exchange.
    let o = towerrec(&[
        "simulate",
        "--config",
        "bench/dmt/speed.toml",
        "--hardware",
        out.to_str().unwrap(),
        "--compare",
        "flat,sptt,dmt",
        "--compression",
        "4",
    ]);
    assert!(o.status.success(), "{}", describe(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    for row in ["     2  flat", "     2  sptt", "     2  dmt"] {
        assert!(stdout.contains(row), "missing {row:?}: {stdout}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_arguments_fail_with_a_message() {
    let dir = tmp_dir("bad");
    let out = dir.join("hw.toml");
    let out = out.to_str().unwrap();
    for (args, expect) in [
        (
            vec!["--ranks-per-host", "0"],
            "--hosts and --ranks-per-host must be at least 1",
        ),
        (vec!["--seconds", "0"], "--seconds must be"),
        (vec!["--threads", "0"], "--threads must be at least 1"),
    ] {
        let mut all = vec!["calibrate", "--quick", "--quiet", "--out", out];
        all.extend(&args);
        let o = towerrec(&all);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{args:?}: {}", describe(&o));
        assert!(stderr.contains(expect), "{args:?}: {}", describe(&o));
        assert!(!stderr.contains("panicked"), "{args:?}: {}", describe(&o));
        assert!(!std::path::Path::new(out).exists(), "{args:?} wrote a file");
    }
    let o = towerrec(&[
        "calibrate",
        "--quick",
        "--out",
        dir.join("no/such/dir/hw.toml").to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("does not exist"),
        "{}",
        describe(&o)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
