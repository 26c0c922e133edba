//! Fuzzing hardware TOML: `Hardware::from_toml` on arbitrary text and on the presets
//! (and descriptions with a DRAM table of their own, measured memory and system
//! traits) mutated. Whatever the input, loading returns a description or an error
//! naming the key; it never panics, hangs or allocates beyond the guard's limits. A
//! description that loads writes back (as `towerrec calibrate` saves one) to the same
//! description, resizes, and simulates a model in every mode without a panic. Run long
//! with `PROPTEST_CASES=1000000 cargo test --release -p towerrec-sim --test fuzz`.

use proptest::prelude::*;
use std::path::Path;
use towerrec_fuzz::{arbitrary, config, mutated, AllocGuard};
use towerrec_sim::{
    simulate, Exchange, Hardware, Mode, Scenario, Sharding, TowerModuleKind, Towers, Workload,
};

#[global_allocator]
static ALLOC: AllocGuard = AllocGuard;

/// A description with its own DRAM table, measured memory, and every system trait.
const CUSTOM: &str = r#"name = "custom"
hosts = 2
chips_per_host = 4
[compute]
peak_tflops = 10.0
efficiency = 0.5
[memory]
model = "dram"
units = 2
data_rate_mts = 3000.0
[memory.timing]
name = "DDR4"
data_rate_mts = 3200.0
clock_ratio = 2.0
channel_bits = 64
channels_per_unit = 1
burst_length = 8
banks = 16
bank_groups = 4
t_rcd = 13.75
t_rp = 13.75
t_ras = 32.5
t_rtp = 7.5
t_rrd_s = 2.5
t_faw = 10.0
t_ccd_l_nck = 8.0
t_switch_nck = 2.0
t_rfc = 350.0
t_refi = 7800.0
[network.intra_host]
all_to_all = { latency_us = 1.0, bandwidth_gbs = 100.0 }
reduce_scatter = { latency_us = 2.0, bandwidth_gbs = 90.0 }
all_gather = { latency_us = 2.0, bandwidth_gbs = 90.0 }
[network.cross_host]
all_to_all = { latency_us = 5.0, bandwidth_gbs = 10.0 }
scaling = { knee = 16.0, exponent = 2.0, latency_per_log2 = 0.5 }
[system]
on_chip_buffers = false
lookup_comm_overlap = 0.5
allreduce_overlap = 0.0
lookup_overhead_ns = 10.0
update_overhead_ns = 20.0
step_overhead_us = 100.0
"#;

const MEASURED: &str = r#"name = "measured"
hosts = 1
chips_per_host = 1
[compute]
peak_tflops = 1.5
[memory]
model = "measured"
stream_gbs = 20.0
random_read = [[64.0, 8.0], [256.0, 12.0], [4096.0, 18.0]]
[network.intra_host]
all_to_all = { latency_us = 0.0, bandwidth_gbs = 1.0 }
"#;

const TOKENS: &[&[u8]] = &[
    b"=",
    b"\"",
    b"[",
    b"]",
    b"{",
    b"}",
    b",",
    b".",
    b"\n",
    b"0",
    b"0.0",
    b"1",
    b"-1",
    b"1.0000001",
    b"1e308",
    b"1e-308",
    b"5e-324",
    b"nan",
    b"inf",
    b"-inf",
    b"-0.0",
    b"true",
    b"4294967295",
    b"4294967296",
    b"9223372036854775807",
    b"1048576",
    b"1048577",
    b"efficiency = ",
    b"knee = inf",
    b"timing = \"hbm3\"",
    b"timing = \"sram\"",
    b"model = \"measured\"",
    b"random_read = []",
    b"units = 4294967295",
    b"channels_per_unit = 4294967295",
    b"burst_length = 4294967295",
    b"t_rfc = 7800.0",
    b"[network.cross_host]\nall_to_all = { latency_us = 1.0, bandwidth_gbs = 1.0 }\n",
    b"[system]\n",
    b"hosts = 1048576\n",
    b"chips_per_host = 2\n",
];

const ALPHABET: &[u8] = b"[]{}=\".,\n 0123456789eadiknpstu_";

fn seeds() -> Vec<Vec<u8>> {
    Hardware::preset_names()
        .iter()
        .map(|n| Hardware::preset_toml(n).unwrap())
        .chain([CUSTOM, MEASURED])
        .map(|t| t.as_bytes().to_vec())
        .collect()
}

fn check(text: &str) {
    let Ok(hw) = Hardware::from_toml(text, Path::new("f.toml")) else {
        return;
    };
    let written = toml::to_string(&hw).unwrap();
    let back = Hardware::from_toml(&written, Path::new("written.toml"))
        .unwrap_or_else(|e| panic!("a description that loads does not load again: {e}"));
    assert_eq!(back, hw);
    let chips = hw.chips();
    for n in [1, chips, chips.saturating_mul(2)] {
        let _ = hw.with_chips(n);
    }
    let workload = Workload::rm2(false);
    let mut exchanges = vec![
        (Sharding::Unsharded, Exchange::Flat),
        (Sharding::Sharded, Exchange::Flat),
    ];
    let kind = TowerModuleKind::Dlrm { c: 1, p: 0, d: 16 };
    if let Ok(towers) = Towers::per_host(&workload, kind, hw.hosts) {
        for t in [towers.pass_through(), towers] {
            if let Ok(c) = t.costs(&workload, hw.hosts) {
                exchanges.push((Sharding::Unsharded, Exchange::Towers(c)));
            }
        }
    }
    for mode in [Mode::Training, Mode::Inference] {
        for &(sharding, exchange) in &exchanges {
            let scenario = Scenario {
                mode,
                sharding,
                exchange,
            };
            if let Ok(step) = simulate(&workload, &hw, scenario) {
                assert!(
                    step.seconds.is_finite() && step.seconds > 0.0,
                    "{scenario:?}: {} seconds",
                    step.seconds
                );
            }
        }
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn hardware_from_toml(
        bytes in prop_oneof![
            4 => mutated(seeds(), TOKENS, 256),
            1 => arbitrary(ALPHABET, 600),
        ],
    ) {
        check(&String::from_utf8_lossy(&bytes));
    }
}
