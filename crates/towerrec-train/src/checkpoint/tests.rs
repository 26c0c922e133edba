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
    let m = crate::model::Model::for_run(&cfg, &schema, 1, None).unwrap();
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

/// A DMT model's checkpoint records its towers (v3), read from the header alone before
/// the model is built; a v2 file, without the record, takes its config's towers.
#[test]
fn a_dmt_checkpoint_records_its_towers_and_a_v2_file_takes_its_configs() {
    let dir = scratch("towers");
    let sets: Vec<String> = [
        "data.tables=[{ rows = 50, count = 4 }]",
        "model.top_mlp=[8, 1]",
        r#"model.towers={ module = "identity", features = [["C4", "C1"], ["C2", "C3"]] }"#,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let cfg = Config::quickstart(&sets).unwrap();
    let schema = towerrec_data::schema(&cfg.data, &cfg.base_dir).unwrap();
    let towers = crate::run_towers::fresh_towers(&cfg.model, &schema, None).unwrap();
    assert_eq!(towers, Some(vec![vec![3, 0], vec![1, 2]]));
    let mut m = Model::build(&cfg.model, &cfg.optimizer, &schema, 1, towers.as_deref()).unwrap();
    let path = dir.join(CHECKPOINT_FILE);
    save(&path, &mut m, &cfg, Progress::default(), &[]).unwrap();
    let names = |t: &[&[&str]]| -> Vec<Vec<String>> {
        t.iter()
            .map(|t| t.iter().map(|s| s.to_string()).collect())
            .collect()
    };
    let want = names(&[&["C4", "C1"], &["C2", "C3"]]);
    assert_eq!(recorded_towers(&path).unwrap(), Some(want.clone()));
    let ckpt = Checkpoint::read(&path).unwrap();
    assert_eq!(ckpt.towers().unwrap(), Some(want));
    // Its embedded config says count alone: the towers come from the record.
    let embedded = ckpt.config().unwrap();
    assert!(embedded.model.towers.as_ref().unwrap().features.is_none());
    let mut restored = ckpt.restore(&embedded, &schema).unwrap();
    assert_eq!(restored.tower_tables(), ckpt.towers().unwrap());
    ckpt.check_towers(&mut m).unwrap();
    // A model built on other towers is refused.
    let naive = embedded.model.towers.as_ref().unwrap().assignment(&[
        "C1".into(),
        "C2".into(),
        "C3".into(),
        "C4".into(),
    ]);
    let mut other = Model::build(
        &cfg.model,
        &cfg.optimizer,
        &schema,
        1,
        Some(&naive.unwrap()),
    )
    .unwrap();
    let e = ckpt.check_towers(&mut other).unwrap_err().to_string();
    assert!(e.contains("records the towers"), "{e}");

    // v2: no record; the embedded config (here listing the towers) gives them.
    rewrite(
        &path,
        |_| {},
        |meta| {
            meta.insert("format".into(), "towerrec-checkpoint-v2".into());
            meta.remove("towers");
            let old = cfg
                .to_toml()
                .replace("count = 2", r#"features = [["C2", "C4"], ["C3", "C1"]]"#);
            meta.insert("config".into(), old);
        },
    );
    assert_eq!(recorded_towers(&path).unwrap(), None);
    let ckpt = Checkpoint::read(&path).unwrap();
    assert_eq!(ckpt.towers().unwrap(), None);
    let embedded = ckpt.config().unwrap();
    let mut restored = ckpt.restore(&embedded, &schema).unwrap();
    let v2 = names(&[&["C2", "C4"], &["C3", "C1"]]);
    assert_eq!(restored.tower_tables(), Some(v2));
    std::fs::remove_dir_all(dir).ok();
}
