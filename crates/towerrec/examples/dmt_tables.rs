//! Prints the DMT quality tables of docs/DMT.md (the analogues of the paper's Tables 4,
//! 5 and 6) as markdown from the CSV that `scripts/dmt-quality.sh` writes:
//!
//! ```text
//! cargo run --release -p towerrec --example dmt_tables -- results.csv
//! ```
//!
//! Per configuration: the median eval AUC over its seeds and the sample standard
//! deviation (n − 1). Table 4 says whether each DMT median lies within one standard
//! deviation of its flat baseline's median; Table 5 adds the cross-host bytes of SPTT's
//! peer step against pass-through towers; Table 6 compares the Tower Partitioner's
//! towers with the naive strided ones by a two-sided Mann–Whitney U test (statrs; the
//! normal approximation with continuity correction when both samples exceed 8, as
//! scipy's default, else exact).

use statrs::stats_tests::mannwhitneyu::{mannwhitneyu, MannWhitneyUMethod};
use statrs::stats_tests::Alternative;
use std::collections::BTreeMap;
use std::error::Error;
use std::fmt::Write as _;

type Res<T> = Result<T, Box<dyn Error>>;

/// One run: a row of the CSV.
#[derive(Debug, Clone, PartialEq)]
struct Run {
    run: String,
    data: String,
    model: String,
    n: usize,
    towers: usize,
    module: String,
    d: usize,
    assignment: String,
    seed: u64,
    epochs: u64,
    auc: f64,
    flops: u64,
    params: u64,
    dense_params: u64,
    peer_bytes: Option<f64>,
}

/// A configuration: every CSV field but the run's name, its seed and its results.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    data: String,
    model: String,
    n: usize,
    towers: usize,
    module: String,
    d: usize,
    assignment: String,
    epochs: u64,
}

impl Run {
    fn key(&self) -> Key {
        Key {
            data: self.data.clone(),
            model: self.model.clone(),
            n: self.n,
            towers: self.towers,
            module: self.module.clone(),
            d: self.d,
            assignment: self.assignment.clone(),
            epochs: self.epochs,
        }
    }
    fn is_bytes(&self) -> bool {
        self.run.ends_with("-bytes")
    }
}

const HEADER: &str = "run,data,model,n,towers,module,d,assignment,seed,epochs,auc,logloss,\
flops_per_sample,params,dense_params,embedding_params,tower_peer_cross_host_bytes_per_step,seconds";

fn parse(text: &str) -> Res<Vec<Run>> {
    let mut lines = text.lines();
    match lines.next() {
        Some(h) if h.trim() == HEADER => {}
        other => return Err(format!("not a dmt-quality CSV: header {other:?}").into()),
    }
    let mut out = Vec::new();
    for (i, line) in lines.enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let f: Vec<&str> = line.split(',').collect();
        if f.len() != 18 {
            return Err(format!("line {}: {} fields, want 18", i + 2, f.len()).into());
        }
        let at = |e: &dyn std::fmt::Display| format!("line {}: {e}", i + 2);
        let num = |j: usize| f[j].parse::<u64>().map_err(|e| at(&e));
        out.push(Run {
            run: f[0].into(),
            data: f[1].into(),
            model: f[2].into(),
            n: num(3)? as usize,
            towers: num(4)? as usize,
            module: f[5].into(),
            d: num(6)? as usize,
            assignment: f[7].into(),
            seed: num(8)?,
            epochs: num(9)?,
            auc: f[10].parse().map_err(|e| at(&e))?,
            flops: num(12)?,
            params: num(13)?,
            dense_params: num(14)?,
            peer_bytes: if f[16].is_empty() {
                None
            } else {
                Some(f[16].parse::<f64>().map_err(|e| at(&e))?)
            },
        });
    }
    Ok(out)
}

/// Median, sample standard deviation (n − 1; 0 for one value) and count.
fn stats(values: &[f64]) -> (f64, f64, usize) {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return (f64::NAN, f64::NAN, 0);
    }
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    let mean = v.iter().sum::<f64>() / n as f64;
    let var = if n > 1 {
        v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64
    } else {
        0.0
    };
    (median, var.sqrt(), n)
}

/// Whether `median` is within one standard deviation `std` of `base`, in words.
fn verdict(median: f64, base: f64, std: f64) -> String {
    let diff = median - base;
    if diff.abs() <= std {
        "yes".into()
    } else if diff > 0.0 {
        format!("no: higher by {:.2} std", diff / std)
    } else {
        format!("no: lower by {:.2} std", -diff / std)
    }
}

/// The runs of each configuration (accuracy runs only), seeds ascending.
fn grouped(runs: &[Run]) -> BTreeMap<Key, Vec<Run>> {
    let mut g: BTreeMap<Key, Vec<Run>> = BTreeMap::new();
    for r in runs.iter().filter(|r| !r.is_bytes()) {
        g.entry(r.key()).or_default().push(r.clone());
    }
    for v in g.values_mut() {
        v.sort_by_key(|r| r.seed);
    }
    g
}

/// The configuration of `data`'s runs at its example's epochs ([`DATA`]).
fn key(data: &str, model: &str, n: usize, towers: usize, d: usize, assignment: &str) -> Key {
    let epochs = DATA.iter().find(|x| x.0 == data).map_or(1, |x| x.2);
    key_at(data, model, n, towers, d, assignment, epochs)
}

fn key_at(
    data: &str,
    model: &str,
    n: usize,
    towers: usize,
    d: usize,
    assignment: &str,
    epochs: u64,
) -> Key {
    let module = if towers == 0 { "none" } else { model };
    Key {
        data: data.into(),
        model: model.into(),
        n,
        towers,
        module: module.into(),
        d,
        assignment: assignment.into(),
        epochs,
    }
}

fn aucs(runs: &[Run], seeds: &[u64]) -> Vec<f64> {
    runs.iter()
        .filter(|r| seeds.contains(&r.seed))
        .map(|r| r.auc)
        .collect()
}

/// The data sets: name in the CSV, title, and the epochs of the example config
/// (examples/movielens.toml, criteo.toml, avazu.toml) that Tables 4 to 6 train.
const DATA: [(&str, &str, u64); 3] = [
    ("movielens", "MovieLens-100k", 2),
    ("criteo", "Criteo sample", 1),
    ("avazu", "Avazu sample", 2),
];

/// A markdown table's header row and its rule, from its column names.
fn head(out: &mut String, columns: &[&str]) -> Res<()> {
    writeln!(out, "| {} |", columns.join(" | "))?;
    writeln!(out, "|{}", "---|".repeat(columns.len()))?;
    Ok(())
}

fn table4(g: &BTreeMap<Key, Vec<Run>>, out: &mut String) -> Res<()> {
    writeln!(out, "### Table 4 analogue\n")?;
    for (data, title, epochs) in DATA {
        let s = if epochs == 1 { "" } else { "s" };
        writeln!(out, "{title}, {epochs} epoch{s}:\n")?;
        head(
            out,
            &[
                "model",
                "AUC median (std)",
                "seeds",
                "Δ median",
                "within 1 std of flat?",
                "MFLOPs/sample",
                "dense params",
                "params (M)",
            ],
        )?;
        for (model, name, ds) in [("dlrm", "DLRM", &[8][..]), ("dcn", "DCN", &[16, 8][..])] {
            let base_key = key(data, model, 16, 0, 0, "-");
            let Some(base) = g.get(&base_key) else {
                continue;
            };
            let seeds: Vec<u64> = base.iter().map(|r| r.seed).collect();
            let (bm, bs, bn) = stats(&aucs(base, &seeds));
            let row = |label: String, runs: &[Run], out: &mut String, is_base: bool| -> Res<()> {
                let (m, s, n) = stats(&aucs(runs, &seeds));
                let r = &runs[0];
                let (delta, within) = if is_base {
                    ("—".to_string(), "(baseline)".to_string())
                } else {
                    (format!("{:+.4}", m - bm), verdict(m, bm, bs))
                };
                writeln!(
                    out,
                    "| {label} | {m:.4} ({s:.4}) | {n} | {delta} | {within} | {:.3} | {} | {:.4} |",
                    r.flops as f64 / 1e6,
                    r.dense_params,
                    r.params as f64 / 1e6
                )?;
                Ok(())
            };
            row(format!("{name} (flat)"), base, out, true)?;
            debug_assert_eq!(bn, seeds.len());
            for &d in ds {
                for t in [2, 4, 8] {
                    if let Some(runs) = g.get(&key(data, model, 16, t, d, "naive")) {
                        row(format!("DMT {t}T-{name}, D = {d}"), runs, out, false)?;
                    }
                }
            }
        }
        writeln!(out)?;
    }
    Ok(())
}

fn table5(g: &BTreeMap<Key, Vec<Run>>, runs: &[Run], out: &mut String) -> Res<()> {
    writeln!(
        out,
        "### Table 5 analogue (Criteo sample, N = 32, 8 towers)\n"
    )?;
    head(
        out,
        &[
            "compression N/D",
            "D",
            "AUC median (std)",
            "seeds",
            "within 1 std of flat?",
            "MFLOPs/sample",
            "dense params",
            "params (M)",
            "tower_peer cross-host bytes/step",
            "pass-through / this",
            "exactly N/D?",
        ],
    )?;
    let bytes = |module: &str, d: usize| {
        runs.iter()
            .find(|r| r.is_bytes() && r.module == module && r.d == d)
            .and_then(|r| r.peer_bytes)
    };
    let identity = bytes("identity", 0);
    let mut flat = (f64::NAN, f64::NAN);
    if let Some(base) = g.get(&key("criteo", "dlrm", 32, 0, 0, "-")) {
        let (m, s, n) = stats(&base.iter().map(|r| r.auc).collect::<Vec<_>>());
        flat = (m, s);
        let r = &base[0];
        writeln!(
            out,
            "| 1 (flat, no towers) | — | {m:.4} ({s:.4}) | {n} | (baseline) | {:.3} | {} | {:.4} | — | — | — |",
            r.flops as f64 / 1e6,
            r.dense_params,
            r.params as f64 / 1e6
        )?;
    }
    if let Some(id) = identity {
        writeln!(
            out,
            "| 1 (pass-through towers) | 32 | — | — | — | — | — | — | {id} | 1 | — |"
        )?;
    }
    for d in [16, 8, 4, 2] {
        let Some(rs) = g.get(&key("criteo", "dlrm", 32, 8, d, "naive")) else {
            continue;
        };
        let (m, s, n) = stats(&rs.iter().map(|r| r.auc).collect::<Vec<_>>());
        let r = &rs[0];
        let (b, ratio, exact) = match (bytes("dlrm", d), identity) {
            (Some(b), Some(id)) if b > 0.0 => {
                let exact = if b * (32 / d) as f64 == id {
                    "yes"
                } else {
                    "no"
                };
                (b.to_string(), format!("{}", id / b), exact)
            }
            _ => ("—".into(), "—".into(), "—"),
        };
        writeln!(
            out,
            "| {} | {d} | {m:.4} ({s:.4}) | {n} | {} | {:.3} | {} | {:.4} | {b} | {ratio} | {exact} |",
            32 / d,
            verdict(m, flat.0, flat.1),
            r.flops as f64 / 1e6,
            r.dense_params,
            r.params as f64 / 1e6
        )?;
    }
    writeln!(out)?;
    Ok(())
}

fn table6(g: &BTreeMap<Key, Vec<Run>>, out: &mut String) -> Res<()> {
    writeln!(out, "### Table 6 analogue (DMT 8T-DLRM, D = 8)\n")?;
    head(
        out,
        &[
            "data",
            "TP mode",
            "TP AUC median (std)",
            "naive AUC median (std)",
            "seeds",
            "U (TP)",
            "two-sided p",
        ],
    )?;
    for (data, title, _) in DATA {
        let Some(naive) = g.get(&key(data, "dlrm", 16, 8, 8, "naive")) else {
            continue;
        };
        for mode in ["coherent", "diverse"] {
            let Some(tp) = g.get(&key(data, "dlrm", 16, 8, 8, mode)) else {
                continue;
            };
            // The seeds both sides ran.
            let seeds: Vec<u64> = tp
                .iter()
                .map(|r| r.seed)
                .filter(|s| naive.iter().any(|r| r.seed == *s))
                .collect();
            let (x, y) = (aucs(tp, &seeds), aucs(naive, &seeds));
            let (tm, ts, n) = stats(&x);
            let (nm, ns, _) = stats(&y);
            let (u, p) = mannwhitneyu(&x, &y, MannWhitneyUMethod::Automatic, Alternative::TwoSided)
                .map_err(|e| format!("{data} {mode}: {e}"))?;
            writeln!(
                out,
                "| {title} | {mode} | {tm:.4} ({ts:.4}) | {nm:.4} ({ns:.4}) | {n} + {n} | {u} | {p:.4} |"
            )?;
        }
    }
    writeln!(out)?;
    Ok(())
}

fn lengths(g: &BTreeMap<Key, Vec<Run>>, out: &mut String) -> Res<()> {
    writeln!(out, "### Table 4's DLRM rows by training length (D = 8)\n")?;
    head(
        out,
        &[
            "data",
            "epochs",
            "flat",
            "DMT 2T",
            "DMT 4T",
            "DMT 8T",
            "DMT medians within 1 std of flat?",
        ],
    )?;
    for (data, title, _) in DATA {
        let mut epochs: Vec<u64> = g
            .keys()
            .filter(|k| k.data == data && k.model == "dlrm" && k.n == 16 && k.towers == 0)
            .map(|k| k.epochs)
            .collect();
        epochs.sort_unstable();
        if epochs.len() < 2 {
            continue;
        }
        for e in epochs {
            let Some(base) = g.get(&key_at(data, "dlrm", 16, 0, 0, "-", e)) else {
                continue;
            };
            // The baseline's seeds on both sides, as in Table 4.
            let seeds: Vec<u64> = base.iter().map(|r| r.seed).collect();
            let (bm, bs, n) = stats(&aucs(base, &seeds));
            let mut cells = vec![format!("{bm:.4} ({bs:.4})")];
            let mut verdicts = Vec::new();
            for t in [2, 4, 8] {
                match g.get(&key_at(data, "dlrm", 16, t, 8, "naive", e)) {
                    Some(rs) => {
                        let (m, s, _) = stats(&aucs(rs, &seeds));
                        cells.push(format!("{m:.4} ({s:.4})"));
                        verdicts.push(format!("{t}T {}", verdict(m, bm, bs)));
                    }
                    None => cells.push("—".into()),
                }
            }
            writeln!(
                out,
                "| {title} | {e} | {} | {} |",
                cells.join(" | "),
                verdicts.join("; ")
            )?;
            debug_assert!(n > 0);
        }
    }
    writeln!(out, "\nAUC median (std) over the flat baseline's seeds.\n")?;
    Ok(())
}

fn tables(text: &str) -> Res<String> {
    let runs = parse(text)?;
    let g = grouped(&runs);
    let mut out = String::new();
    table4(&g, &mut out)?;
    lengths(&g, &mut out)?;
    table5(&g, &runs, &mut out)?;
    table6(&g, &mut out)?;
    Ok(out)
}

fn main() -> Res<()> {
    let path = std::env::args()
        .nth(1)
        .ok_or("usage: dmt_tables RESULTS.csv (from scripts/dmt-quality.sh)")?;
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    print!("{}", tables(&text)?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_sample_std() {
        let (m, s, n) = stats(&[3.0, 1.0, 2.0, 10.0]);
        assert_eq!((m, n), (2.5, 4));
        // mean 4, squares 9 + 4 + 1 + 36 = 50, over 3.
        assert!((s - (50.0f64 / 3.0).sqrt()).abs() < 1e-12);
        assert_eq!(stats(&[0.7]), (0.7, 0.0, 1));
    }

    #[test]
    fn verdicts() {
        assert_eq!(verdict(0.701, 0.700, 0.002), "yes");
        assert_eq!(verdict(0.704, 0.700, 0.002), "no: higher by 2.00 std");
        assert_eq!(verdict(0.697, 0.700, 0.002), "no: lower by 1.50 std");
    }

    fn row(
        run: &str,
        model: &str,
        towers: usize,
        d: usize,
        assign: &str,
        seed: u64,
        auc: f64,
    ) -> String {
        let module = if towers == 0 { "none" } else { model };
        format!("{run},criteo,{model},16,{towers},{module},{d},{assign},{seed},1,{auc},0.5,1000,2000,300,1700,,1.0")
    }

    #[test]
    fn tables_from_a_csv() {
        let mut text = format!("{HEADER}\n");
        for s in 1..=9u64 {
            let x = s as f64 / 1000.0;
            text += &row(&format!("f{s}"), "dlrm", 0, 0, "-", s, 0.70 + x);
            text += "\n";
            text += &row(&format!("n{s}"), "dlrm", 8, 8, "naive", s, 0.70 + x);
            text += "\n";
            // TP above every naive run: U = 81, the smallest p for 9 + 9.
            text += &row(&format!("c{s}"), "dlrm", 8, 8, "coherent", s, 0.72 + x);
            text += "\n";
        }
        let out = tables(&text).unwrap();
        // Flat and naive share their AUCs: median 0.705, std of 1..9 thousandths.
        assert!(
            out.contains("| DLRM (flat) | 0.7050 (0.0027) | 9 |"),
            "{out}"
        );
        assert!(
            out.contains("| DMT 8T-DLRM, D = 8 | 0.7050 (0.0027) | 9 | +0.0000 | yes |"),
            "{out}"
        );
        let tp = out
            .lines()
            .find(|l| l.contains("| coherent |"))
            .unwrap_or_else(|| panic!("{out}"));
        assert!(
            tp.contains("| 0.7250 (0.0027) | 0.7050 (0.0027) | 9 + 9 | 81 |"),
            "{tp}"
        );
        let p: f64 = tp
            .trim_end_matches(" |")
            .rsplit("| ")
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!(p < 0.001, "{tp}");
        assert!(parse("run,auc\n").is_err());
    }
}
