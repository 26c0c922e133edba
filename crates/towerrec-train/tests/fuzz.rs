//! Fuzzing the run configuration: `Config::from_toml` on arbitrary text and on the
//! example configs mutated, and `KEY=VALUE` overrides (`with_overrides`) of every kind
//! applied to them. Whatever the input, loading returns a config or an error naming
//! the problem; it never panics, hangs or allocates beyond the guard's limits. A
//! config that loads also writes back (`to_toml`, as a run directory and a checkpoint
//! keep it) to text that loads to the same config, and for synthetic data its schema
//! and first records can be made.
//!
//! Checkpoints: `Checkpoint::from_bytes` on arbitrary bytes and on a real checkpoint
//! mutated, raw (the checksums catch the change) and resealed with matching checksums
//! (so that the checks behind them see arbitrary contents); a checkpoint that reads is
//! applied to a fresh model, which it fills or refuses, naming why. Run long with
//! `PROPTEST_CASES=1000000 cargo test -p towerrec-train --test fuzz`.

#[path = "suite/common/mod.rs"]
mod common;

use proptest::prelude::*;
use std::path::Path;
use towerrec_data::{DataConfig, Part, RecordStream};
use towerrec_fuzz::{arbitrary, config, mutated, AllocGuard};
use towerrec_train::checkpoint::{reseal, save, Checkpoint, Progress};
use towerrec_train::config::{with_overrides, Config, QUICKSTART_TOML};
use towerrec_train::Model;

#[global_allocator]
static ALLOC: AllocGuard = AllocGuard;

const EXAMPLES: &[&str] = &[
    QUICKSTART_TOML,
    include_str!("../../../examples/criteo.toml"),
    include_str!("../../../examples/dcn.toml"),
    include_str!("../../../examples/avazu.toml"),
    include_str!("../../../examples/movielens.toml"),
    include_str!("../../../bench/kaggle.toml"),
    include_str!("../../../bench/multihot.toml"),
];

/// TOML syntax, keys and values at the edges of what the config accepts.
const TOKENS: &[&[u8]] = &[
    b"=", b"\"", b"'", b"[", b"]", b"[[", b"{", b"}", b",", b".", b"\n", b"#", b"0", b"1",
    b"-1", b"1e308", b"1e-308", b"nan", b"inf", b"-inf", b"true", b"false", b"\"\"",
    b"9223372036854775807", b"4611686018427387904", b"4294967296", b"1_000_000_000_000",
    b"kind = \"dcn\"", b"kind = \"dlrm\"", b"cross_layers = 3", b"cross_rank = 0",
    b"count = 1000000000", b"num_dense = 1000000000", b"rows = 0",
    b"rows = 9223372036854775807", b"pooling = { mean = 1e300 }", b"pooling = 4294967295",
    b"zipf_exponent = 1e-300", b"zipf_exponent = 1e300", b"positive_rate = 1",
    b"signal = 1e308", b"eval_path = \"x.bin\"", b"[cluster]\nhosts = 64\n",
    b"ranks_per_host = 4096", b"plan = \"p.json\"", b"bad_rows = \"skip\"",
    b"split = { kind = \"random\", eval_fraction = 2 }", b"split = { kind = \"tail\" }",
    b"schedule = { warmup_steps = 10, decay = { kind = \"cosine\", end_step = 0, end_factor = -1 } }",
    b"[data]\nformat = \"synthetic\"\ntrain_samples = 1\neval_samples = 1\ntables = [{ rows = 1 }]\n",
    b"format = \"csv\"", b"format = \"binary\"", b"format = \"criteo\"",
    b"schema = { label = { column = \"y\" } }",
];

const ALPHABET: &[u8] = b"[]{}=\"',.\n #0123456789abcdefmodeltrainkindsynthetic_";

/// Keys an override may set, real and not.
const KEYS: &[&str] = &[
    "train.batch_size",
    "train.epochs",
    "train.eval_batch_size",
    "train.bad_rows",
    "model.embedding_dim",
    "model.kind",
    "model.top_mlp",
    "model.bottom_mlp",
    "optimizer.sparse",
    "optimizer.dense_lr",
    "optimizer.schedule",
    "data.split",
    "data.tables",
    "data.format",
    "data.path",
    "cluster.hosts",
    "cluster.ranks_per_host",
    "model.kind.x",
    "model",
    "train",
    "",
    ".",
    "a..b",
    " train . epochs ",
    "x.y.z",
];

/// Values an override may give, TOML and not.
const VALUES: &[&str] = &[
    "0",
    "1",
    "-1",
    "512",
    "9223372036854775807",
    "4611686018427387904",
    "1e308",
    "nan",
    "\"skip\"",
    "skip",
    "[1]",
    "[]",
    "{}",
    "{ kind = \"sgd\" }",
    "{ kind = \"tail\", eval_rows = 2000 }",
    "[{ rows = 1, count = 100000000 }]",
    "\"dcn\"",
    "=",
    "\"",
    "[",
    "{ a = ",
    "true",
];

fn overrides() -> impl Strategy<Value = Vec<String>> {
    let item = prop_oneof![
        4 => (prop::sample::select(KEYS), prop::sample::select(VALUES))
            .prop_map(|(k, v)| format!("{k}={v}")),
        1 => (prop::sample::select(KEYS), arbitrary(ALPHABET, 24))
            .prop_map(|(k, v)| format!("{k}={}", String::from_utf8_lossy(&v))),
        1 => arbitrary(ALPHABET, 24).prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
    ];
    prop::collection::vec(item, 0..4)
}

/// Loads `text`; checks what a config that loads promises.
fn load(text: &str) {
    let base = Path::new("/nonexistent/towerrec-fuzz");
    let Ok(cfg) = Config::from_toml(text, "f.toml", base) else {
        return;
    };
    let written = cfg.to_toml();
    let again = Config::from_toml(&written, "written.toml", base)
        .unwrap_or_else(|e| panic!("a loaded config does not load again: {e}\n{written}"));
    assert_eq!(again.to_toml(), written);
    assert!(cfg.eval_batch_size() >= 1);
    assert!((1..=4096).contains(&cfg.cluster.world_size()));
    let _ = cfg.plan_path();
    // Files named by the config do not exist here; synthetic data needs none.
    let Ok(schema) = towerrec_data::schema(&cfg.data, base) else {
        return;
    };
    let _ = cfg.validate_against(&schema);
    if let DataConfig::Synthetic(_) = cfg.data {
        let mut s = towerrec_data::open(&cfg.data, Part::Train, cfg.train.bad_rows, base)
            .expect("synthetic data whose schema was made opens");
        for _ in 0..3 {
            match s.next_record().expect("synthetic records are generated") {
                Some(r) => assert!(schema.fits(&r)),
                None => break,
            }
        }
    }
}

fn example_seeds() -> Vec<Vec<u8>> {
    EXAMPLES.iter().map(|t| t.as_bytes().to_vec()).collect()
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn config_from_toml(
        bytes in prop_oneof![
            4 => mutated(example_seeds(), TOKENS, 256),
            1 => arbitrary(ALPHABET, 600),
        ],
    ) {
        load(&String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn config_with_overrides(example in 0..EXAMPLES.len(), sets in overrides()) {
        if let Ok(text) = with_overrides(EXAMPLES[example], "f.toml", &sets) {
            load(&text);
        }
    }
}

/// A small quickstart model's config: 3 tables of 20 rows, narrow layers.
fn small_config() -> Config {
    let sets: Vec<String> = [
        "data.tables=[{ rows = 20, count = 3 }]",
        "data.num_dense=2",
        "model.embedding_dim=4",
        "model.bottom_mlp=[4]",
        "model.top_mlp=[4, 1]",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    Config::quickstart(&sets).expect("the small config loads")
}

fn small_model(cfg: &Config) -> Model {
    let schema = towerrec_data::schema(&cfg.data, &cfg.base_dir).expect("synthetic schema");
    common::single(cfg, &schema, 3).expect("the small model builds")
}

/// The bytes of a real checkpoint of the small model (Adam's state, as the quickstart).
fn checkpoint_seed() -> Vec<u8> {
    let cfg = small_config();
    let mut model = small_model(&cfg);
    let path = std::env::temp_dir().join(format!("towerrec-fuzz-ckpt-{}", std::process::id()));
    save(&path, &mut model, &cfg, Progress::default(), &[]).expect("a checkpoint saves");
    let bytes = std::fs::read(&path).expect("the checkpoint reads back");
    let _ = std::fs::remove_file(&path);
    bytes
}

/// Tokens of a safetensors header and of a checkpoint's metadata.
const CKPT_TOKENS: &[&[u8]] = &[
    b"{",
    b"}",
    b"\"",
    b":",
    b",",
    b"[",
    b"]",
    b"\"dtype\"",
    b"\"F32\"",
    b"\"F64\"",
    b"\"I64\"",
    b"\"shape\"",
    b"\"data_offsets\"",
    b"\"__metadata__\"",
    b"0",
    b"1",
    b"-1",
    b"18446744073709551615",
    b"4294967296",
    b"\"step\"",
    b"\"table_steps\"",
    b"\"format\"",
    b"\"config\"",
    b"\\n",
    b"nan",
    b"\x00\x00\xc0\x7f",
    b"\x00\x00\x80\x7f",
];

/// Reads `bytes` as a checkpoint and, where that works, applies it to a fresh model.
fn read_and_apply(bytes: Vec<u8>) {
    let Ok(ckpt) = Checkpoint::from_bytes("f.safetensors".into(), bytes) else {
        return;
    };
    let _ = ckpt.progress();
    let _ = ckpt.config();
    let cfg = small_config();
    let mut model = small_model(&cfg);
    if ckpt.apply(&mut model).is_ok() {
        for p in model.dense_params() {
            assert!(
                p.value.iter().all(|x| x.is_finite()),
                "{} took a non-finite value",
                p.name
            );
        }
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn checkpoint_from_bytes(
        bytes in prop_oneof![
            3 => mutated(vec![checkpoint_seed()], CKPT_TOKENS, 64),
            1 => arbitrary(b"{}[]:,\"0123456789FSEIU_adtypeshofft", 400),
        ],
        resealed in any::<bool>(),
    ) {
        let bytes = if resealed { reseal(&bytes).unwrap_or(bytes) } else { bytes };
        read_and_apply(bytes);
    }
}
