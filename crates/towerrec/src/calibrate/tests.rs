//! Unit tests of `towerrec calibrate`: the fit, and how figures become chips.

use super::*;

#[test]
fn the_fit_recovers_alpha_and_beta() {
    // 5 µs and 2 GB/s, exactly.
    let pts: Vec<(f64, f64)> = [8.0, 512.0, 32768.0, 2e6, 16e6]
        .iter()
        .map(|&m| (m, 5e-6 + m / 2e9))
        .collect();
    let f = fit_alpha_beta(&pts);
    assert!((f.latency_us - 5.0).abs() < 1e-2, "{f:?}");
    assert!((f.bandwidth_gbs - 2.0).abs() < 1e-2, "{f:?}");
}

#[test]
fn the_fit_stays_positive_on_odd_data() {
    // Time that does not grow with size: all latency, bandwidth at its bound.
    let flat: Vec<(f64, f64)> = [8.0, 1e3, 1e6].iter().map(|&m| (m, 1e-5)).collect();
    let f = fit_alpha_beta(&flat);
    assert!(f.latency_us > 0.0 && f.bandwidth_gbs > 0.0, "{f:?}");
    // Time falling with size (caches): still a valid pair.
    let odd = [(8.0, 2e-5), (1e6, 1e-5), (1e7, 3e-3)];
    let f = fit_alpha_beta(&odd);
    assert!(
        f.latency_us >= MIN_LATENCY_US && f.bandwidth_gbs.is_finite(),
        "{f:?}"
    );
    assert!(f.bandwidth_gbs >= BANDWIDTH_GBS.0 && f.bandwidth_gbs <= BANDWIDTH_GBS.1);
    // Nothing measured.
    let f = fit_alpha_beta(&[]);
    assert!(f.latency_us > 0.0 && f.bandwidth_gbs > 0.0, "{f:?}");
}

fn machine() -> Machine {
    Machine {
        threads: 2,
        rate: Rate::Best,
        gemm_gflops: 180.0,
        bf16_gemm_gflops: 60.0,
        mlp_gflops: 150.0,
        interaction: vec![(8, 4.0), (64, 20.0)],
        copy_gbs: 24.0,
        gather: vec![(64, 10.0), (256, 13.0)],
        lookup_bag_ns: 15.0,
        update_bag_ns: 40.0,
        reader: ReaderNs {
            sample: 900.0,
            zipf_id: 80.0,
            uniform_id: 20.0,
        },
        huge_pages: true,
        table_bytes: MIB,
        copy_bytes: MIB,
    }
}

#[test]
fn ranks_sharing_the_machine_split_it() {
    let m = machine().shared_by(4);
    assert_eq!((m.gemm_gflops, m.mlp_gflops, m.copy_gbs), (45.0, 37.5, 6.0));
    assert_eq!(m.bf16_gemm_gflops, 15.0);
    assert_eq!(m.gather, vec![(64, 2.5), (256, 3.25)]);
    assert_eq!(m.interaction, vec![(8, 1.0), (64, 5.0)]);
    assert_eq!((m.lookup_bag_ns, m.update_bag_ns), (60.0, 160.0));
    assert_eq!(
        (m.reader.sample, m.reader.zipf_id, m.reader.uniform_id),
        (3600.0, 320.0, 80.0)
    );
    let back = machine().with_figures(&machine().to_vec());
    assert_eq!(back.to_vec(), machine().to_vec());
}

#[test]
fn the_file_describes_a_cpu_step() {
    let m = machine();
    let level = Level::uniform(10.0, 5.0);
    let hw = hardware(
        Topology::new(2, 2).unwrap(),
        &m,
        level.clone(),
        Some(level),
        "x".into(),
    );
    hw.validate().unwrap();
    assert_eq!(hw.chips(), 4);
    assert!((hw.compute.efficiency - 150.0 / 180.0).abs() < 1e-3);
    // The bf16 GEMM's own rate, for bf16 dense layers.
    assert_eq!(hw.compute.bf16_peak_tflops, Some(0.06));
    assert!(!hw.system.on_chip_buffers);
    assert_eq!(hw.system.allreduce_overlap, 0.0);
    assert_eq!(hw.system.lookup_comm_overlap, 0.0);
    // The reader's CPU time over the chip's 2 threads.
    assert_eq!(
        hw.system.synthetic_reader,
        Some(ReaderCosts {
            sample_ns: 450.0,
            zipf_id_ns: 40.0,
            uniform_id_ns: 10.0,
        })
    );
}

#[test]
fn a_sweep_keeps_its_points_as_bytes_moved_for_the_simulator() {
    // An all-to-all over 2 ranks moves half of each rank's buffer.
    let points = vec![(8, 2e-5), (1 << 20, 3e-3), (1 << 24, 0.2)];
    let sw = Sweep::new(Op::AllToAll, 2, points);
    assert_eq!(
        sw.fit.measured,
        vec![[4.0, 20.0], [524_288.0, 3000.0], [8_388_608.0, 200_000.0]]
    );
    // Between two points the simulator reads the points, not the line.
    let mid = sw.fit.time(0.5 * (524_288.0 + 8_388_608.0));
    assert!((mid - 0.5 * (3e-3 + 0.2)).abs() < 1e-12, "{mid}");
    let level = Sweeps {
        all_to_all: sw.clone(),
        all_reduce: sw,
    }
    .level();
    assert_eq!(level.all_to_all.measured.len(), 3);
    assert_eq!(level.all_reduce.as_ref().map(|a| a.measured.len()), Some(3));
}

// GEMM, MLP, interaction and reader say how they were taken.
#[test]
fn the_machine_comment_says_how_rates_were_taken() {
    let alone = machine().comment("x");
    assert!(alone.contains("best repetition") && alone.contains("(median)"));
    let shared = Machine {
        rate: Rate::Sustained,
        ..machine()
    }
    .comment("x");
    assert!(!shared.contains("best repetition"), "{shared}");
    assert_eq!(shared.matches("sustained").count(), 4, "{shared}");
}
