//! The checks that keep a run that went wrong from looking like a success: a loss,
//! parameter or evaluation that is NaN or infinite stops the run naming where (the
//! data-side checks are in [`crate::read_check`]).

use crate::error::Error;
use crate::model::{Embeddings, Model};
use towerrec_core::Batch;

/// Where the run stands, for messages: "step 12 (epoch 1, batch 12)".
pub(super) fn place(step: u64, epoch: u64, batch_in_epoch: u64) -> String {
    format!(
        "step {step} (epoch {}, batch {} of the epoch)",
        epoch + 1,
        batch_in_epoch
    )
}

/// `e` with its place filled in, where it is a [`Error::NonFinite`].
pub(super) fn at(e: Error, where_: String) -> Error {
    match e {
        Error::NonFinite { what, culprit, .. } => Error::NonFinite {
            what,
            place: where_,
            culprit,
        },
        other => other,
    }
}

/// The first input, parameter or table that holds NaN or infinity, named; or what is
/// known when all are finite (the forward pass itself overflowed). `batch`: the samples
/// of the step (on a cluster this rank's slice) and the first one's place in the global
/// batch, which the messages count by. Scans everything, so only called once something
/// went wrong.
pub(crate) fn non_finite_culprit(model: &mut Model, batch: Option<(&Batch, usize)>) -> String {
    if let Some((b, first)) = batch {
        let width = b.num_dense.max(1);
        if let Some(i) = b.dense.iter().position(|x| !x.is_finite()) {
            return format!(
                "dense input feature {} of sample {} in the batch is {}",
                i % width,
                first + i / width,
                b.dense[i]
            );
        }
        if let Some(i) = b.labels.iter().position(|x| !x.is_finite()) {
            return format!(
                "the label of sample {} in the batch is {}",
                first + i,
                b.labels[i]
            );
        }
    }
    let mut largest = (0.0f32, String::new());
    for p in model.dense_params() {
        if let Some(x) = p.value.iter().find(|x| !x.is_finite()) {
            return format!("dense parameter '{}' holds {x}", p.name);
        }
        let top = p.value.iter().fold(0.0f32, |m, x| m.max(x.abs()));
        if top > largest.0 {
            largest = (top, p.name.to_string());
        }
    }
    let names: Vec<String> = model.table_descs().iter().map(|d| d.name.clone()).collect();
    let bad_table = match model.embeddings() {
        Embeddings::Local(tables) => tables
            .iter()
            .enumerate()
            .find(|(_, t)| !t.all_finite())
            .map(|(i, _)| i),
        Embeddings::Sharded(s) => s
            .local_shards()
            .find(|(_, _, t)| !t.all_finite())
            .map(|(i, _, _)| i),
    };
    match bad_table {
        Some(i) => format!(
            "embedding table '{}' holds non-finite weights",
            names.get(i).map_or("?", String::as_str)
        ),
        None => format!(
            "every parameter is finite but the forward pass overflowed (largest dense weight \
             {:e}, in '{}')",
            largest.0, largest.1
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The small quickstart's config and a model of it.
    fn small() -> (crate::Config, Model) {
        let sets: Vec<String> = [
            "data.tables=[{ rows = 30, count = 3 }]",
            "data.train_samples=64",
            "data.eval_samples=64",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let cfg = crate::Config::quickstart(&sets).unwrap();
        let schema = towerrec_data::schema(&cfg.data, &cfg.base_dir).unwrap();
        let model = crate::model::Model::for_run(&cfg, &schema, 1, None).unwrap();
        (cfg, model)
    }

    #[test]
    fn the_culprit_of_a_non_finite_loss_is_named() {
        let (_, mut model) = small();
        assert!(non_finite_culprit(&mut model, None).starts_with("every parameter is finite"));
        if let Embeddings::Local(tables) = model.embeddings_mut() {
            let mut w = tables[1].weights().into_owned();
            w[5] = f32::INFINITY;
            tables[1].set_weights(&w).unwrap();
        }
        let c = non_finite_culprit(&mut model, None);
        assert!(
            c.contains("embedding table") && c.contains("non-finite"),
            "{c}"
        );
        model.dense_params()[2].value[0] = f32::NAN;
        let c = non_finite_culprit(&mut model, None);
        assert!(
            c.starts_with("dense parameter '") && c.ends_with("holds NaN"),
            "{c}"
        );
        let batch = Batch {
            dense: vec![0.0, 1.0, f32::NEG_INFINITY, 2.0],
            num_dense: 2,
            sparse: Default::default(),
            labels: vec![0.0, 1.0],
        };
        let c = non_finite_culprit(&mut model, Some((&batch, 0)));
        assert_eq!(c, "dense input feature 0 of sample 1 in the batch is -inf");
        let batch = Batch {
            dense: vec![0.0; 4],
            num_dense: 2,
            sparse: Default::default(),
            labels: vec![0.0, f32::NAN],
        };
        let c = non_finite_culprit(&mut model, Some((&batch, 0)));
        assert_eq!(c, "the label of sample 1 in the batch is NaN");
    }

    #[test]
    fn a_non_finite_evaluation_is_an_error_naming_the_parameter() {
        let (cfg, mut model) = small();
        assert!(super::super::evaluation::evaluate_aside(&mut model, &cfg, 7, &mut None).is_ok());
        // The logit's bias: a NaN earlier could be swallowed by a ReLU (max(NaN, 0) = 0).
        let mut params = model.dense_params();
        let last = params.len() - 1;
        params[last].value[0] = f32::NAN;
        let e = super::super::evaluation::evaluate_aside(&mut model, &cfg, 7, &mut None)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("non-finite evaluation log loss (NaN) at the evaluation at step 7: dense parameter '"),
            "{e}"
        );
    }
}
