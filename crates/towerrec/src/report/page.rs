//! The report page: one self-contained HTML file (inline SVG charts drawn with
//! plotters through `towerrec_sim::plot`, inline CSS, no script, nothing fetched), runs
//! side by side (docs/REPORT.md).

use super::run::{PhaseBytes, Run};
use anyhow::Result;
use std::fmt::Write as _;
use towerrec_sim::plot::{line_charts_svg, stacked_bars_svg, Bar, LineChart, Series};

/// At most this many points per line: a long run's log is thinned evenly (its last
/// point kept), so that the page stays small.
const MAX_POINTS: usize = 1500;

/// The page of `runs` (at least one).
pub fn page(runs: &[Run]) -> Result<String> {
    let mut html = String::new();
    let title = match runs {
        [one] => format!("towerrec run report: {}", one.label),
        _ => format!("towerrec run report: {} runs", runs.len()),
    };
    let _ = write!(
        html,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<h1>{}</h1>\n<p class=\"note\">Written by towerrec {} from each run's metrics.jsonl, summary.json and config.toml (docs/REPORT.md).</p>\n",
        escape(&title),
        escape(&title),
        env!("CARGO_PKG_VERSION")
    );
    summary_table(&mut html, runs);
    html.push_str("<h2>Training</h2>\n");
    let charts = [
        overlay(
            runs,
            ("loss (mean since the line before)", "loss"),
            false,
            |r| {
                r.steps
                    .iter()
                    .filter_map(|s| Some((s.step as f64, s.loss?)))
                    .collect()
            },
        ),
        overlay(runs, ("AUC (evaluations)", "AUC"), false, |r| {
            r.evals
                .iter()
                .filter_map(|e| Some((e.step as f64, e.auc?)))
                .collect()
        }),
        overlay(runs, ("train samples/s", "samples/s"), true, |r| {
            r.steps
                .iter()
                .map(|s| (s.step as f64, s.samples_per_sec))
                .collect()
        }),
    ];
    figure(&mut html, &line_charts_svg(&charts, 3)?);
    html.push_str("<h2>Time per phase</h2>\n<p class=\"note\">Milliseconds per step in each phase of the model, evaluations left out: over the steps (rank 0), and each rank's mean over the run (a rank that waits at a collective for a slower one shows it there).</p>\n");
    per_run(&mut html, runs, |run| {
        let mut svgs = Vec::new();
        if let Some(chart) = phase_lines(run) {
            svgs.push(line_charts_svg(&[chart], 1)?);
        }
        if let Some((parts, bars)) = rank_bars(run) {
            let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
            let title = format!("{}: time per step by rank", run.label);
            svgs.push(stacked_bars_svg(
                &title,
                "ms per step",
                &parts,
                &bars,
                false,
            )?);
        }
        Ok(svgs)
    })?;
    if runs.iter().any(|r| bytes_of(r).is_some()) {
        html.push_str("<h2>Bytes per phase</h2>\n<p class=\"note\">Bytes sent per training step by all ranks together, intra-host and cross-host, by traffic phase (evaluations left out): the run's mean, and the totals over the steps.</p>\n");
        per_run(&mut html, runs, |run| {
            let mut svgs = Vec::new();
            if let Some(bytes) = bytes_of(run) {
                let bars: Vec<Bar> = bytes
                    .iter()
                    .filter(|b| b.intra_host + b.cross_host > 0.0)
                    .map(|b| Bar {
                        label: b.phase.clone(),
                        parts: vec![b.intra_host, b.cross_host],
                    })
                    .collect();
                let title = format!("{}: bytes per step by phase", run.label);
                let parts = ["intra-host", "cross-host"];
                svgs.push(stacked_bars_svg(
                    &title,
                    "bytes per step",
                    &parts,
                    &bars,
                    false,
                )?);
            }
            if let Some(chart) = byte_lines(run) {
                svgs.push(line_charts_svg(&[chart], 1)?);
            }
            Ok(svgs)
        })?;
    }
    configs(&mut html, runs);
    html.push_str("</body>\n</html>\n");
    Ok(html)
}

const STYLE: &str = "body{font-family:sans-serif;margin:1.5em;color:#222}\
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #ccc}\
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.25em .6em;text-align:right}\
th{background:#f4f4f4}td.l,th.l{text-align:left}.note{color:#555;font-size:.9em}\
.failed{color:#b00020;font-weight:bold}.runs{display:flex;flex-wrap:wrap;gap:1em}\
.run{flex:1 1 0;min-width:320px}svg{max-width:100%;height:auto}pre{background:#f8f8f8;padding:.6em;overflow-x:auto}";

/// HTML text: `&`, `<`, `>` and quotes escaped.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn figure(html: &mut String, svg: &str) {
    html.push_str("<figure>\n");
    html.push_str(svg);
    html.push_str("\n</figure>\n");
}

/// Each run's charts in a column of its own, the runs side by side.
fn per_run(
    html: &mut String,
    runs: &[Run],
    charts: impl Fn(&Run) -> Result<Vec<String>>,
) -> Result<()> {
    html.push_str("<div class=\"runs\">\n");
    for run in runs {
        let _ = writeln!(html, "<div class=\"run\"><h3>{}</h3>", escape(&run.label));
        let svgs = charts(run)?;
        if svgs.is_empty() {
            html.push_str("<p class=\"note\">Not in this run's log (no logged step, or a log written before towerrec logged it).</p>\n");
        }
        for svg in svgs {
            figure(html, &svg);
        }
        html.push_str("</div>\n");
    }
    html.push_str("</div>\n");
    Ok(())
}

/// One line per run of what `points` takes from it.
fn overlay(
    runs: &[Run],
    (title, y_label): (&str, &str),
    y_from_zero: bool,
    points: impl Fn(&Run) -> Vec<(f64, f64)>,
) -> LineChart {
    LineChart {
        title: title.to_string(),
        x_label: "step".to_string(),
        y_label: y_label.to_string(),
        series: runs
            .iter()
            .map(|r| Series {
                label: r.label.clone(),
                points: thin(points(r)),
            })
            .collect(),
        log_x: false,
        y_from_zero,
    }
}

/// At most [`MAX_POINTS`] of `points`, evenly spaced, the last one kept.
pub fn thin(points: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    if points.len() <= MAX_POINTS {
        return points;
    }
    let stride = points.len().div_ceil(MAX_POINTS);
    let last = points[points.len() - 1];
    let mut out: Vec<_> = points.into_iter().step_by(stride).collect();
    if out.last() != Some(&last) {
        out.push(last);
    }
    out
}

/// Rank 0's milliseconds per step in each phase over the logged steps, phases that
/// took time only.
fn phase_lines(run: &Run) -> Option<LineChart> {
    let first = run.steps.iter().find(|s| !s.phase_ms_by_rank.is_empty())?;
    let series = first
        .phase_ms_by_rank
        .iter()
        .enumerate()
        .map(|(i, (name, _))| Series {
            label: name.clone(),
            points: thin(
                run.steps
                    .iter()
                    .filter_map(|s| Some((s.step as f64, *s.phase_ms_by_rank.get(i)?.1.first()?)))
                    .collect(),
            ),
        })
        .filter(|s| s.points.iter().any(|&(_, y)| y > 0.0))
        .collect();
    Some(LineChart {
        title: format!("{}: ms per step by phase (rank 0)", run.label),
        x_label: "step".to_string(),
        y_label: "ms per step".to_string(),
        series,
        log_x: false,
        y_from_zero: true,
    })
}

/// Each rank's mean milliseconds per step by phase: the summary's, or (a run without
/// one) the logged lines' weighted by the steps each covers.
fn rank_bars(run: &Run) -> Option<(Vec<String>, Vec<Bar>)> {
    let by_rank = match run.summary.as_ref().and_then(|s| s.cluster.as_ref()) {
        Some(c) => c.phase_ms_per_step_by_rank.clone(),
        None => mean_phase_ms(run)?,
    };
    let ranks = by_rank.first()?.1.len();
    let phases: Vec<&(String, Vec<f64>)> = by_rank
        .iter()
        .filter(|(_, ms)| ms.iter().any(|&m| m > 0.0))
        .collect();
    let parts = phases.iter().map(|(n, _)| n.clone()).collect();
    let bars = (0..ranks)
        .map(|r| Bar {
            label: format!("rank {r}"),
            parts: phases
                .iter()
                .map(|(_, ms)| ms.get(r).copied().unwrap_or(0.0))
                .collect(),
        })
        .collect();
    Some((parts, bars))
}

/// The logged lines' phase times by rank, weighted by the steps each line covers.
fn mean_phase_ms(run: &Run) -> Option<Vec<(String, Vec<f64>)>> {
    let template = run.steps.iter().find(|s| !s.phase_ms_by_rank.is_empty())?;
    let mut sum: Vec<(String, Vec<f64>)> = template
        .phase_ms_by_rank
        .iter()
        .map(|(n, ms)| (n.clone(), vec![0.0; ms.len()]))
        .collect();
    let lines = run.steps.iter().map(|s| (s.step, &s.phase_ms_by_rank));
    let total = weighted(lines, |weight, by_rank| {
        if by_rank.len() != sum.len() {
            return false;
        }
        for ((_, acc), (_, ms)) in sum.iter_mut().zip(by_rank) {
            acc.iter_mut().zip(ms).for_each(|(a, m)| *a += m * weight);
        }
        true
    });
    for (_, acc) in &mut sum {
        acc.iter_mut().for_each(|a| *a /= total.max(1.0));
    }
    Some(sum)
}

/// The run's bytes per step by phase: the summary's, or the logged lines' mean.
fn bytes_of(run: &Run) -> Option<Vec<PhaseBytes>> {
    if let Some(c) = run.summary.as_ref().and_then(|s| s.cluster.as_ref()) {
        return Some(c.bytes_per_step.clone());
    }
    let template = run.steps.iter().find_map(|s| s.bytes_per_step.as_ref())?;
    let mut sum = template.clone();
    sum.iter_mut()
        .for_each(|b| (b.intra_host, b.cross_host) = (0.0, 0.0));
    let lines = run.steps.iter().map(|s| (s.step, &s.bytes_per_step));
    let total = weighted(lines, |weight, bytes| {
        let Some(bytes) = bytes else { return false };
        for (acc, b) in sum.iter_mut().zip(bytes) {
            acc.intra_host += b.intra_host * weight;
            acc.cross_host += b.cross_host * weight;
        }
        true
    });
    for b in &mut sum {
        b.intra_host /= total.max(1.0);
        b.cross_host /= total.max(1.0);
    }
    Some(sum)
}

/// Hands `add` each logged line with the steps it covers (since the line before; the
/// first since step 0); returns the steps of the lines `add` took.
fn weighted<T>(lines: impl Iterator<Item = (u64, T)>, mut add: impl FnMut(f64, T) -> bool) -> f64 {
    let (mut previous, mut total) = (0u64, 0.0);
    for (step, line) in lines {
        let weight = step.saturating_sub(previous).max(1) as f64;
        previous = step;
        if add(weight, line) {
            total += weight;
        }
    }
    total
}

/// Intra-host and cross-host bytes per step, all phases, over the logged steps.
fn byte_lines(run: &Run) -> Option<LineChart> {
    let points = |cross: bool| -> Vec<(f64, f64)> {
        run.steps
            .iter()
            .filter_map(|s| {
                let bytes = s.bytes_per_step.as_ref()?;
                let sum = bytes
                    .iter()
                    .map(|b| if cross { b.cross_host } else { b.intra_host })
                    .sum();
                Some((s.step as f64, sum))
            })
            .collect()
    };
    let (intra, cross) = (points(false), points(true));
    if intra.is_empty() {
        return None;
    }
    Some(LineChart {
        title: format!("{}: bytes per step over the run", run.label),
        x_label: "step".to_string(),
        y_label: "bytes per step".to_string(),
        series: vec![
            Series {
                label: "intra-host".to_string(),
                points: thin(intra),
            },
            Series {
                label: "cross-host".to_string(),
                points: thin(cross),
            },
        ],
        log_x: false,
        y_from_zero: true,
    })
}

/// The runs' figures side by side, one column per run.
fn summary_table(html: &mut String, runs: &[Run]) {
    html.push_str("<table>\n<tr><th class=\"l\"></th>");
    for run in runs {
        let _ = write!(html, "<th>{}</th>", escape(&run.label));
    }
    html.push_str("</tr>\n");
    let row = |html: &mut String, name: &str, cell: &dyn Fn(&Run) -> String| {
        let _ = write!(html, "<tr><th class=\"l\">{}</th>", escape(name));
        for run in runs {
            let _ = write!(html, "<td>{}</td>", cell(run));
        }
        html.push_str("</tr>\n");
    };
    row(html, "directory", &|r| escape(&r.dir.display().to_string()));
    row(html, "status", &|r| status(r));
    let summary = |f: fn(&super::run::Summary) -> String| {
        move |r: &Run| r.summary.as_ref().map_or_else(|| "–".to_string(), f)
    };
    row(html, "model", &summary(|s| escape(&s.model)));
    row(html, "parameters", &summary(|s| s.params.to_string()));
    row(html, "hosts × ranks per host", &|r| {
        r.topology
            .map_or("–".to_string(), |(h, l)| format!("{h} × {l}"))
    });
    row(html, "steps", &|r| {
        r.summary
            .as_ref()
            .map(|s| s.steps)
            .or_else(|| r.steps.last().map(|s| s.step))
            .map_or("–".to_string(), |s| s.to_string())
    });
    row(html, "final AUC", &summary(|s| opt(s.auc, 4)));
    row(html, "final log loss", &summary(|s| opt(s.logloss, 5)));
    row(html, "final NE", &summary(|s| opt(s.ne, 5)));
    row(
        html,
        "train samples/s",
        &summary(|s| format!("{:.0}", s.train_samples_per_sec)),
    );
    row(
        html,
        "train samples/s after each pass's first step",
        &summary(|s| opt(s.steady_train_samples_per_sec, 0)),
    );
    row(
        html,
        "eval samples/s",
        &summary(|s| format!("{:.0}", s.eval_samples_per_sec)),
    );
    row(html, "last logged loss", &|r| {
        opt(r.steps.iter().rev().find_map(|s| s.loss), 5)
    });
    row(html, "last evaluation's AUC", &|r| {
        opt(r.evals.last().and_then(|e| e.auc), 4)
    });
    html.push_str("</table>\n");
}

fn opt(v: Option<f64>, decimals: usize) -> String {
    v.map_or_else(|| "–".to_string(), |v| format!("{v:.decimals$}"))
}

fn status(run: &Run) -> String {
    let mut s = if let Some(why) = &run.failure {
        format!("<span class=\"failed\">failed</span>: {}", escape(why))
    } else if run.summary.is_some() {
        "finished".to_string()
    } else {
        "<span class=\"failed\">no summary.json</span>: the run stopped early (--stop-after), failed, or is still running".to_string()
    };
    if run.unreadable_lines > 0 {
        let _ = write!(
            s,
            " ({} line(s) of metrics.jsonl could not be read)",
            run.unreadable_lines
        );
    }
    s
}

fn configs(html: &mut String, runs: &[Run]) {
    html.push_str("<h2>Configs</h2>\n");
    for run in runs {
        match &run.config {
            Some(text) => {
                let _ = writeln!(
                    html,
                    "<details><summary>{} (config.toml)</summary><pre>{}</pre></details>",
                    escape(&run.label),
                    escape(text)
                );
            }
            None => {
                let _ = writeln!(
                    html,
                    "<p class=\"note\">{}: no config.toml</p>",
                    escape(&run.label)
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(step: u64, ms: [f64; 2], cross: f64) -> super::super::run::StepLine {
        super::super::run::StepLine {
            step,
            loss: Some(0.5),
            samples_per_sec: 1.0,
            phase_ms_by_rank: vec![("a".into(), ms.to_vec()), ("b".into(), vec![0.0, 0.0])],
            bytes_per_step: Some(vec![PhaseBytes {
                phase: "output_dist".into(),
                intra_host: 0.0,
                cross_host: cross,
            }]),
        }
    }

    #[test]
    fn a_run_without_summary_is_averaged_over_its_lines_by_steps() {
        // Steps 1–10 at 1 ms (rank 0) and 100 bytes, steps 11–40 at 3 ms and 200 bytes.
        let run = Run {
            dir: "r".into(),
            label: "r".into(),
            steps: vec![line(10, [1.0, 2.0], 100.0), line(40, [3.0, 2.0], 200.0)],
            evals: vec![],
            summary: None,
            topology: None,
            config: None,
            unreadable_lines: 0,
            failure: None,
        };
        let (parts, bars) = rank_bars(&run).unwrap();
        assert_eq!(parts, ["a"], "phases without time are left out");
        assert_eq!(bars.len(), 2);
        assert!(
            (bars[0].parts[0] - 2.5).abs() < 1e-12,
            "{}",
            bars[0].parts[0]
        );
        assert!((bars[1].parts[0] - 2.0).abs() < 1e-12);
        let bytes = bytes_of(&run).unwrap();
        assert!((bytes[0].cross_host - 175.0).abs() < 1e-9);
        let html = page(&[run]).unwrap();
        assert!(html.contains("no summary.json") && html.contains("rank 1"));
    }

    #[test]
    fn escapes_markup() {
        assert_eq!(escape("a<b & \"c\""), "a&lt;b &amp; &quot;c&quot;");
    }

    #[test]
    fn thinning_keeps_the_ends_and_bounds_the_count() {
        let pts: Vec<(f64, f64)> = (0..10_001).map(|i| (i as f64, 0.0)).collect();
        let out = thin(pts);
        assert!(out.len() <= MAX_POINTS + 1);
        assert_eq!(out.first().unwrap().0, 0.0);
        assert_eq!(out.last().unwrap().0, 10_000.0);
        let few: Vec<(f64, f64)> = vec![(1.0, 2.0), (2.0, 3.0)];
        assert_eq!(thin(few.clone()), few);
    }
}
