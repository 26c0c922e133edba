//! A terminal progress bar that follows a training run.

use indicatif::{ProgressBar, ProgressStyle};
use towerrec_train::memory::MemoryNeed;
use towerrec_train::{DriftReport, EvalReport, Observer, StepReport};

/// Draws steps, samples/s, loss and the last AUC; prints each evaluation as a line.
pub struct Bar {
    bar: Option<ProgressBar>,
    quiet: bool,
    last_auc: Option<f64>,
    last_step: Option<StepReport>,
    /// Whether the run got past start-up (its directory is the run's).
    began: bool,
}

impl Bar {
    pub fn new(quiet: bool) -> Self {
        Self {
            bar: None,
            quiet,
            last_auc: None,
            last_step: None,
            began: false,
        }
    }

    /// Whether the run got past start-up: its directory then holds its metrics.
    pub fn began(&self) -> bool {
        self.began
    }

    fn message(&self, r: &StepReport) -> String {
        let auc = self
            .last_auc
            .map_or_else(|| "-".to_string(), |a| format!("{a:.4}"));
        format!(
            "loss {:.4} | {:.0} samples/s | auc {auc}",
            r.loss, r.samples_per_sec
        )
    }

    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish();
        }
    }
}

impl Observer for Bar {
    fn on_start(&mut self, params: usize, total_steps: Option<u64>, resumed_at: u64) {
        self.began = true;
        if self.quiet {
            return;
        }
        eprintln!("model: {params} parameters");
        if resumed_at > 0 {
            eprintln!("resumed at step {resumed_at}");
        }
        let bar = match total_steps {
            Some(n) => ProgressBar::new(n),
            None => ProgressBar::no_length(),
        };
        let template = if total_steps.is_some() {
            "{elapsed_precise} [{bar:30}] step {pos}/{len} {msg}"
        } else {
            "{elapsed_precise} {spinner} step {pos} {msg}"
        };
        if let Ok(style) = ProgressStyle::with_template(template) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_position(resumed_at);
        self.bar = Some(bar);
    }

    fn on_step(&mut self, r: &StepReport) {
        let msg = self.message(r);
        if let Some(bar) = &self.bar {
            bar.set_position(r.step);
            bar.set_message(msg);
        }
        self.last_step = Some(r.clone());
    }

    fn on_eval(&mut self, r: &EvalReport) {
        self.last_auc = r.auc;
        if let (Some(bar), Some(step)) = (&self.bar, &self.last_step) {
            bar.set_message(self.message(step));
        }
        let line = format!(
            "eval at step {}: auc {} logloss {:.5} ne {:.5} ({} samples)",
            r.step,
            r.auc.map_or_else(|| "n/a".into(), |a| format!("{a:.4}")),
            r.logloss,
            r.ne,
            r.samples
        );
        self.say(line);
    }

    fn on_memory(&mut self, whose: &str, need: &MemoryNeed) {
        if !self.quiet {
            eprintln!("{}", need.describe(whose));
        }
    }

    fn on_drift(&mut self, r: &DriftReport) {
        let verdict = match &r.replan {
            Some(path) if r.moved => format!("the rows moved to a fresh plan, {}", path.display()),
            Some(path) => format!(
                "a fresh plan is written to {} (move the rows: --resume with --plan it)",
                path.display()
            ),
            None => "the plan stands".into(),
        };
        self.say(format!(
            "drift at step {}: the run's plan models {:.3} ms and {:.2} MB per iteration, a fresh one {:.3} ms and {:.2} MB ({:.2}×); {verdict}",
            r.step,
            r.plan_seconds * 1e3,
            r.plan_bytes / 1e6,
            r.fresh_seconds * 1e3,
            r.fresh_bytes / 1e6,
            r.ratio
        ));
    }
}

impl Bar {
    /// A line above the bar (or on stderr without a visible one), unless quiet.
    fn say(&self, line: String) {
        match &self.bar {
            // A hidden bar (stderr not a terminal) would drop the line.
            Some(bar) if !bar.is_hidden() => bar.println(line),
            _ if !self.quiet => eprintln!("{line}"),
            _ => {}
        }
    }
}
