//! The micro-batch schedule (`simulate_parts`): a training step in two parts against the
//! whole step, checked against hand computations on α–β networks.

use proptest::prelude::*;
use std::path::Path;
use towerrec_sim::{
    simulate, simulate_parts, Collective, Exchange, Hardware, Mode, RankLoad, Scenario, Sharding,
    Step, TowerModuleKind, Towers, Workload,
};

/// `hosts × per_host` chips of `tflops`, every collective `latency_us + bytes / gbs`,
/// memory fast enough not to matter, nothing overlapped but what the schedule overlaps.
fn hardware(hosts: usize, per_host: usize, tflops: f64, latency_us: f64, gbs: f64) -> Hardware {
    let level = format!(
        "all_to_all = {{ latency_us = {latency_us:?}, bandwidth_gbs = {gbs:?} }}\n\
         all_reduce = {{ latency_us = {latency_us:?}, bandwidth_gbs = {gbs:?} }}\n"
    );
    let text = format!(
        "name = \"test\"\nhosts = {hosts}\nchips_per_host = {per_host}\n\
         [compute]\npeak_tflops = {tflops:?}\nefficiency = 1.0\n\
         [memory]\nmodel = \"measured\"\nstream_gbs = 10000.0\nrandom_read = [[64.0, 10000.0], [512.0, 10000.0]]\n\
         [network.intra_host]\n{level}\
         [network.cross_host]\n{level}scaling = {{ knee = inf, exponent = 1.0, latency_per_log2 = 0.0 }}\n\
         [system]\non_chip_buffers = false\nlookup_comm_overlap = 0.0\nallreduce_overlap = 0.0\n"
    );
    Hardware::from_toml(&text, Path::new("test.toml")).unwrap()
}

fn training(exchange: Exchange) -> Scenario {
    Scenario {
        mode: Mode::Training,
        sharding: Sharding::Unsharded,
        exchange,
    }
}

fn step(w: &Workload, hw: &Hardware, scenario: Scenario, parts: usize) -> Step {
    simulate_parts(w, hw, scenario, RankLoad::EVEN, parts).unwrap()
}

/// The dense work the schedule overlaps: interaction, top MLP and their backward.
fn dense(s: &Step) -> f64 {
    ["interaction", "top_mlp", "top_mlp_backward"]
        .iter()
        .map(|n| s.phase(n).unwrap().seconds)
        .sum()
}

fn raw(s: &Step, name: &str) -> f64 {
    s.phase(name).unwrap().seconds
}

fn close(a: f64, b: f64, scale: f64) -> bool {
    (a - b).abs() <= 1e-9 * scale
}

/// DMT-DLRM's towers, 2 of the DLRM module (c = 1, p = 0, D = 64), per-feature maps
/// before step d in `chunks` chunks, as towerrec's runtime runs them.
fn towers(w: &Workload, hosts: usize, chunks: usize) -> Exchange {
    let kind = TowerModuleKind::Dlrm { c: 1, p: 0, d: 64 };
    let mut t = Towers::strided(kind, w.num_tables(), 2).unwrap();
    t.maps_at_lookup = true;
    t.chunks = chunks;
    Exchange::Towers(t.costs(w, hosts).unwrap())
}

#[test]
fn an_exchange_far_longer_than_the_dense_work_hides_all_of_it() {
    // 1 host × 4 chips, 1 GB/s: DMT-DLRM's 16,384 samples a chip move 0.16 s of rows
    // each way, its dense work takes milliseconds. Without latency the halves cost
    // nothing extra and hide every part's dense work: the step is shorter by exactly the
    // dense time. With 50 µs a collective each direction pays one latency more.
    let w = Workload::dmt_dlrm();
    for (latency_us, tflops) in [(0.0, 50.0), (50.0, 50.0), (50.0, 1e5)] {
        let hw = hardware(1, 4, tflops, latency_us, 1.0);
        let whole = step(&w, &hw, training(Exchange::Flat), 1);
        let halves = step(&w, &hw, training(Exchange::Flat), 2);
        assert_eq!((whole.parts, halves.parts), (1, 2));
        let d = dense(&whole);
        let want = whole.seconds - d + 2.0 * latency_us * 1e-6;
        assert!(
            close(halves.seconds, want, whole.seconds),
            "{latency_us} µs: {} against {want}",
            halves.seconds
        );
        // Both parts' dense work hidden, each beside the other part's exchange.
        assert_eq!(halves.overlaps.len(), 2);
        for (o, (exchange, part, dense_part)) in halves.overlaps.iter().zip([
            ("embedding_exchange", "part 1", 0),
            ("embedding_grad_exchange", "part 0", 1),
        ]) {
            assert_eq!(
                (o.exchange, o.exchange_part, o.dense_part),
                (exchange, part, dense_part)
            );
            assert!(close(o.hidden, d / 2.0, d) && o.hidden == o.dense_seconds);
        }
        for name in ["interaction", "top_mlp", "top_mlp_backward"] {
            assert_eq!(halves.phase(name).unwrap().exposed, 0.0);
        }
        // The same phases and bytes, each exchange in two collectives.
        let ex = raw(&halves, "embedding_exchange");
        assert!(close(
            ex,
            raw(&whole, "embedding_exchange") + latency_us * 1e-6,
            ex
        ));
        assert!(whole.overlaps.is_empty());
    }
}

#[test]
fn dense_work_far_longer_than_the_exchange_hides_half_of_each_direction() {
    // 1000 GB/s and no latency, a chip of 10 GFLOP/s: the dense work of a part outlasts
    // any part of the exchange, so the part beside it is hidden, half of each direction.
    let w = Workload::dmt_dlrm();
    let hw = hardware(2, 2, 0.01, 0.0, 1000.0);
    let whole = step(&w, &hw, training(Exchange::Flat), 1);
    let halves = step(&w, &hw, training(Exchange::Flat), 2);
    let (f, b) = (
        raw(&whole, "embedding_exchange"),
        raw(&whole, "embedding_grad_exchange"),
    );
    assert!(dense(&whole) > 10.0 * (f + b));
    assert!(close(
        halves.seconds,
        whole.seconds - (f + b) / 2.0,
        whole.seconds
    ));
    let exposed = |name: &str| halves.phase(name).unwrap().exposed;
    assert!(close(exposed("embedding_exchange"), f / 2.0, f));
    assert!(close(exposed("embedding_grad_exchange"), b / 2.0, b));
    assert!(close(exposed("top_mlp"), raw(&whole, "top_mlp"), f));
    // Fully sharded tables split as well (row-wise over every chip, as the runtime's).
    let sharded = Scenario {
        sharding: Sharding::Sharded,
        ..training(Exchange::Flat)
    };
    let whole = step(&w, &hw, sharded, 1);
    let halves = step(&w, &hw, sharded, 2);
    let half = (raw(&whole, "embedding_exchange") + raw(&whole, "embedding_grad_exchange")) / 2.0;
    assert!(close(halves.seconds, whole.seconds - half, whole.seconds));
}

#[test]
fn towers_hide_a_part_s_dense_work_beside_one_chunk_s_step_f() {
    // 2 hosts × 1 chip, one tower per host, 4 chunks: step d stays on the chip, step f
    // crosses a slow link. The runtime's halves cut the same 4 chunks from the halves
    // of the slice; part 0's dense work runs beside the last chunk's step f, part 1's
    // beside the first chunk's step f back.
    let w = Workload::dmt_dlrm();
    let slow = hardware(2, 1, 50.0, 0.0, 0.1);
    let ex = towers(&w, 2, 4);
    let whole = step(&w, &slow, training(ex), 1);
    let halves = step(&w, &slow, training(ex), 2);
    assert_eq!(halves.parts, 2);
    assert!(close(
        halves.seconds,
        whole.seconds - dense(&whole),
        whole.seconds
    ));
    assert_eq!(halves.overlaps[0].exchange_part, "the last chunk's step f");
    assert_eq!(halves.overlaps[1].exchange_part, "the first chunk's step f");
    // A fast link: now one chunk's step f is what each part's dense work hides. Its
    // time by hand: step f sends each chunk's 4,096 samples, for each of the 2 groups
    // its tower's 13 × 64 values of one byte (the preset's 8-bit wire).
    let fast = hardware(2, 1, 0.5, 0.0, 100.0);
    let whole = step(&w, &fast, training(ex), 1);
    let halves = step(&w, &fast, training(ex), 2);
    let Exchange::Towers(tc) = ex else {
        unreachable!()
    };
    let bytes = tc.busiest.peer_values * w.wire_row_bytes() / 128.0 * 16_384.0 / 4.0;
    assert_eq!(tc.busiest.peer_values, 2.0 * 13.0 * 64.0);
    let f = fast.network.peers(Collective::AllToAll, bytes, 2);
    assert!(close(f, bytes / 2.0 / 100e9, f));
    assert!(dense(&whole) / 2.0 > f);
    assert!(close(
        halves.seconds,
        whole.seconds - 2.0 * f,
        whole.seconds
    ));
    // One chunk asked for: the halves make two, the maps inside the exchange.
    let one = towers(&w, 2, 1);
    let whole = step(&w, &slow, training(one), 1);
    let halves = step(&w, &slow, training(one), 2);
    assert!(whole.phase("tower_modules").is_some() && halves.phase("tower_modules").is_none());
    assert_eq!(halves.parts, 2);
}

#[test]
fn what_the_runtime_runs_whole_is_priced_whole() {
    let w = Workload::dmt_dlrm();
    let hw = hardware(2, 1, 50.0, 10.0, 1.0);
    let kind = TowerModuleKind::Dlrm { c: 1, p: 0, d: 64 };
    let mut after_e = Towers::strided(kind, w.num_tables(), 2).unwrap();
    after_e.chunks = 4;
    let mut sptt = after_e.pass_through();
    sptt.maps_at_lookup = true;
    // SPTT alone has no maps to run early; the paper's modules run after step e.
    for t in [after_e, sptt] {
        let ex = Exchange::Towers(t.costs(&w, 2).unwrap());
        assert!(!ex.splits());
        let s = step(&w, &hw, training(ex), 2);
        assert_eq!((s.parts, s.overlaps.len()), (1, 0));
        assert_eq!(s, step(&w, &hw, training(ex), 1));
    }
    // Inference has no backward to overlap: whole.
    let infer = Scenario {
        mode: Mode::Inference,
        ..training(Exchange::Flat)
    };
    let s = step(&w, &hw, infer, 2);
    assert_eq!(s.parts, 1);
    assert_eq!(s, simulate(&w, &hw, infer).unwrap());
    for bad in [0, 3] {
        let e = simulate_parts(&w, &hw, training(Exchange::Flat), RankLoad::EVEN, bad);
        assert!(e.unwrap_err().to_string().contains("halves"));
    }
}

proptest! {
    #[test]
    fn halves_gain_at_most_the_dense_time_and_half_the_exchange(
        latency_us in 0.001f64..200.0,
        gbs in 0.01f64..100.0,
        tflops in 0.001f64..10.0,
        hosts in 1usize..3,
        per_host in 1usize..4,
        sharded in any::<bool>(),
        with_towers in any::<bool>(),
        chunks in 1usize..6,
    ) {
        let w = Workload::dmt_dlrm();
        let hw = hardware(hosts, per_host, tflops, latency_us, gbs);
        let (exchange, sharding) = if with_towers && hosts > 1 {
            (towers(&w, hosts, chunks), Sharding::Unsharded)
        } else if sharded {
            (Exchange::Flat, Sharding::Sharded)
        } else {
            (Exchange::Flat, Sharding::Unsharded)
        };
        let scenario = Scenario { mode: Mode::Training, sharding, exchange };
        let whole = step(&w, &hw, scenario, 1);
        let halves = step(&w, &hw, scenario, 2);
        let exposed: f64 = halves.phases.iter().map(|p| p.exposed).sum();
        prop_assert!(close(exposed, halves.seconds, halves.seconds));
        prop_assert!(halves.phases.iter().all(|p| p.exposed >= 0.0 && p.exposed <= p.seconds));
        let gain = whole.seconds - halves.seconds;
        let hidden: f64 = halves.overlaps.iter().map(|o| o.hidden).sum();
        // An odd chunk count is rounded up to even in halves: another pipeline.
        if !(with_towers && hosts > 1) || chunks % 2 == 0 {
            prop_assert!(gain <= hidden * (1.0 + 1e-9) + 1e-15);
        }
        prop_assert!(hidden <= dense(&whole) * (1.0 + 1e-9));
        let exchanges = raw(&whole, "embedding_exchange") + raw(&whole, "embedding_grad_exchange");
        if !with_towers || hosts == 1 {
            prop_assert!(gain <= exchanges / 2.0 * (1.0 + 1e-9) + 1e-15);
        }
    }
}
