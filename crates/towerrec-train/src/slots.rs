//! [`FeatureSlots`]: where each table's pooled vector (or, with DMT, each tower's
//! output) sits in a row of the interaction input. Each slot has its own offset and
//! width, so features of different widths and compressed tower outputs (DMT §3.2) fit
//! the same row.

use crate::error::{Error, Result};

/// One feature's place in a row: columns `offset..offset + width`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    pub offset: usize,
    pub width: usize,
}

impl Slot {
    /// The columns of this slot in a row.
    pub fn range(self) -> std::ops::Range<usize> {
        self.offset..self.offset + self.width
    }
}

/// The slots of every feature in rows of `width` columns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeatureSlots {
    width: usize,
    slots: Vec<Slot>,
}

impl FeatureSlots {
    /// Slots of `widths`, one after the other from column `base`, in rows of `width`.
    pub fn contiguous(
        width: usize,
        base: usize,
        widths: impl IntoIterator<Item = usize>,
    ) -> Result<Self> {
        let mut at = base;
        let slots = widths
            .into_iter()
            .map(|w| {
                let slot = Slot {
                    offset: at,
                    width: w,
                };
                at += w;
                slot
            })
            .collect();
        Self::new(width, slots)
    }

    /// Slots at the given places, which must lie inside rows of `width` and not overlap.
    pub fn new(width: usize, slots: Vec<Slot>) -> Result<Self> {
        let mut sorted: Vec<Slot> = slots.clone();
        sorted.sort_by_key(|s| s.offset);
        let mut end = 0;
        for s in &sorted {
            let stop = s.offset.checked_add(s.width).filter(|&e| e <= width);
            match stop {
                Some(e) if s.offset >= end || s.width == 0 => end = end.max(e),
                _ => {
                    return Err(Error::Model(format!(
                        "feature slot at {}..{} overlaps another or leaves rows of {width}",
                        s.offset,
                        s.offset.saturating_add(s.width)
                    )))
                }
            }
        }
        Ok(Self { width, slots })
    }

    /// Columns per row.
    pub fn width(&self) -> usize {
        self.width
    }

    /// Slot of feature `f`.
    pub fn slot(&self, f: usize) -> Slot {
        self.slots[f]
    }

    /// Number of features.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether there are no features.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Every slot, in feature order.
    pub fn iter(&self) -> impl Iterator<Item = Slot> + '_ {
        self.slots.iter().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contiguous_slots_follow_each_other_from_the_base() {
        let s = FeatureSlots::contiguous(12, 2, [4, 2, 4]).expect("fits");
        let got: Vec<_> = s.iter().map(Slot::range).collect();
        assert_eq!(got, vec![2..6, 6..8, 8..12]);
        assert_eq!(s.width(), 12);
    }

    #[test]
    fn overlapping_or_overflowing_slots_are_refused() {
        assert!(FeatureSlots::contiguous(11, 2, [4, 2, 4]).is_err());
        let overlap = vec![
            Slot {
                offset: 0,
                width: 4,
            },
            Slot {
                offset: 3,
                width: 2,
            },
        ];
        assert!(FeatureSlots::new(8, overlap).is_err());
        let apart = vec![
            Slot {
                offset: 4,
                width: 4,
            },
            Slot {
                offset: 0,
                width: 4,
            },
        ];
        assert!(FeatureSlots::new(8, apart).is_ok());
    }
}
