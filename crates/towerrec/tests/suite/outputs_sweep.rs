//! The rule on every command's files (docs/RELIABILITY.md, "Inputs and outputs"),
//! swept: every command is run with each of its outputs pointed at each of its inputs
//! (also through a symbolic and a hard link), and at each file of a run directory it
//! reads or writes into. Every such run must exit non-zero naming both paths, and no
//! file of the fixture may change (hashed before and after).

use crate::common;

use crate::common::{describe, text, towerrec, TINY, TINY_MODEL};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Every file under `dir` (recursively, lock files aside) with its bytes.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            let meta = std::fs::symlink_metadata(&p).unwrap();
            if meta.is_dir() {
                stack.push(p);
            } else if meta.is_file() && e.file_name() != ".towerrec.lock" {
                out.insert(p.clone(), std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

struct Fixture {
    dir: PathBuf,
}

impl Fixture {
    fn p(&self, name: &str) -> String {
        self.dir.join(name).to_str().unwrap().to_string()
    }

    fn build() -> Self {
        let dir = common::tmp("sweep", "fixture");
        let f = Fixture { dir };
        let ok = |args: &[&str]| {
            let o = towerrec(args);
            assert!(o.status.success(), "{args:?}\n{}", describe(&o));
        };
        // A synthetic config, its data as a binary file, and a CSV config with its file.
        let q = format!(
            "{TINY_MODEL}[data]\nformat = \"synthetic\"\ntrain_samples = 600\neval_samples = 200\n\
             tables = [{{ rows = 50, zipf_exponent = 1.05, pooling = 1, count = 4 }}]\nnum_dense = 2\n"
        );
        std::fs::write(f.dir.join("q.toml"), q).unwrap();
        ok(&[
            "datagen",
            "--config",
            &f.p("q.toml"),
            "--out",
            &f.p("d.bin"),
        ]);
        let mut csv = String::from("y,a,b,c\n");
        for i in 0..300 {
            csv += &format!("{},{},{},{}\n", i % 2, i % 7, i % 5, i % 3);
        }
        std::fs::write(f.dir.join("d.csv"), csv).unwrap();
        let c = format!(
            "{TINY_MODEL}[data]\nformat = \"csv\"\npath = \"{}\"\nsplit = {{ kind = \"tail\", eval_rows = 50 }}\n\
             [data.schema]\nlabel = {{ column = \"y\" }}\nsparse = [{{ column = \"a\", rows = 10 }}, \
             {{ column = \"b\", rows = 10 }}, {{ column = \"c\", rows = 10 }}]\n",
            f.p("d.csv")
        );
        std::fs::write(f.dir.join("c.toml"), c).unwrap();
        // A finished run, a plan, a profile and a hardware file.
        let (q, run) = (f.p("q.toml"), f.p("run"));
        ok(&[
            "train",
            "-q",
            "--config",
            &q,
            "--out",
            &run,
            "--set",
            "train.eval_every=0",
        ]);
        let plan = f.p("plan.json");
        ok(&[
            "plan",
            "--config",
            &q,
            "--hosts",
            "1",
            "--ranks-per-host",
            "2",
            "--output",
            &plan,
        ]);
        ok(&[
            "profile",
            "--config",
            &q,
            "--out",
            &f.p("prof.st"),
            "--quiet",
        ]);
        let preset = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../towerrec-sim/presets/recspeed.toml"
        );
        std::fs::copy(preset, f.dir.join("hw.toml")).unwrap();
        // Links to inputs.
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(f.dir.join("q.toml"), f.dir.join("q-sym.toml")).unwrap();
            std::fs::hard_link(f.dir.join("d.csv"), f.dir.join("d-hard.csv")).unwrap();
        }
        f
    }
}

/// Runs `args`, which point an output at an input: it must fail naming `output` and
/// `input`, and leave every file of the fixture as it was.
fn refused(f: &Fixture, args: &[&str], output: &str, input: &str) {
    let before = snapshot(&f.dir);
    let o = towerrec(args);
    let (_, err) = text(&o);
    assert!(
        !o.status.success(),
        "{args:?} succeeded writing {output} over {input}\n{}",
        describe(&o)
    );
    assert!(
        err.contains(output) && err.contains(input),
        "{args:?}: the message does not name {output} and {input}\n{}",
        describe(&o)
    );
    let after = snapshot(&f.dir);
    for (path, bytes) in &before {
        assert!(
            after.get(path) == Some(bytes),
            "{args:?} changed {}\n{}",
            path.display(),
            describe(&o)
        );
    }
}

#[test]
fn no_command_writes_over_its_inputs_or_a_run_s_files() {
    let f = Fixture::build();
    let p = |n: &str| f.p(n);
    let (q, c, csv, bin) = (p("q.toml"), p("c.toml"), p("d.csv"), p("d.bin"));
    let (run, ckpt) = (p("run"), p("run/checkpoint.safetensors"));
    let (plan, prof, hw) = (p("plan.json"), p("prof.st"), p("hw.toml"));
    let run_files: Vec<String> = [
        "checkpoint.safetensors",
        "metrics.jsonl",
        "summary.json",
        "config.toml",
    ]
    .iter()
    .map(|n| format!("{run}/{n}"))
    .collect();
    let mut cases: Vec<(Vec<String>, String, String)> = Vec::new();
    let mut case = |args: &[&str], output: &str, input: &str| {
        cases.push((
            args.iter().map(|s| s.to_string()).collect(),
            output.to_string(),
            input.to_string(),
        ));
    };

    // eval: the checkpoint, the data it scores, and every file of the run it reads.
    for out in [&ckpt, &bin] {
        case(
            &[
                "eval",
                "--checkpoint",
                &run,
                "--data",
                &bin,
                "--predictions",
                out,
            ],
            out,
            out,
        );
    }
    for out in &run_files[1..] {
        case(
            &["eval", "--checkpoint", &run, "--predictions", out],
            out,
            &run,
        );
    }
    // datagen, preprocess, profile: the config and the data.
    case(&["datagen", "--config", &q, "--out", &q], &q, &q);
    for out in [&c, &csv] {
        case(&["preprocess", "--config", &c, "--out", out], out, out);
        case(&["profile", "--config", &c, "--out", out], out, out);
        case(
            &[
                "profile",
                "--config",
                &c,
                "--out",
                &p("new.st"),
                "--plot",
                out,
            ],
            out,
            out,
        );
    }
    // The same through links: a symbolic link to the config, a hard link to the data.
    #[cfg(unix)]
    {
        let (sym, hard) = (p("q-sym.toml"), p("d-hard.csv"));
        case(&["datagen", "--config", &q, "--out", &sym], &sym, &q);
        case(&["preprocess", "--config", &c, "--out", &hard], &hard, &csv);
    }
    // plan: the config, the profile, the hardware file, a plan to rate.
    let plan_args = |out_flag: &str, out: &str| -> Vec<String> {
        [
            "plan",
            "--config",
            &q,
            "--hosts",
            "1",
            "--ranks-per-host",
            "2",
            "--profile",
            &prof,
            "--hardware",
            &hw,
            out_flag,
            out,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    for out in [&q, &prof, &hw] {
        for flag in ["--output", "--tables-out", "--heatmap"] {
            let args = plan_args(flag, out);
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            case(&refs, out, out);
        }
    }
    let rate = [
        "plan",
        "--config",
        &q,
        "--hosts",
        "1",
        "--ranks-per-host",
        "2",
        "--rate",
        &plan,
    ];
    case(
        &[&rate[..], &["--tables-out", &plan]].concat(),
        &plan,
        &plan,
    );
    // partition: the checkpoint and the run's files.
    case(
        &[
            "partition",
            "--checkpoint",
            &run,
            "--towers",
            "2",
            "--out",
            &ckpt,
        ],
        &ckpt,
        &ckpt,
    );
    for out in &run_files[1..] {
        case(
            &[
                "partition",
                "--checkpoint",
                &run,
                "--towers",
                "2",
                "--out",
                out,
            ],
            out,
            &run,
        );
    }
    // simulate: a plot named as the hardware file it reads, in the plots directory.
    let plots = p("plots");
    std::fs::create_dir_all(&plots).unwrap();
    let hw_in_plots = format!("{plots}/breakdown.svg");
    std::fs::copy(&hw, &hw_in_plots).unwrap();
    case(
        &[
            "simulate",
            "--config",
            &q,
            "--hardware",
            &hw_in_plots,
            "--plots",
            &plots,
        ],
        &hw_in_plots,
        &hw_in_plots,
    );
    // calibrate: a run's files.
    case(
        &["calibrate", "--quick", "--out", &run_files[2]],
        &run_files[2],
        &run,
    );
    // train: an input that is a file of the run directory the run replaces (a new run
    // with --overwrite) or rewrites (a resumed one).
    let run_config = format!("{run}/config.toml");
    let (metrics, summary) = (&run_files[1], &run_files[2]);
    let mut tiny: Vec<&str> = vec!["train", "-q"];
    tiny.extend(TINY);
    for (extra, input) in [
        (
            vec!["--config", &run_config, "--out", &run, "--overwrite"],
            &run_config,
        ),
        (
            vec!["--out", &run, "--overwrite", "--plan", summary],
            summary,
        ),
        (
            vec!["--out", &run, "--overwrite", "--data", metrics],
            metrics,
        ),
        (
            vec!["--out", &run, "--overwrite", "--eval-data", &ckpt],
            &ckpt,
        ),
    ] {
        case(&[&tiny[..], &extra[..]].concat(), &run, input);
    }
    for (extra, input) in [
        (vec!["--resume", &run, "--data", metrics], metrics),
        (vec!["--resume", &run, "--data", &ckpt], &ckpt),
        (vec!["--resume", &run, "--eval-data", summary], summary),
    ] {
        case(&[&["train", "-q"][..], &extra[..]].concat(), &run, input);
    }

    assert!(cases.len() >= 35, "{} cases", cases.len());
    for (args, output, input) in &cases {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        refused(&f, &refs, output, input);
    }
    std::fs::remove_dir_all(&f.dir).ok();
}
