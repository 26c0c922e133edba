//! A terminal progress bar that follows a training run.

use indicatif::{ProgressBar, ProgressStyle};
use towerrec_train::{EvalReport, Observer, StepReport};

/// Draws steps, samples/s, loss and the last AUC; prints each evaluation as a line.
pub struct Bar {
    bar: Option<ProgressBar>,
    quiet: bool,
    last_auc: Option<f64>,
    last_step: Option<StepReport>,
}

impl Bar {
    pub fn new(quiet: bool) -> Self {
        Self {
            bar: None,
            quiet,
            last_auc: None,
            last_step: None,
        }
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
        match &self.bar {
            Some(bar) => bar.println(line),
            None if !self.quiet => eprintln!("{line}"),
            None => {}
        }
    }
}
