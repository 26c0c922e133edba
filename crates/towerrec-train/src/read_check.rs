//! A part of the data that yielded nothing, or too many malformed rows, is an error:
//! the one rule for training, evaluation and `towerrec preprocess`.

use crate::error::{Error, Result};
use crate::prefetch::ReadCounts;

/// Fails when a pass over `part` of the data (that started at its beginning) yielded
/// no samples, or skipped more malformed rows than `max_fraction` of those it read.
pub fn check_read(
    part: &'static str,
    read: ReadCounts,
    from_start: bool,
    max_fraction: f64,
    source: &str,
) -> Result<()> {
    if from_start && read.rows == 0 {
        let skipped = match read.skipped {
            0 => String::new(),
            n => format!(" ({n} malformed rows were skipped)"),
        };
        return Err(Error::NoData {
            part,
            detail: format!("{source} yielded no rows{skipped}"),
        });
    }
    let seen = read.rows + read.skipped;
    if read.skipped > 0 && read.skipped as f64 > max_fraction * seen as f64 {
        return Err(Error::TooManyBadRows {
            part,
            skipped: read.skipped,
            rows: seen,
            max_fraction,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(rows: u64, skipped: u64) -> ReadCounts {
        ReadCounts { rows, skipped }
    }

    #[test]
    fn empty_passes_and_too_many_bad_rows_fail() {
        let e = check_read("training", read(0, 0), true, 0.01, "f.txt").unwrap_err();
        assert_eq!(e.to_string(), "no training samples: f.txt yielded no rows");
        let e = check_read("training", read(0, 5), true, 0.5, "f.txt").unwrap_err();
        assert!(
            e.to_string().contains("(5 malformed rows were skipped)"),
            "{e}"
        );
        // A resumed pass that starts at the end of an epoch reads nothing, rightly.
        assert!(check_read("training", read(0, 0), false, 0.01, "f").is_ok());
        assert!(check_read("training", read(990, 10), true, 0.01, "f").is_ok());
        let e = check_read("evaluation", read(989, 11), true, 0.01, "f").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("11 of 1000 evaluation rows (1.10%)"),
            "{e}"
        );
        assert!(check_read("training", read(100, 100), true, 0.5, "f").is_ok());
    }
}
