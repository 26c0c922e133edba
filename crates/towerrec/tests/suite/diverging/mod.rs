//! A run that diverges on the shape of examples/criteo.toml's DLRM, on generated data:
//! the config and a Criteo-format TSV file written by a seeded generator (the tests
//! read nothing outside their own directory). At SGD with both learning rates 1e5 its
//! backward overflows within a few steps while the forward and the loss stay finite
//! (docs/RELIABILITY.md, section 2), the case a check of the loss alone misses.
#![allow(dead_code)] // each test file uses its own subset

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Training rows: 12 global batches of 128, far more steps than divergence takes.
const TRAIN_ROWS: usize = 1536;
/// Evaluation rows, the file's last ones.
const EVAL_ROWS: usize = 256;

/// A small seeded generator (xorshift64*), so that the file is the same on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `[0, n)`.
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// Uniform in `[0, 1)`.
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Per integer field I1..I13 of the Criteo sample: the share of empty values, and the
/// mean of `ln(1 + x)` over the others (what the reader feeds the model).
const DENSE: [(f64, f64); 13] = [
    (0.45, 0.8),
    (0.0, 2.1),
    (0.2, 2.25),
    (0.2, 1.7),
    (0.05, 7.2),
    (0.25, 3.6),
    (0.05, 1.5),
    (0.0, 2.0),
    (0.05, 3.6),
    (0.45, 0.4),
    (0.05, 0.85),
    (0.77, 0.3),
    (0.2, 1.9),
];

/// Distinct ids per categorical field C1..C26, about as many as the Criteo sample's.
const IDS: [u64; 26] = [
    175, 386, 5521, 3000, 20, 300, 3184, 500, 3, 2000, 1500, 5000, 2000, 25, 3000, 4000, 10, 1500,
    1000, 4, 5000, 9, 15, 2000, 50, 1939,
];

/// Writes `rows` Criteo TSV lines (a 0/1 label, 13 integer counts, 26 hex categorical
/// ids) to `path`, drawn from `seed` to look like the Criteo sample: about 22% clicks,
/// its fields' shares of empty values and spreads of `ln(1 + x)`, frequent ids and a
/// tail of rare ones.
pub fn write_criteo_tsv(path: &Path, rows: usize, seed: u64) {
    let mut rng = Rng(seed | 1);
    let mut text = String::new();
    for _ in 0..rows {
        let label = u64::from(rng.below(100) < 22);
        write!(text, "{label}").unwrap();
        for (empty, mean) in DENSE {
            if (rng.below(100) as f64) < empty * 100.0 {
                text.push('\t');
            } else {
                let x = (rng.unit() * 2.0 * mean).exp() as u64 - 1;
                write!(text, "\t{x}").unwrap();
            }
        }
        for (c, n) in IDS.into_iter().enumerate() {
            let u = rng.unit();
            let id = (n as f64 * u * u) as u64;
            let hashed = (id ^ ((c as u64) << 40)).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32;
            write!(text, "\t{hashed:08x}").unwrap();
        }
        text.push('\n');
    }
    std::fs::write(path, text).unwrap();
}

/// Writes the data and the config into `dir` and returns the config's path: the model,
/// batch and table sizes of examples/criteo.toml (26 tables of 100,000 hashed rows,
/// dimension 16, bottom MLP [512, 256, 64, 16], top [512, 256, 1], batch 128), trained by
/// SGD at learning rates of 1e5.
pub fn diverging_criteo(dir: &Path) -> PathBuf {
    write_criteo_tsv(&dir.join("criteo.tsv"), TRAIN_ROWS + EVAL_ROWS, 7);
    let cfg = format!(
        r#"
[model]
kind = "dlrm"
embedding_dim = 16
bottom_mlp = [512, 256, 64, 16]
top_mlp = [512, 256, 1]

[optimizer]
dense = {{ kind = "sgd" }}
dense_lr = 1e5
sparse = {{ kind = "sgd" }}
sparse_lr = 1e5

[train]
batch_size = 128
epochs = 1
log_every = 10
eval_every = 25
seed = 0

[data]
format = "criteo"
path = "criteo.tsv"
table_rows = [100000]
split = {{ kind = "tail", eval_rows = {EVAL_ROWS} }}
"#
    );
    let path = dir.join("criteo-diverging.toml");
    std::fs::write(&path, cfg).unwrap();
    path
}

/// The step an error message names (`... at step N (epoch ...`), if any.
pub fn step_named(err: &str) -> Option<u64> {
    let rest = &err[err.find(" at step ")? + " at step ".len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// The tensor an error message names: a dense parameter or an embedding table.
pub fn tensor_named(err: &str) -> Option<&str> {
    for lead in [
        "the gradient of dense parameter '",
        "the gradient rows of embedding table '",
        "dense parameter '",
        "embedding table '",
    ] {
        if let Some(at) = err.find(lead) {
            let rest = &err[at + lead.len()..];
            return rest.find('\'').map(|end| &rest[..end]);
        }
    }
    None
}
