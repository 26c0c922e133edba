//! The finiteness checks of a training step (docs/RELIABILITY.md, section 2): the loss,
//! the tables' gradient rows where they update the tables, and the dense gradients once
//! summed over the ranks, each checked before it updates the parameters it feeds.
//!
//! A NaN the loss does not show still ruins a run: a backward that overflows leaves
//! NaN in the gradients while the forward and the loss are finite, the update writes
//! it into the weights, and a ReLU turns it into 0 in every later forward
//! (`max(NaN, 0) = 0`), so the logged loss stays finite to the end. Hence the
//! gradients are checked too, at the step where they go wrong.
//!
//! On a cluster every rank stops at the same step with the same message. The dense
//! gradients after their all-reduce are the same bits on every rank, so each rank
//! finds the same in them on its own. What a rank finds alone (its loss, the gradient
//! rows of the tables it holds, its tower group's module gradients) it counts in one
//! element added to the dense gradients' all-reduce that every step already does; when
//! the sum is not zero, every rank knows, and only then do the ranks exchange what they
//! found (one more collective, on the failing step only) and report the first of it.

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use towerrec_comm::{Comm, Phase};
use towerrec_core::ParamMut;

/// Elements per block of [`all_finite`]'s scan: a block's test vectorizes.
const BLOCK: usize = 64;

/// The bits of an f32's exponent: all set in NaN and ±infinity only.
const EXPONENT: u32 = 0x7f80_0000;

/// Whether every element of `xs` is finite: a branch-free scan, a small part of a step
/// next to the GEMMs that wrote the gradients.
pub(crate) fn all_finite(xs: &[f32]) -> bool {
    let blocks = xs.chunks_exact(BLOCK);
    let rest = blocks.remainder();
    for block in blocks {
        let mut bad = 0u32;
        for x in block {
            bad |= u32::from(x.to_bits() & EXPONENT == EXPONENT);
        }
        if bad != 0 {
            return false;
        }
    }
    rest.iter().all(|x| x.is_finite())
}

/// The index and value of the first element of `xs` that is NaN or infinite.
pub(crate) fn first_non_finite(xs: &[f32]) -> Option<(usize, f32)> {
    if all_finite(xs) {
        return None;
    }
    xs.iter().copied().enumerate().find(|(_, x)| !x.is_finite())
}

/// The first non-finite value in the gradient rows (`cols` wide, one per bag) of the
/// bags that hold ids (`has_ids(bag)`): the rows that update a table. An empty bag's
/// row updates nothing.
pub(crate) fn bad_grad_rows(
    grad: &[f32],
    cols: usize,
    has_ids: impl Fn(usize) -> bool,
) -> Option<f32> {
    if all_finite(grad) {
        return None;
    }
    grad.chunks_exact(cols.max(1))
        .enumerate()
        .filter(|(b, _)| has_ids(*b))
        .find_map(|(_, row)| row.iter().copied().find(|x| !x.is_finite()))
}

/// Where a dense gradient was summed before it was checked, for messages.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Summed {
    /// One process: no sum.
    Nowhere,
    /// Over the world's ranks (this many).
    World(usize),
    /// Over a tower group's ranks (this many): the Tower Modules SPTT runs.
    TowerGroup(usize),
}

/// What went non-finite in a step, as one rank found it: the error's `what` and
/// `culprit`, and where it ranks among the step's findings, so that every rank reports
/// the same one: the loss first, then the dense gradients in parameter order (a DMT
/// model's Tower Modules come first, summed over their tower group on a cluster), then
/// the tables' gradient rows in model order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Fault {
    order: (u8, u64),
    what: String,
    culprit: String,
}

impl Fault {
    /// A non-finite loss (`loss`, summed over this rank's samples) and `culprit`, what is
    /// known of its cause; on a cluster `rank` (of `world`) says whose samples.
    pub(crate) fn loss(loss: f64, culprit: String, rank: Option<(usize, usize)>) -> Self {
        let culprit = match rank {
            Some((r, w)) if w > 1 => {
                format!("on rank {r} of {w} (its slice of the batch): {culprit}")
            }
            _ => culprit,
        };
        Fault {
            order: (0, rank.map_or(0, |(r, _)| r as u64)),
            what: format!("loss ({loss})"),
            culprit,
        }
    }

    /// Table `table` (model order, named `name`) has a non-finite value in the gradient
    /// rows that update it; `exchanged`: the rows came from the ranks whose samples read
    /// them (else from this process's feature rows).
    pub(crate) fn table(table: usize, name: &str, value: f32, exchanged: bool) -> Self {
        let after = if exchanged {
            " after their exchange to the ranks that hold it"
        } else {
            ""
        };
        Fault {
            order: (3, table as u64),
            what: format!("gradient ({value})"),
            culprit: format!("the gradient rows of embedding table '{name}' hold {value}{after}"),
        }
    }

    /// The first non-finite value of the dense gradients that `which` selects from
    /// `params`, summed as `summed` says, if any.
    pub(crate) fn dense(
        params: &[ParamMut<'_, f32>],
        which: impl Fn(usize) -> bool,
        summed: Summed,
    ) -> Option<Self> {
        let (i, p, (at, value)) = params
            .iter()
            .enumerate()
            .filter(|(i, _)| which(*i))
            .find_map(|(i, p)| first_non_finite(p.grad).map(|bad| (i, p, bad)))?;
        let (kind, after) = match summed {
            Summed::World(n) if n > 1 => (2, format!(" after the all-reduce over {n} ranks")),
            Summed::TowerGroup(n) if n > 1 => (
                1,
                format!(" after the all-reduce over its tower group ({n} ranks)"),
            ),
            Summed::TowerGroup(_) => (1, String::new()),
            Summed::Nowhere | Summed::World(_) => (2, String::new()),
        };
        // Of the same parameters: the same on every rank that checks these gradients.
        let (top, name) = params.iter().enumerate().filter(|(i, _)| which(*i)).fold(
            (0.0f32, ""),
            |(m, n), (_, p)| {
                let top = p.value.iter().fold(0.0f32, |a, x| a.max(x.abs()));
                if top > m {
                    (top, &p.name[..])
                } else {
                    (m, n)
                }
            },
        );
        Some(Fault {
            order: (kind, i as u64),
            what: format!("gradient ({value})"),
            culprit: format!(
                "the gradient of dense parameter '{}' holds {value} at element {at}{after} \
                 (largest dense weight {top:e}, in '{name}')",
                p.name
            ),
        })
    }

    /// The run's error (its place is filled in by the trainer).
    pub(crate) fn into_error(self) -> Error {
        Error::NonFinite {
            what: self.what,
            place: "a training step".into(),
            culprit: self.culprit,
        }
    }
}

/// What this rank found non-finite so far in the current step: the first by order.
#[derive(Debug, Default)]
pub(crate) struct Faults(Option<Fault>);

impl Faults {
    /// Keeps `fault` if it comes before what was found so far.
    pub(crate) fn note(&mut self, fault: Fault) {
        match &self.0 {
            Some(kept) if kept.order <= fault.order => {}
            _ => self.0 = Some(fault),
        }
    }

    /// What was found, leaving nothing for the next step.
    pub(crate) fn take(&mut self) -> Option<Fault> {
        self.0.take()
    }
}

/// The first of two findings by order.
fn first(a: Option<Fault>, b: Option<Fault>) -> Option<Fault> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if b.order < a.order { b } else { a }),
        (a, b) => a.or(b),
    }
}

/// The step's end on one process: an error naming the first of `mine` and what the
/// dense gradients (`dense`) hold, if either.
pub(crate) fn verdict_alone(mine: Option<Fault>, dense: Option<Fault>) -> Result<()> {
    match first(mine, dense) {
        Some(f) => Err(f.into_error()),
        None => Ok(()),
    }
}

/// The step's end on a rank of `world`, after the all-reduce that summed each rank's
/// count of findings into `count`, and the dense gradients it summed, whose finding
/// `dense` is: the same on every rank. Every rank fails with the first of `dense` and
/// every rank's findings, if any: where `count` is not zero, the ranks first share
/// their findings (a collective, which every rank then calls).
pub(crate) fn verdict(
    world: &Comm,
    mine: Option<Fault>,
    count: f32,
    dense: Option<Fault>,
) -> Result<()> {
    let theirs = if count > 0.0 {
        Some(agree(world, mine)?)
    } else {
        None
    };
    verdict_alone(theirs, dense)
}

/// The first of every rank's findings by (order, rank): the same on every rank.
/// Collective: every rank of `world` calls it.
fn agree(world: &Comm, mine: Option<Fault>) -> Result<Fault> {
    let bytes = match &mine {
        Some(f) => serde_json::to_vec(f).map_err(|e| Error::Cluster(e.to_string()))?,
        None => Vec::new(),
    };
    let send: Vec<u32> = bytes.iter().map(|&b| u32::from(b)).collect();
    let (all, counts) = world.all_gather(&send, Phase::Control)?;
    let mut at = 0;
    let mut first: Option<Fault> = None;
    for n in counts {
        let bytes: Vec<u8> = all[at..at + n].iter().map(|&b| b as u8).collect();
        at += n;
        if let Ok(f) = serde_json::from_slice::<Fault>(&bytes) {
            if first.as_ref().is_none_or(|kept| f.order < kept.order) {
                first = Some(f);
            }
        }
    }
    first.or(mine).ok_or_else(|| {
        Error::Cluster("a rank counted a non-finite value in the step but none reported it".into())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scan_finds_nan_and_infinity_anywhere() {
        for n in [0usize, 1, 63, 64, 65, 200] {
            let mut xs: Vec<f32> = (0..n).map(|i| i as f32 * 1e30).collect();
            assert!(all_finite(&xs), "{n}");
            assert_eq!(first_non_finite(&xs), None);
            for at in [0, n / 2, n.saturating_sub(1)] {
                if n == 0 {
                    continue;
                }
                for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
                    let keep = xs[at];
                    xs[at] = bad;
                    assert!(!all_finite(&xs), "{n} {at} {bad}");
                    let (i, v) = first_non_finite(&xs).unwrap();
                    assert_eq!(i, at);
                    assert_eq!(v.to_bits(), bad.to_bits());
                    xs[at] = keep;
                }
            }
        }
        assert!(all_finite(&[
            f32::MAX,
            f32::MIN,
            f32::MIN_POSITIVE,
            -0.0,
            1e-45
        ]));
    }

    #[test]
    fn only_the_rows_of_bags_with_ids_count() {
        let grad = [1.0, 2.0, f32::NAN, 4.0, 5.0, f32::INFINITY];
        assert_eq!(bad_grad_rows(&grad, 2, |b| b == 0), None);
        assert!(bad_grad_rows(&grad, 2, |b| b == 1).unwrap().is_nan());
        assert_eq!(bad_grad_rows(&grad, 2, |b| b == 2), Some(f32::INFINITY));
    }

    #[test]
    fn the_first_fault_by_order_is_kept() {
        let mut faults = Faults::default();
        faults.note(Fault::table(3, "C4", f32::NAN, true));
        faults.note(Fault::table(5, "C6", f32::NAN, true));
        faults.note(Fault::table(1, "C2", f32::INFINITY, true));
        let kept = faults.take().unwrap();
        assert!(kept.culprit.contains("'C2' hold inf"), "{kept:?}");
        assert!(faults.take().is_none());
        faults.note(Fault::table(1, "C2", f32::NAN, false));
        faults.note(Fault::loss(f64::NAN, "x".into(), Some((2, 4))));
        let e = faults.take().unwrap().into_error().to_string();
        assert!(
            e.starts_with("non-finite loss (NaN) at a training step: on rank 2 of 4 (its slice of the batch): x;"),
            "{e}"
        );
    }
}
