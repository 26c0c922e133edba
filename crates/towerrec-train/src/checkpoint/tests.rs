//! Checkpoint integrity: flipped bytes are named, NaN is neither written nor loaded,
//! changed data is refused.

use super::*;
use crate::config::Config;

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("towerrec-ckpt-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A small quickstart model and its config.
fn model() -> (Config, Model) {
    let sets: Vec<String> = [
        "data.tables=[{ rows = 50, count = 3 }]",
        "model.bottom_mlp=[8, 16]",
        "model.top_mlp=[8, 1]",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let cfg = Config::quickstart(&sets).unwrap();
    let schema = towerrec_data::schema(&cfg.data, &cfg.base_dir).unwrap();
    let m = Model::build(&cfg.model, &cfg.optimizer, &schema, 1).unwrap();
    (cfg, m)
}

fn saved(dir: &Path) -> (Config, Model, PathBuf) {
    let (cfg, mut m) = model();
    let path = dir.join(CHECKPOINT_FILE);
    save(&path, &mut m, &cfg, Progress::default(), &[]).unwrap();
    (cfg, m, path)
}

/// Rewrites a checkpoint with `edit` applied to its tensors and `meta` to its
/// metadata, checksums made to match, as a writer without the checks would.
fn rewrite(
    path: &Path,
    edit: impl FnOnce(&mut Vec<(String, Vec<u8>)>),
    meta_edit: impl FnOnce(&mut HashMap<String, String>),
) {
    let bytes = std::fs::read(path).unwrap();
    let (_, header) = SafeTensors::read_metadata(&bytes).unwrap();
    let mut meta = header.metadata().clone().unwrap();
    meta_edit(&mut meta);
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let mut tensors: Vec<(String, Vec<u8>)> = st
        .tensors()
        .into_iter()
        .map(|(n, t)| (n, t.data().to_vec()))
        .collect();
    edit(&mut tensors);
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .map(|(n, b)| {
            let v = TensorView::new(Dtype::F32, vec![b.len() / 4], b).unwrap();
            (n.clone(), v)
        })
        .collect();
    let written = safetensors::tensor::serialize(views, Some(meta)).unwrap();
    std::fs::write(path, reseal(&written).unwrap()).unwrap();
}

/// The byte offset of `name`'s data in the file at `path`.
fn data_offset(path: &Path, name: &str) -> usize {
    let bytes = std::fs::read(path).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let data = st.tensor(name).unwrap().data();
    data.as_ptr() as usize - bytes.as_ptr() as usize
}

#[test]
fn four_flipped_bytes_in_a_tensor_are_detected_and_named() {
    let dir = scratch("flip");
    let (_, _, path) = saved(&dir);
    assert!(Checkpoint::read(&path).is_ok());
    let at = data_offset(&path, "dense.top.0.weight");
    let mut bytes = std::fs::read(&path).unwrap();
    for b in &mut bytes[at + 4..at + 8] {
        *b ^= 0x5a;
    }
    std::fs::write(&path, &bytes).unwrap();
    let e = Checkpoint::read(&path).err().unwrap().to_string();
    assert!(
        e.contains("tensor 'dense.top.0.weight' does not match its checksum"),
        "{e}"
    );
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn a_changed_metadata_value_is_detected() {
    let dir = scratch("meta");
    let (_, _, path) = saved(&dir);
    let text = std::fs::read(&path).unwrap();
    // The step, written as "step":"0" in the header: make it 9.
    let needle = b"\"step\":\"0\"";
    let at = text
        .windows(needle.len())
        .position(|w| w == needle)
        .unwrap();
    let mut bytes = text.clone();
    bytes[at + needle.len() - 2] = b'9';
    std::fs::write(&path, &bytes).unwrap();
    let e = Checkpoint::read(&path).err().unwrap().to_string();
    assert!(e.contains("does not match its checksum"), "{e}");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn nan_is_not_written_and_not_loaded() {
    let dir = scratch("nan");
    let (cfg, mut m, path) = saved(&dir);
    let before = std::fs::read(&path).unwrap();
    m.dense_params()[1].value[3] = f32::NAN;
    let e = save(&path, &mut m, &cfg, Progress::default(), &[])
        .unwrap_err()
        .to_string();
    assert!(e.contains("tensor 'dense."), "{e}");
    assert!(e.contains("checkpoint not written"), "{e}");
    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "the last good one stays"
    );

    // A file holding NaN (from another writer) loads to a refusal naming the tensor.
    rewrite(
        &path,
        |tensors| {
            let (_, data) = tensors
                .iter_mut()
                .find(|(n, _)| n.starts_with("emb."))
                .unwrap();
            data[8..12].copy_from_slice(&f32::INFINITY.to_le_bytes());
        },
        |_| {},
    );
    let ckpt = Checkpoint::read(&path).unwrap();
    let (_, mut fresh) = model();
    let e = ckpt.apply(&mut fresh).unwrap_err().to_string();
    assert!(
        e.contains("tensor 'emb.") && e.contains("holds inf at element 2"),
        "{e}"
    );
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn changed_data_files_are_refused() {
    let dir = scratch("data");
    let data = dir.join("train.bin");
    std::fs::write(&data, b"0123456789").unwrap();
    let mut cfg = crate::Config::quickstart(&[]).unwrap();
    cfg.data = towerrec_data::DataConfig::Binary {
        path: data.clone(),
        eval_path: None,
        split: towerrec_data::Split::Head { train_rows: 5 },
    };
    let then = integrity::data_files(&cfg).unwrap();
    let way_out = "pass --allow-data-change";
    assert!(integrity::check_same_data(&dir, &then, &cfg, way_out).is_ok());
    std::fs::write(&data, b"0123456780").unwrap();
    let e = integrity::check_same_data(&dir, &then, &cfg, way_out)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("content changed") && e.contains("--allow-data-change"),
        "{e}"
    );
    // An evaluation file where the run had none is a change too.
    std::fs::write(&data, b"0123456789").unwrap();
    let eval = dir.join("eval.bin");
    std::fs::write(&eval, b"x").unwrap();
    cfg.data = cfg.data.clone().with_paths(None, Some(eval));
    let e = integrity::check_same_data(&dir, &then, &cfg, way_out)
        .unwrap_err()
        .to_string();
    assert!(e.contains("the run read no eval data file"), "{e}");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn a_checkpoint_without_checksums_is_refused_by_format() {
    let dir = scratch("v1");
    let (_, _, path) = saved(&dir);
    rewrite(
        &path,
        |_| {},
        |meta| {
            meta.insert("format".into(), "towerrec-checkpoint-v1".into());
        },
    );
    let e = Checkpoint::read(&path).err().unwrap().to_string();
    assert!(e.contains("format v1, without checksums"), "{e}");
    std::fs::remove_dir_all(dir).ok();
}
