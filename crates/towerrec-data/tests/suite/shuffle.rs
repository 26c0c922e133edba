//! Shuffled epochs (`train.shuffle`, docs/DATA.md): a binary file's rows permuted whole,
//! streamed sources through a bounded buffer; every selected row once, in an order that
//! depends only on the seed and the epoch.

use crate::common::{drain, TempDir};
use std::path::Path;
use towerrec_data::{
    next_batch, open_epoch, write_binary, BadRows, DataConfig, Part, PoolingFactor, Record,
    RecordStream, Shuffle, Split, SyntheticConfig, SyntheticStream,
};

fn synthetic() -> SyntheticConfig {
    let mut c = SyntheticConfig::criteo_like(300, 3, PoolingFactor::Mean { mean: 2.0 }, 1.1);
    c.num_dense = 2;
    c.seed = 5;
    c.train_samples = 400;
    c.eval_samples = 100;
    c
}

/// A binary file of `n` synthetic rows, each row's first dense value made its index so
/// that an order can be read back.
fn binary(dir: &TempDir, n: u64) -> std::path::PathBuf {
    struct Numbered(SyntheticStream, u64);
    impl RecordStream for Numbered {
        fn schema(&self) -> &towerrec_data::Schema {
            self.0.schema()
        }
        fn next_record(&mut self) -> towerrec_data::Result<Option<Record>> {
            Ok(self.0.next_record()?.map(|mut r| {
                r.dense[0] = self.1 as f32;
                self.1 += 1;
                r
            }))
        }
        fn skipped(&self) -> u64 {
            0
        }
    }
    let path = dir.path().join("rows.bin");
    let mut s = Numbered(SyntheticStream::new(&synthetic(), 0..n).unwrap(), 0);
    write_binary(&mut s, &path, |_| std::ops::ControlFlow::Continue(())).unwrap();
    path
}

fn config(path: &Path, split: Split) -> DataConfig {
    DataConfig::Binary {
        path: path.to_path_buf(),
        eval_path: None,
        split,
    }
}

fn order(cfg: &DataConfig, part: Part, shuffle: Option<Shuffle>) -> Vec<u64> {
    let mut s = open_epoch(cfg, part, BadRows::Fail, Path::new("."), shuffle).unwrap();
    drain(s.as_mut())
        .iter()
        .map(|r| r.dense[0] as u64)
        .collect()
}

fn epoch(epoch: u64) -> Option<Shuffle> {
    Some(Shuffle {
        seed: 11,
        epoch,
        buffer: 8,
    })
}

#[test]
fn a_shuffled_binary_part_has_every_row_of_the_part_once() {
    let dir = TempDir::new("shuffle-bin");
    let path = binary(&dir, 1000);
    for split in [
        Split::None,
        Split::Tail {
            eval_rows: Some(150),
            eval_fraction: None,
        },
        Split::Random {
            eval_fraction: 0.3,
            seed: 2,
        },
    ] {
        let cfg = config(&path, split.clone());
        let plain = order(&cfg, Part::Train, None);
        let shuffled = order(&cfg, Part::Train, epoch(0));
        let mut sorted = shuffled.clone();
        sorted.sort();
        assert_eq!(sorted, plain, "{split:?}");
        assert_ne!(shuffled, plain, "{split:?}");
        assert_eq!(shuffled, order(&cfg, Part::Train, epoch(0)), "{split:?}");
        assert_ne!(shuffled, order(&cfg, Part::Train, epoch(1)), "{split:?}");
    }
}

/// Batches, records and passing over rows give one order: a resumed run or a cluster
/// rank that passes over batches lands where a reader of every row would be.
#[test]
fn batches_records_and_skips_agree_on_the_order() {
    let dir = TempDir::new("shuffle-skip");
    let path = binary(&dir, 500);
    let cfg = config(
        &path,
        Split::Random {
            eval_fraction: 0.2,
            seed: 4,
        },
    );
    let all = order(&cfg, Part::Train, epoch(3));
    let mut s = open_epoch(&cfg, Part::Train, BadRows::Fail, Path::new("."), epoch(3)).unwrap();
    assert_eq!(s.skip_records(37).unwrap(), 37);
    let b = next_batch(s.as_mut(), 64).unwrap().unwrap();
    let got: Vec<u64> = (0..64).map(|i| b.dense[i * b.num_dense] as u64).collect();
    assert_eq!(got, all[37..101]);
    let rest: Vec<u64> = drain(s.as_mut())
        .iter()
        .map(|r| r.dense[0] as u64)
        .collect();
    assert_eq!(rest, all[101..]);
}

/// A synthetic (streamed) source goes through the buffer: the same records, another
/// order, each epoch its own.
#[test]
fn a_streamed_source_is_shuffled_through_the_buffer() {
    let cfg = DataConfig::Synthetic(synthetic());
    let key = |r: &Record| format!("{r:?}");
    let plain: Vec<String> = {
        let mut s = open_epoch(&cfg, Part::Train, BadRows::Fail, Path::new("."), None).unwrap();
        drain(s.as_mut()).iter().map(key).collect()
    };
    let shuffled = |e| -> Vec<String> {
        let mut s = open_epoch(&cfg, Part::Train, BadRows::Fail, Path::new("."), epoch(e)).unwrap();
        drain(s.as_mut()).iter().map(key).collect()
    };
    let (a, b) = (shuffled(0), shuffled(1));
    assert_ne!(a, plain);
    assert_ne!(a, b);
    let (mut sa, mut sp) = (a.clone(), plain.clone());
    sa.sort();
    sp.sort();
    assert_eq!(sa, sp);
    assert_eq!(a, shuffled(0));
}
