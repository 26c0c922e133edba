//! The profile file: safetensors, one or two tensors per table and a JSON header in
//! the metadata. An exact table is stored dense (`u32` per row) or, when fewer than a
//! third of its rows were read, as sorted `(rows: u64, counts: u32)`; a sketched table
//! as its hot rows and their estimates (`u64` each).

use super::{AccessProfile, RowCounts, TableAccess};
use crate::error::{Error, Result};
use safetensors::tensor::{Dtype, SafeTensors, TensorView};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::Path;

const FORMAT: &str = "towerrec-profile-v1";

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Header {
    samples: u64,
    source: String,
    tables: Vec<TableHeader>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct TableHeader {
    name: String,
    rows: u64,
    reads: u64,
    layout: Layout,
}

#[derive(Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
enum Layout {
    Dense,
    Sparse,
    Sketch { epsilon: f64, delta: f64 },
}

fn le_u32(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn le_u64(v: impl Iterator<Item = u64>) -> Vec<u8> {
    v.flat_map(|x| x.to_le_bytes()).collect()
}

/// One table's layout and tensors' bytes: (suffix, dtype, bytes).
/// A tensor to write: its name's suffix, dtype and little-endian bytes.
type Encoded = (&'static str, Dtype, Vec<u8>);

fn encode(t: &TableAccess) -> (Layout, Vec<Encoded>) {
    match &t.counts {
        RowCounts::Exact(c) => {
            let read = c.iter().filter(|&&n| n > 0).count();
            if read * 3 >= c.len() {
                return (Layout::Dense, vec![("counts", Dtype::U32, le_u32(c))]);
            }
            let nz = || c.iter().enumerate().filter(|(_, &n)| n > 0);
            let rows = le_u64(nz().map(|(r, _)| r as u64));
            let counts: Vec<u32> = nz().map(|(_, &n)| n).collect();
            let tensors = vec![
                ("rows", Dtype::U64, rows),
                ("counts", Dtype::U32, le_u32(&counts)),
            ];
            (Layout::Sparse, tensors)
        }
        RowCounts::Sketch {
            hot,
            epsilon,
            delta,
        } => {
            let tensors = vec![
                ("rows", Dtype::U64, le_u64(hot.iter().map(|h| h.0))),
                ("counts", Dtype::U64, le_u64(hot.iter().map(|h| h.1))),
            ];
            let layout = Layout::Sketch {
                epsilon: *epsilon,
                delta: *delta,
            };
            (layout, tensors)
        }
    }
}

impl AccessProfile {
    /// Writes the profile to `path` (atomically: a temporary file, then a rename).
    pub fn save(&self, path: &Path) -> Result<()> {
        let bad = |m: String| Error::format(path, m);
        let mut headers = Vec::with_capacity(self.tables.len());
        let mut data: Vec<(String, Dtype, Vec<u8>)> = Vec::new();
        for (i, t) in self.tables.iter().enumerate() {
            let (layout, tensors) = encode(t);
            headers.push(TableHeader {
                name: t.name.clone(),
                rows: t.rows,
                reads: t.reads,
                layout,
            });
            data.extend(
                tensors
                    .into_iter()
                    .map(|(s, d, b)| (format!("{i}.{s}"), d, b)),
            );
        }
        let header = Header {
            samples: self.samples,
            source: self.source.clone(),
            tables: headers,
        };
        let mut views = Vec::with_capacity(data.len());
        for (name, dtype, bytes) in &data {
            let len = bytes.len() * 8 / dtype.bitsize();
            let view = TensorView::new(*dtype, vec![len], bytes).map_err(|e| bad(e.to_string()))?;
            views.push((name.clone(), view));
        }
        let meta = HashMap::from([
            ("format".to_string(), FORMAT.to_string()),
            (
                "profile".to_string(),
                serde_json::to_string(&header).map_err(|e| bad(e.to_string()))?,
            ),
        ]);
        let bytes =
            safetensors::tensor::serialize(views, Some(meta)).map_err(|e| bad(e.to_string()))?;
        towerrec_core::fsio::write_atomic(path, &bytes).map_err(|e| Error::io(path, e))
    }

    /// Reads a profile written by [`AccessProfile::save`], checking that its counts add
    /// up to its reads and that every row is inside its table.
    pub fn load(path: &Path) -> Result<Self> {
        let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        let bad = |m: String| Error::format(path, m);
        let (_, meta) = SafeTensors::read_metadata(&bytes)
            .map_err(|e| bad(format!("not a safetensors file: {e}")))?;
        let meta = meta.metadata().clone().unwrap_or_default();
        if meta.get("format").map(String::as_str) != Some(FORMAT) {
            return Err(bad(format!(
                "not a towerrec access profile (expected format {FORMAT})"
            )));
        }
        let header: Header = meta
            .get("profile")
            .ok_or_else(|| bad("no 'profile' header".into()))
            .and_then(|s| serde_json::from_str(s).map_err(|e| bad(format!("header: {e}"))))?;
        let st = SafeTensors::deserialize(&bytes).map_err(|e| bad(e.to_string()))?;
        let tables = header
            .tables
            .into_iter()
            .enumerate()
            .map(|(i, h)| decode(&st, i, h).map_err(&bad))
            .collect::<Result<Vec<_>>>()?;
        Ok(AccessProfile {
            samples: header.samples,
            source: header.source,
            tables,
        })
    }
}

/// A tensor's values as `u64`, checked to be `dtype` and one-dimensional.
fn values(st: &SafeTensors<'_>, name: &str, dtype: Dtype) -> std::result::Result<Vec<u64>, String> {
    let t = st
        .tensor(name)
        .map_err(|_| format!("tensor {name} missing"))?;
    if t.dtype() != dtype || t.shape().len() != 1 {
        return Err(format!("tensor {name}: expected a 1-D {dtype:?} tensor"));
    }
    let d = t.data();
    Ok(match dtype {
        Dtype::U32 => d
            .chunks_exact(4)
            .map(|b| u64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]])))
            .collect(),
        _ => d
            .chunks_exact(8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("chunks of 8")))
            .collect(),
    })
}

fn decode(
    st: &SafeTensors<'_>,
    i: usize,
    h: TableHeader,
) -> std::result::Result<TableAccess, String> {
    let name = |s: &str| format!("{i}.{s}");
    let table = &h.name;
    let counts = match h.layout {
        Layout::Dense => {
            let c = values(st, &name("counts"), Dtype::U32)?;
            if c.len() as u64 != h.rows {
                return Err(format!(
                    "table {table}: {} counts for {} rows",
                    c.len(),
                    h.rows
                ));
            }
            RowCounts::Exact(c.into_iter().map(|n| n as u32).collect())
        }
        Layout::Sparse => {
            let rows = values(st, &name("rows"), Dtype::U64)?;
            let c = values(st, &name("counts"), Dtype::U32)?;
            check_rows(table, &rows, c.len(), h.rows)?;
            let len =
                usize::try_from(h.rows).map_err(|_| format!("table {table}: too many rows"))?;
            let mut dense = vec![0u32; len];
            for (r, n) in rows.into_iter().zip(c) {
                dense[r as usize] = n as u32;
            }
            RowCounts::Exact(dense)
        }
        Layout::Sketch { epsilon, delta } => {
            let rows = values(st, &name("rows"), Dtype::U64)?;
            let c = values(st, &name("counts"), Dtype::U64)?;
            let mut sorted = rows.clone();
            sorted.sort_unstable();
            check_rows(table, &sorted, c.len(), h.rows)?;
            RowCounts::Sketch {
                hot: rows.into_iter().zip(c).collect(),
                epsilon,
                delta,
            }
        }
    };
    let t = TableAccess {
        name: h.name,
        rows: h.rows,
        reads: h.reads,
        counts,
    };
    if let RowCounts::Exact(c) = &t.counts {
        let sum: u64 = c.iter().map(|&n| u64::from(n)).sum();
        if sum != t.reads {
            return Err(format!(
                "table {}: counts add up to {sum}, not its {} reads",
                t.name, t.reads
            ));
        }
    }
    Ok(t)
}

/// `rows` strictly increasing, inside the table, one per count.
fn check_rows(
    table: &str,
    rows: &[u64],
    counts: usize,
    len: u64,
) -> std::result::Result<(), String> {
    if rows.len() != counts {
        return Err(format!(
            "table {table}: {} rows for {counts} counts",
            rows.len()
        ));
    }
    if rows.windows(2).any(|w| w[0] >= w[1]) {
        return Err(format!("table {table}: rows repeated or out of order"));
    }
    if rows.last().is_some_and(|&r| r >= len) {
        return Err(format!("table {table}: a row outside its {len} rows"));
    }
    Ok(())
}
