//! A `POST /score` body into a batch (docs/SERVING.md, "Requests"): JSON rows of raw
//! values by column name, or lines in the training file's format, both encoded by
//! [`towerrec_data::RowEncoder`] as the training data were.

use crate::error::{Error, Result};
use serde_json::Value as Json;
use std::collections::HashMap;
use towerrec_core::Batch;
use towerrec_data::{RowEncoder, Value};

/// What a body holds, from its Content-Type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    /// `application/json`: `{"rows": [{"column": value, …}, …]}`.
    Json,
    /// `text/plain`, `text/csv`, `text/tab-separated-values`: lines of the training
    /// file's format.
    Lines,
}

impl BodyKind {
    /// The kind a Content-Type names (parameters such as `charset` ignored).
    pub fn of(content_type: Option<&str>) -> Result<Self> {
        let media = content_type.map(|c| {
            c.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        });
        match media.as_deref() {
            Some("application/json") => Ok(BodyKind::Json),
            Some("text/plain" | "text/csv" | "text/tab-separated-values") => Ok(BodyKind::Lines),
            Some(other) => Err(Error::UnsupportedMediaType(format!(
                "Content-Type {other:?}: send application/json (rows by column name) or \
                 text/plain (lines of the training file's format)"
            ))),
            None => Err(Error::UnsupportedMediaType(
                "no Content-Type: send application/json (rows by column name) or text/plain \
                 (lines of the training file's format)"
                    .into(),
            )),
        }
    }
}

/// Parses request bodies for one model's columns.
pub struct RequestParser {
    encoder: RowEncoder,
    /// Column name → its place in a row.
    index: HashMap<String, usize>,
}

impl RequestParser {
    pub fn new(encoder: RowEncoder) -> Self {
        let index = encoder
            .columns()
            .iter()
            .enumerate()
            .map(|(i, c)| (c.name.clone(), i))
            .collect();
        Self { encoder, index }
    }

    /// The encoder (the model's schema and columns).
    pub fn encoder(&self) -> &RowEncoder {
        &self.encoder
    }

    /// `body` as a batch of 1 to `max_rows` rows.
    pub fn parse(&self, kind: BodyKind, body: &[u8], max_rows: usize) -> Result<Batch> {
        let batch = match kind {
            BodyKind::Lines => {
                let batch = self
                    .encoder
                    .lines(body.to_vec(), max_rows.saturating_add(1))?;
                if batch.batch_size() > max_rows {
                    return Err(too_many(max_rows, None));
                }
                batch
            }
            BodyKind::Json => {
                let rows = self.json_rows(body, max_rows)?;
                self.encoder.values(&rows)?
            }
        };
        if batch.batch_size() == 0 {
            return Err(Error::BadRequest("the request has no rows".into()));
        }
        Ok(batch)
    }

    /// The values of a JSON body's rows, in column order.
    fn json_rows(&self, body: &[u8], max_rows: usize) -> Result<Vec<Vec<Value>>> {
        let doc: Json = serde_json::from_slice(body)
            .map_err(|e| Error::BadRequest(format!("the body is not JSON: {e}")))?;
        let Json::Object(mut top) = doc else {
            return Err(Error::BadRequest(
                "expected a JSON object {\"rows\": [...]}".into(),
            ));
        };
        let rows = top.remove("rows");
        if let Some(key) = top.keys().next() {
            return Err(Error::BadRequest(format!(
                "unknown key {key:?}: the body is {{\"rows\": [...]}}"
            )));
        }
        let Some(Json::Array(rows)) = rows else {
            return Err(Error::BadRequest(
                "expected \"rows\": an array of objects, one per row".into(),
            ));
        };
        if rows.len() > max_rows {
            return Err(too_many(max_rows, Some(rows.len())));
        }
        rows.into_iter()
            .enumerate()
            .map(|(r, row)| self.json_row(r, row))
            .collect()
    }

    fn json_row(&self, r: usize, row: Json) -> Result<Vec<Value>> {
        let Json::Object(fields) = row else {
            return Err(Error::BadRequest(format!(
                "row {}: expected an object of column: value",
                r + 1
            )));
        };
        let columns = self.encoder.columns();
        let mut values: Vec<Option<Value>> = vec![None; columns.len()];
        for (name, v) in fields {
            let Some(&i) = self.index.get(&name) else {
                return Err(Error::BadRequest(format!(
                    "row {}: unknown column {name:?}; the model's columns are {}",
                    r + 1,
                    self.column_list()
                )));
            };
            values[i] = Some(value(r, &name, v)?);
        }
        values
            .into_iter()
            .zip(columns)
            .map(|(v, c)| {
                v.ok_or_else(|| {
                    Error::BadRequest(format!(
                        "row {}: missing column {:?} (send null for an empty value)",
                        r + 1,
                        c.name
                    ))
                })
            })
            .collect()
    }

    fn column_list(&self) -> String {
        let names: Vec<&str> = self
            .encoder
            .columns()
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        names.join(", ")
    }
}

/// 413: more rows than one request may score (`count`, where known).
fn too_many(max_rows: usize, count: Option<usize>) -> Error {
    Error::TooLarge(match count {
        Some(n) => format!("the request has {n} rows, more than {max_rows} (--max-request-rows)"),
        None => format!("the request has more than {max_rows} rows (--max-request-rows)"),
    })
}

/// One JSON value as a field's value: null is empty, a string or number its text, an
/// array a multi-hot list.
fn value(r: usize, column: &str, v: Json) -> Result<Value> {
    let scalar = |v: Json| -> Option<String> {
        match v {
            Json::String(s) => Some(s),
            Json::Number(n) => Some(n.to_string()),
            _ => None,
        }
    };
    match v {
        Json::Null => Ok(Value::Empty),
        Json::Array(items) => items
            .into_iter()
            .map(|i| {
                scalar(i).ok_or_else(|| {
                    Error::BadRequest(format!(
                        "row {}: column {column:?}: list items must be strings or numbers",
                        r + 1
                    ))
                })
            })
            .collect::<Result<_>>()
            .map(Value::List),
        v => scalar(v).map(Value::Text).ok_or_else(|| {
            Error::BadRequest(format!(
                "row {}: column {column:?}: expected a string, a number, null or a list",
                r + 1
            ))
        }),
    }
}
