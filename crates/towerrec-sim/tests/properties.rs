//! Properties of the cost models that must hold for any input.

use proptest::prelude::*;
use towerrec_sim::{
    simulate, simulate_rank, Collective, CrossHost, Exchange, Group, Hardware, Level, LevelShares,
    Mode, Network, RankLoad, Scaling, Scenario, Sharding, Workload,
};

fn network(lat: f64, bw: f64, cross: bool) -> Network {
    Network {
        intra_host: Level::uniform(lat, bw),
        cross_host: cross.then(|| CrossHost {
            level: Level::uniform(lat * 4.0, bw / 8.0),
            scaling: Scaling {
                knee: 128.0,
                exponent: 1.0,
                latency_per_log2: 0.1,
            },
        }),
    }
}

const OPS: [Collective; 4] = [
    Collective::AllToAll,
    Collective::AllReduce,
    Collective::AllGather,
    Collective::ReduceScatter,
];

proptest! {
    #[test]
    fn collectives_cost_at_least_the_lower_bound_and_grow_with_bytes(
        lat in 0.1f64..100.0,
        bw in 1.0f64..2000.0,
        bytes in 1.0f64..1e9,
        hosts in 1usize..64,
        per_host in 1usize..16,
        op in 0usize..4,
    ) {
        let net = network(lat, bw, hosts > 1);
        let group = Group { hosts, per_host };
        let op = OPS[op];
        let t = net.flat(op, bytes, group);
        let n = group.size();
        if n == 1 {
            prop_assert_eq!(t, 0.0);
        } else {
            let bound = lat * 1e-6 + bytes * op.volume_factor(n) / (bw * 1e9);
            prop_assert!(t >= bound * (1.0 - 1e-12), "{} < {}", t, bound);
            prop_assert!(net.flat(op, bytes * 2.0, group) > t);
        }
    }

    #[test]
    fn each_level_is_priced_by_its_own_share(
        lat in 0.1f64..100.0,
        bw in 1.0f64..2000.0,
        bytes in 1.0f64..1e9,
        hosts in 2usize..16,
        per_host in 2usize..8,
        op in 0usize..4,
        intra in 0.0f64..3.0,
        cross in 0.0f64..3.0,
        more in 1.0f64..3.0,
    ) {
        let net = network(lat, bw, true);
        let group = Group { hosts, per_host };
        let op = OPS[op];
        let priced = |intra, cross| net.flat_scaled(op, bytes, group, LevelShares { intra, cross });
        prop_assert_eq!(priced(1.0, 1.0), net.flat(op, bytes, group));
        prop_assert_eq!(priced(0.0, 0.0), 0.0);
        let t = priced(intra, cross);
        prop_assert!(priced(intra * more, cross) >= t * (1.0 - 1e-12));
        prop_assert!(priced(intra, cross * more) >= t * (1.0 - 1e-12));
        // The cross-host fabric is the slower level here: bytes kept within the host
        // never cost more than the same share spread evenly.
        prop_assert!(priced(intra, 0.0) <= priced(intra, intra) * (1.0 + 1e-12));
    }

    #[test]
    fn faster_collectives_never_slow_a_step(
        lat in 0.5f64..10.0,
        bw in 100.0f64..1000.0,
        large in any::<bool>(),
        sharded in any::<bool>(),
        training in any::<bool>(),
    ) {
        let base = Hardware::preset("reference").unwrap();
        let scenario = Scenario {
            mode: if training { Mode::Training } else { Mode::Inference },
            sharding: if sharded { Sharding::Sharded } else { Sharding::Unsharded },
            exchange: Exchange::Flat,
        };
        let w = Workload::rm2(large);
        let step = |l, b| {
            let hw = towerrec_sim::paper::with_collectives(&base, l, b);
            simulate(&w, &hw, scenario).unwrap()
        };
        let s = step(lat, bw);
        prop_assert!(step(lat / 2.0, bw).seconds <= s.seconds);
        prop_assert!(step(lat, bw * 2.0).seconds <= s.seconds);
        let exposed: f64 = s.phases.iter().map(|p| p.exposed).sum();
        prop_assert!((exposed - s.seconds).abs() <= 1e-12 * s.seconds);
        prop_assert!(s.phases.iter().all(|p| p.exposed >= 0.0 && p.exposed <= p.seconds));
        prop_assert!(s.memory_utilization() <= 1.0 + 1e-9);
    }

    #[test]
    fn a_rank_with_more_embedding_work_is_never_faster(
        lookups in 0.0f64..4.0,
        exchange in 0.0f64..4.0,
        more in 1.0f64..3.0,
        sharded in any::<bool>(),
        training in any::<bool>(),
    ) {
        let hw = Hardware::preset("dgx-a100").unwrap().with_chips(16).unwrap();
        let scenario = Scenario {
            mode: if training { Mode::Training } else { Mode::Inference },
            sharding: if sharded { Sharding::Sharded } else { Sharding::Unsharded },
            exchange: Exchange::Flat,
        };
        let w = Workload::rm2(false);
        let step = |l, e| {
            let exchange = LevelShares { intra: e, cross: e };
            simulate_rank(&w, &hw, scenario, RankLoad { lookups: l, exchange }).unwrap()
        };
        let s = step(lookups, exchange);
        prop_assert!(step(lookups * more, exchange).seconds >= s.seconds * (1.0 - 1e-12));
        prop_assert!(step(lookups, exchange * more).seconds >= s.seconds * (1.0 - 1e-12));
        let lookup = |s: &towerrec_sim::Step| s.phase("lookup").unwrap().seconds;
        let doubled = step(2.0 * lookups, exchange);
        prop_assert!((lookup(&doubled) - 2.0 * lookup(&s)).abs() <= 1e-9 * lookup(&doubled).max(1e-300));
    }

    #[test]
    fn random_reads_never_beat_the_bus(row in 8.0f64..4096.0, preset in 0usize..5) {
        let hw = Hardware::preset(["recspeed", "reference", "dgx2", "dgx-a100", "h100-cluster"][preset]).unwrap();
        let m = &hw.memory;
        prop_assert!(m.random_read(row) > 0.0);
        prop_assert!(m.random_read(row) <= m.peak());
        prop_assert!(m.random_read(row * 2.0) >= m.random_read(row) * (1.0 - 1e-12));
    }
}

#[test]
fn an_even_rank_is_the_step_of_simulate_and_shares_are_checked() {
    let hw = Hardware::preset("dgx-a100").unwrap();
    let scenario = Scenario {
        mode: Mode::Training,
        sharding: Sharding::Unsharded,
        exchange: Exchange::Flat,
    };
    let w = Workload::rm2(false);
    let even = simulate_rank(&w, &hw, scenario, RankLoad::EVEN).unwrap();
    assert_eq!(even, simulate(&w, &hw, scenario).unwrap());
    let idle = RankLoad {
        lookups: 0.0,
        exchange: LevelShares {
            intra: 0.0,
            cross: 0.0,
        },
    };
    let s = simulate_rank(&w, &hw, scenario, idle).unwrap();
    assert_eq!(s.phase("lookup").unwrap().seconds, 0.0);
    assert!(s.seconds < even.seconds);
    for bad in [f64::NAN, -1.0, f64::INFINITY] {
        let load = RankLoad {
            lookups: bad,
            exchange: LevelShares::EVEN,
        };
        assert!(simulate_rank(&w, &hw, scenario, load).is_err());
        let load = RankLoad {
            lookups: 1.0,
            exchange: LevelShares {
                intra: 1.0,
                cross: bad,
            },
        };
        assert!(simulate_rank(&w, &hw, scenario, load).is_err());
    }
}

#[test]
fn a_512_gpu_point_simulates() {
    // The speed of this (well under a millisecond) is measured in docs/SIMULATOR.md,
    // not here.
    let hw = Hardware::preset("h100-cluster")
        .unwrap()
        .with_chips(512)
        .unwrap();
    let scenario = Scenario {
        mode: Mode::Training,
        sharding: Sharding::Unsharded,
        exchange: Exchange::Flat,
    };
    let step = simulate(&Workload::dmt_dlrm(), &hw, scenario).unwrap();
    assert_eq!(step.chips, 512);
    assert_eq!(step.global_batch, 512.0 * 16_384.0);
}

/// The measured sync-wait curve: read linearly from (0, 0) through its points and flat
/// after the last; a step pays one wait per collective that follows computation (a
/// flat training step: the index exchange, the pooled exchange, its gradient and the
/// dense all-reduce), each for the work since the collective before it.
#[test]
fn sync_waits_follow_the_measured_curve() {
    let mut hw = Hardware::preset("reference").unwrap();
    hw.system.sync_wait = vec![[1000.0, 100.0], [4000.0, 400.0]];
    let s = &hw.system;
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-12;
    assert!(close(s.sync_wait(0.0), 0.0));
    assert!(close(s.sync_wait(500e-6), 50e-6));
    assert!(close(s.sync_wait(2500e-6), 250e-6));
    assert!(close(s.sync_wait(1.0), 400e-6));
    let scenario = Scenario {
        mode: Mode::Training,
        sharding: Sharding::Unsharded,
        exchange: Exchange::Flat,
    };
    let w = Workload::rm2(false);
    let without = simulate(&w, &Hardware::preset("reference").unwrap(), scenario).unwrap();
    let with = simulate(&w, &hw, scenario).unwrap();
    let wait = with.phase("sync_wait").unwrap().seconds;
    assert!(close(with.seconds, without.seconds + wait));
    // Every phase of this step is longer than the curve's last point: 4 flat waits.
    let gaps = without
        .phases
        .iter()
        .filter(|p| p.resource == towerrec_sim::Resource::Network)
        .count();
    assert_eq!(gaps, 4);
    assert!(wait <= 4.0 * 400e-6 + 1e-12, "{wait}");
    assert!(wait > 0.0);
    hw.system.sync_wait = vec![[2.0, 1.0], [1.0, 1.0]];
    assert!(hw.validate().is_err());
}

#[test]
fn a_measured_interaction_rate_prices_the_interaction_phases() {
    let mut hw = Hardware::preset("dgx-a100").unwrap();
    let scenario = Scenario {
        mode: Mode::Training,
        sharding: Sharding::Unsharded,
        exchange: Exchange::Flat,
    };
    let w = Workload::rm2(false);
    let before = simulate(&w, &hw, scenario).unwrap();
    // A tenth of the rate the dense layers get.
    let dense_gflops = hw.compute.peak_tflops * 1e3 * hw.compute.efficiency;
    hw.compute.interaction = vec![[1.0, dense_gflops / 10.0]];
    let after = simulate(&w, &hw, scenario).unwrap();
    let phase = |s: &towerrec_sim::Step, name| s.phase(name).unwrap().seconds;
    let ratio = phase(&after, "interaction") / phase(&before, "interaction");
    assert!((ratio - 10.0).abs() < 1e-9, "{ratio}");
    assert!(phase(&after, "top_mlp_backward") > phase(&before, "top_mlp_backward"));
    assert_eq!(phase(&after, "top_mlp"), phase(&before, "top_mlp"));
}

/// A DMT step whose per-feature maps run at lookup, in chunks: the exchange is a
/// two-stage pipeline (maps, shuffles and step d; step f), which hides at most the
/// shorter stage, so it never takes less than half of the stages back to back; on this
/// workload, where the stages are comparable, 2 and 4 chunks are faster than none (8 pay
/// more in latency than they hide on these fast chips). Modules that are not
/// per-feature maps are not chunked.
#[test]
fn a_chunked_exchange_hides_at_most_the_shorter_stage() {
    use towerrec_core::layers::tower::TowerModuleKind;
    use towerrec_sim::Towers;
    let w = Workload::dmt_dlrm();
    let hw = Hardware::preset("dgx-a100")
        .unwrap()
        .with_chips(16)
        .unwrap();
    let step = |chunks: usize| {
        let mut towers =
            Towers::strided(TowerModuleKind::Dlrm { c: 1, p: 0, d: 32 }, 26, 2).unwrap();
        towers.maps_at_lookup = true;
        towers.chunks = chunks;
        let costs = towers.costs(&w, hw.hosts).unwrap();
        assert_eq!(costs.chunks, chunks);
        let scenario = Scenario {
            mode: Mode::Training,
            sharding: Sharding::Unsharded,
            exchange: Exchange::Towers(costs),
        };
        simulate(&w, &hw, scenario).unwrap()
    };
    let one = step(1);
    let exchange = |s: &towerrec_sim::Step| {
        s.phase("embedding_exchange").unwrap().seconds
            + s.phase("embedding_grad_exchange").unwrap().seconds
    };
    let modules = one.phase("tower_modules").unwrap().seconds
        + one.phase("tower_modules_backward").unwrap().seconds;
    let unpipelined = exchange(&one) + modules;
    for chunks in [2, 4, 8, 64] {
        let s = step(chunks);
        assert!(
            s.phase("tower_modules").is_none(),
            "maps run inside the exchange"
        );
        assert!(exchange(&s) >= unpipelined / 2.0, "{chunks} chunks");
        if chunks <= 4 {
            assert!(
                exchange(&s) < unpipelined,
                "{chunks} chunks: {} against {unpipelined}",
                exchange(&s)
            );
            assert!(s.seconds < one.seconds);
        }
    }
    // Chunks not at lookup (a module with a flat part) change nothing.
    let mut flat_part =
        Towers::strided(TowerModuleKind::Dlrm { c: 1, p: 1, d: 32 }, 26, 2).unwrap();
    flat_part.maps_at_lookup = true;
    flat_part.chunks = 4;
    assert_eq!(flat_part.costs(&w, hw.hosts).unwrap().chunks, 1);
}

/// A step pays the synthetic reader for its chip's slice of the batch, at the hardware's
/// measured costs, only where both the workload says the data is generated and the
/// hardware says what that costs.
#[test]
fn reading_generated_samples_costs_the_chips_slice() {
    use towerrec_sim::{ReaderCosts, SyntheticIds};
    let scenario = Scenario {
        mode: Mode::Training,
        sharding: Sharding::Unsharded,
        exchange: Exchange::Flat,
    };
    let mut hw = Hardware::preset("reference").unwrap();
    let mut w = Workload::rm2(false);
    let plain = simulate(&w, &hw, scenario).unwrap();
    assert!(plain.phase("data_read").is_none());
    w.synthetic = Some(SyntheticIds {
        zipf: 10.0,
        uniform: 30.0,
    });
    let unpriced = simulate(&w, &hw, scenario).unwrap();
    assert!(unpriced.phase("data_read").is_none());
    assert_eq!(unpriced.seconds, plain.seconds);
    hw.system.synthetic_reader = Some(ReaderCosts {
        sample_ns: 1000.0,
        zipf_id_ns: 100.0,
        uniform_id_ns: 10.0,
    });
    let step = simulate(&w, &hw, scenario).unwrap();
    let read = step.phase("data_read").unwrap().seconds;
    let samples = w.batch_per_chip(hw.chips());
    let expected = samples * (1000.0 + 10.0 * 100.0 + 30.0 * 10.0) * 1e-9;
    assert!(
        (read - expected).abs() <= 1e-15 * expected.max(1.0),
        "{read} {expected}"
    );
    assert!(step.seconds >= plain.seconds + read - 1e-12);
    hw.system.synthetic_reader = Some(ReaderCosts {
        sample_ns: f64::INFINITY,
        zipf_id_ns: 0.0,
        uniform_id_ns: 0.0,
    });
    assert!(hw.validate().is_err());
}
