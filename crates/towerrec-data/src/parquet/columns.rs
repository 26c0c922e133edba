//! Arrow arrays → model inputs, with the CSV reader's rules: which Arrow types each
//! role accepts (checked once, when the file is opened, [`Role::check`]), a typed view
//! of one column of a record batch ([`Col`]) and the value of one cell ([`Val`]), and
//! how a cell becomes a label, a dense value or categorical keys.
//!
//! A cell's *text* is what a CSV of the same rows holds: strings and binaries trimmed
//! of ASCII whitespace, integers in decimal, booleans `true`/`false`, null the empty
//! field. Keys are [`key_of`] that text, so a value gets the key the CSV reader gives
//! it.

use crate::csv_schema::{parse_number, split_on};
use crate::encode::key_of;
use arrow_array::cast::AsArray;
use arrow_array::types::{
    Float16Type, Float32Type, Float64Type, Int16Type, Int32Type, Int64Type, Int8Type, UInt16Type,
    UInt32Type, UInt64Type, UInt8Type,
};
use arrow_array::{Array, ArrayRef};
use arrow_schema::DataType;
use std::collections::HashSet;

/// What a column's cells are, for the checks made when a file is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Scalar {
    Int,
    UInt,
    Float,
    Bool,
    Text,
}

/// A column's kind: its cells, and whether each row holds a list of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Kind {
    pub scalar: Scalar,
    pub list: bool,
}

fn scalar(dt: &DataType) -> Option<Scalar> {
    use DataType::*;
    Some(match dt {
        Int8 | Int16 | Int32 | Int64 => Scalar::Int,
        UInt8 | UInt16 | UInt32 | UInt64 => Scalar::UInt,
        Float16 | Float32 | Float64 => Scalar::Float,
        Boolean => Scalar::Bool,
        Utf8 | LargeUtf8 | Utf8View | Binary | LargeBinary | BinaryView | FixedSizeBinary(_) => {
            Scalar::Text
        }
        Dictionary(_, v) => return scalar(v),
        _ => return None,
    })
}

/// The kind of an Arrow type; `None` for types no role accepts (structs, maps, lists of
/// lists, decimals, dates and times).
pub(super) fn kind(dt: &DataType) -> Option<Kind> {
    match dt {
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => Some(Kind {
            scalar: scalar(f.data_type())?,
            list: true,
        }),
        DataType::Dictionary(_, v) => kind(v),
        _ => Some(Kind {
            scalar: scalar(dt)?,
            list: false,
        }),
    }
}

/// The role a column plays, for the checks and messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    /// The label, with a `positive` list or not.
    Label {
        positive: bool,
    },
    Dense,
    /// A categorical column, multi-valued (`separator` set) or not.
    Sparse {
        multi: bool,
    },
}

impl Role {
    /// The config key of the role, for messages.
    pub fn key(self) -> &'static str {
        match self {
            Role::Label { .. } => "data.schema.label",
            Role::Dense => "data.schema.dense",
            Role::Sparse { .. } => "data.schema.sparse",
        }
    }

    /// Whether a column of Arrow type `dt` can play this role; on refusal, what the
    /// role expects.
    pub fn check(self, dt: &DataType) -> std::result::Result<(), String> {
        let k = kind(dt);
        let ok = match (self, k) {
            (_, None) => false,
            (Role::Sparse { multi: true }, Some(k)) => k.scalar != Scalar::Float,
            (_, Some(Kind { list: true, .. })) => {
                return Err(match self {
                    Role::Sparse { multi: false } => "a single-valued column; this is a list \
                         column: set `separator` (any character) to read one id per element"
                        .into(),
                    _ => "a column of single values, not a list".into(),
                })
            }
            (Role::Label { positive: true }, Some(k)) => k.scalar != Scalar::Float,
            (Role::Label { positive: false }, Some(_)) => true,
            (Role::Dense, Some(k)) => {
                matches!(k.scalar, Scalar::Int | Scalar::UInt | Scalar::Float)
            }
            (Role::Sparse { multi: false }, Some(k)) => k.scalar != Scalar::Float,
        };
        if ok {
            return Ok(());
        }
        Err(match self {
            Role::Label { positive: true } => {
                "a string, binary, integer or boolean column (`positive` compares text)".into()
            }
            Role::Label { positive: false } => "a numeric, boolean, string or binary column".into(),
            Role::Dense => "an integer or floating-point column".into(),
            Role::Sparse { .. } => "a string, binary, integer or boolean column, or a list of \
                 them (floating-point values are not categories; cast them to integers or strings)"
                .into(),
        })
    }
}

/// One cell.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Val<'a> {
    Null,
    Int(i64),
    UInt(u64),
    Float(f64),
    Bool(bool),
    Bytes(&'a [u8]),
}

impl Val<'_> {
    /// The cell for an error message.
    pub fn quoted(&self) -> String {
        match self {
            Val::Null => "null".into(),
            Val::Int(n) => n.to_string(),
            Val::UInt(n) => n.to_string(),
            Val::Float(x) => x.to_string(),
            Val::Bool(b) => b.to_string(),
            Val::Bytes(b) => crate::error::quote_found(b),
        }
    }

    /// The cell as a number, as the CSV reader parses its text; `None` for null, text
    /// that is not a finite number, and non-finite floats.
    pub fn number(&self) -> Option<f64> {
        match *self {
            Val::Null => None,
            Val::Int(n) => Some(n as f64),
            Val::UInt(n) => Some(n as f64),
            Val::Float(x) => Some(x).filter(|x| x.is_finite()),
            Val::Bool(b) => Some(if b { 1.0 } else { 0.0 }),
            Val::Bytes(b) => parse_number(b.trim_ascii()),
        }
    }

    /// Calls `f` with the cell's text (trimmed; empty for null).
    pub fn with_text<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        let mut buf = [0u8; 20];
        match *self {
            Val::Null => f(b""),
            Val::Bytes(b) => f(b.trim_ascii()),
            Val::Int(n) => {
                let text = decimal(n.unsigned_abs(), &mut buf);
                if n < 0 {
                    let mut neg = [0u8; 21];
                    neg[0] = b'-';
                    neg[1..=text.len()].copy_from_slice(text);
                    f(&neg[..=text.len()])
                } else {
                    f(text)
                }
            }
            Val::UInt(n) => f(decimal(n, &mut buf)),
            Val::Bool(b) => f(if b { b"true" } else { b"false" }),
            // Refused by `Role::check` wherever text is asked for; kept total.
            Val::Float(x) => f(x.to_string().as_bytes()),
        }
    }
}

/// `n` in decimal, written at the end of `buf`.
fn decimal(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[i..];
        }
    }
}

/// A typed view of one column of a record batch.
pub(super) enum Col<'a> {
    I8(&'a arrow_array::Int8Array),
    I16(&'a arrow_array::Int16Array),
    I32(&'a arrow_array::Int32Array),
    I64(&'a arrow_array::Int64Array),
    U8(&'a arrow_array::UInt8Array),
    U16(&'a arrow_array::UInt16Array),
    U32(&'a arrow_array::UInt32Array),
    U64(&'a arrow_array::UInt64Array),
    F16(&'a arrow_array::Float16Array),
    F32(&'a arrow_array::Float32Array),
    F64(&'a arrow_array::Float64Array),
    Bool(&'a arrow_array::BooleanArray),
    Str(&'a arrow_array::StringArray),
    LargeStr(&'a arrow_array::LargeStringArray),
    StrView(&'a arrow_array::StringViewArray),
    Bin(&'a arrow_array::BinaryArray),
    LargeBin(&'a arrow_array::LargeBinaryArray),
    BinView(&'a arrow_array::BinaryViewArray),
    FixedBin(&'a arrow_array::FixedSizeBinaryArray),
    /// Row `i` is `values[keys[i]]`, or null.
    Dict {
        array: &'a dyn Array,
        keys: Vec<usize>,
        values: Box<Col<'a>>,
    },
    /// Row `i` holds `values[offsets[i]..offsets[i + 1]]`, or null.
    List {
        array: &'a dyn Array,
        offsets: Vec<usize>,
        values: Box<Col<'a>>,
    },
}

impl<'a> Col<'a> {
    /// The view of `array`; `None` for a type [`kind`] does not know.
    pub fn new(array: &'a ArrayRef) -> Option<Self> {
        Self::of(array.as_ref())
    }

    fn of(array: &'a dyn Array) -> Option<Self> {
        use DataType::*;
        Some(match array.data_type() {
            Int8 => Col::I8(array.as_primitive_opt::<Int8Type>()?),
            Int16 => Col::I16(array.as_primitive_opt::<Int16Type>()?),
            Int32 => Col::I32(array.as_primitive_opt::<Int32Type>()?),
            Int64 => Col::I64(array.as_primitive_opt::<Int64Type>()?),
            UInt8 => Col::U8(array.as_primitive_opt::<UInt8Type>()?),
            UInt16 => Col::U16(array.as_primitive_opt::<UInt16Type>()?),
            UInt32 => Col::U32(array.as_primitive_opt::<UInt32Type>()?),
            UInt64 => Col::U64(array.as_primitive_opt::<UInt64Type>()?),
            Float16 => Col::F16(array.as_primitive_opt::<Float16Type>()?),
            Float32 => Col::F32(array.as_primitive_opt::<Float32Type>()?),
            Float64 => Col::F64(array.as_primitive_opt::<Float64Type>()?),
            Boolean => Col::Bool(array.as_boolean_opt()?),
            Utf8 => Col::Str(array.as_string_opt::<i32>()?),
            LargeUtf8 => Col::LargeStr(array.as_string_opt::<i64>()?),
            Utf8View => Col::StrView(array.as_string_view_opt()?),
            Binary => Col::Bin(array.as_binary_opt::<i32>()?),
            LargeBinary => Col::LargeBin(array.as_binary_opt::<i64>()?),
            BinaryView => Col::BinView(array.as_binary_view_opt()?),
            FixedSizeBinary(_) => Col::FixedBin(array.as_fixed_size_binary_opt()?),
            Dictionary(_, _) => {
                let dict = array.as_any_dictionary_opt()?;
                Col::Dict {
                    array,
                    keys: dict.normalized_keys(),
                    values: Box::new(Self::of(dict.values().as_ref())?),
                }
            }
            List(_) => {
                let list = array.as_list_opt::<i32>()?;
                Col::List {
                    array,
                    offsets: list.value_offsets().iter().map(|&o| o as usize).collect(),
                    values: Box::new(Self::of(list.values().as_ref())?),
                }
            }
            LargeList(_) => {
                let list = array.as_list_opt::<i64>()?;
                Col::List {
                    array,
                    offsets: list.value_offsets().iter().map(|&o| o as usize).collect(),
                    values: Box::new(Self::of(list.values().as_ref())?),
                }
            }
            FixedSizeList(_, n) => {
                let list = array.as_fixed_size_list_opt()?;
                let n = usize::try_from(*n).ok()?;
                Col::List {
                    array,
                    offsets: (0..=list.len())
                        .map(|i| list.offset() * n + i * n)
                        .collect(),
                    values: Box::new(Self::of(list.values().as_ref())?),
                }
            }
            _ => return None,
        })
    }

    /// Cell `i` of a column of single values (a list column's cells are [`Val::Null`]:
    /// read them with [`Col::list`]).
    pub fn get(&self, i: usize) -> Val<'a> {
        macro_rules! cell {
            ($a:expr, $v:ident, $conv:expr) => {
                if $a.is_null(i) {
                    Val::Null
                } else {
                    let $v = $a.value(i);
                    $conv
                }
            };
        }
        match self {
            Col::I8(a) => cell!(a, v, Val::Int(v.into())),
            Col::I16(a) => cell!(a, v, Val::Int(v.into())),
            Col::I32(a) => cell!(a, v, Val::Int(v.into())),
            Col::I64(a) => cell!(a, v, Val::Int(v)),
            Col::U8(a) => cell!(a, v, Val::UInt(v.into())),
            Col::U16(a) => cell!(a, v, Val::UInt(v.into())),
            Col::U32(a) => cell!(a, v, Val::UInt(v.into())),
            Col::U64(a) => cell!(a, v, Val::UInt(v)),
            Col::F16(a) => cell!(a, v, Val::Float(v.to_f64())),
            Col::F32(a) => cell!(a, v, Val::Float(v.into())),
            Col::F64(a) => cell!(a, v, Val::Float(v)),
            Col::Bool(a) => cell!(a, v, Val::Bool(v)),
            Col::Str(a) => cell!(a, v, Val::Bytes(v.as_bytes())),
            Col::LargeStr(a) => cell!(a, v, Val::Bytes(v.as_bytes())),
            Col::StrView(a) => cell!(a, v, Val::Bytes(v.as_bytes())),
            Col::Bin(a) => cell!(a, v, Val::Bytes(v)),
            Col::LargeBin(a) => cell!(a, v, Val::Bytes(v)),
            Col::BinView(a) => cell!(a, v, Val::Bytes(v)),
            Col::FixedBin(a) => cell!(a, v, Val::Bytes(v)),
            Col::Dict {
                array,
                keys,
                values,
            } => {
                if array.is_null(i) {
                    Val::Null
                } else {
                    keys.get(i).map_or(Val::Null, |&k| values.get(k))
                }
            }
            Col::List { .. } => Val::Null,
        }
    }

    /// The elements of row `i` of a list column (none for a null list), each passed to
    /// `f`; a column of single values passes its one cell.
    pub fn list(&self, i: usize, mut f: impl FnMut(Val<'a>)) {
        match self {
            Col::List {
                array,
                offsets,
                values,
            } => {
                if array.is_null(i) {
                    return;
                }
                if let (Some(&start), Some(&end)) = (offsets.get(i), offsets.get(i + 1)) {
                    (start..end).for_each(|j| f(values.get(j)));
                }
            }
            _ => f(self.get(i)),
        }
    }
}

/// How a label cell maps to 0/1 (as the CSV reader's rule of the same name).
#[derive(Debug, Clone)]
pub(super) enum LabelRule {
    ZeroOne,
    Positive(HashSet<Vec<u8>>),
    Threshold(f64),
}

impl LabelRule {
    /// The label of `v`; on error what was expected.
    pub fn label(&self, v: Val<'_>) -> std::result::Result<f32, &'static str> {
        let one = match self {
            LabelRule::Positive(set) => v.with_text(|t| set.contains(t)),
            LabelRule::Threshold(t) => v.number().ok_or("a number")? >= *t,
            LabelRule::ZeroOne => match v.number() {
                Some(0.0) => false,
                Some(1.0) => true,
                _ => return Err("0 or 1"),
            },
        };
        Ok(if one { 1.0 } else { 0.0 })
    }
}

/// Calls `f` with the key of each categorical value of row `i` of `col`: one for a
/// single-valued column (null is the empty text); with a separator, the pieces of the
/// text (trimmed, empty ones dropped) or a list's elements (trimmed, empty and null
/// ones dropped; elements are not split).
pub(super) fn keys(col: &Col<'_>, i: usize, separator: Option<&[u8]>, mut f: impl FnMut(u64)) {
    match (col, separator) {
        (_, None) => col.get(i).with_text(|t| f(key_of(t))),
        (Col::List { .. }, Some(_)) => col.list(i, |v| {
            v.with_text(|t| {
                if !t.is_empty() {
                    f(key_of(t))
                }
            })
        }),
        (_, Some(sep)) => col.get(i).with_text(|t| {
            split_on(t, sep)
                .map(<[u8]>::trim_ascii)
                .filter(|p| !p.is_empty())
                .for_each(|p| f(key_of(p)))
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int64Array, ListArray, StringArray};
    use arrow_schema::Field;
    use std::sync::Arc;

    #[test]
    fn integers_have_the_text_of_their_decimal() {
        for n in [0i64, 7, -7, 1234567890123, i64::MIN, i64::MAX] {
            Val::Int(n).with_text(|t| assert_eq!(t, n.to_string().as_bytes()));
        }
        Val::UInt(u64::MAX).with_text(|t| assert_eq!(t, u64::MAX.to_string().as_bytes()));
        Val::Bytes(b"  a b ").with_text(|t| assert_eq!(t, b"a b"));
        Val::Null.with_text(|t| assert_eq!(t, b""));
    }

    #[test]
    fn roles_refuse_the_wrong_types() {
        let list = DataType::List(Arc::new(Field::new("item", DataType::Utf8, true)));
        assert!(Role::Dense.check(&DataType::Utf8).is_err());
        assert!(Role::Dense.check(&DataType::Int32).is_ok());
        assert!(Role::Sparse { multi: false }
            .check(&DataType::Float64)
            .is_err());
        let e = Role::Sparse { multi: false }.check(&list).unwrap_err();
        assert!(e.contains("separator"), "{e}");
        assert!(Role::Sparse { multi: true }.check(&list).is_ok());
        assert!(Role::Label { positive: true }
            .check(&DataType::Float32)
            .is_err());
        assert!(Role::Label { positive: false }
            .check(&DataType::Boolean)
            .is_ok());
        let nested = DataType::List(Arc::new(Field::new("item", list, true)));
        assert!(Role::Sparse { multi: true }.check(&nested).is_err());
    }

    #[test]
    fn keys_follow_the_csv_rules() {
        let strings: ArrayRef = Arc::new(StringArray::from(vec![Some(" a| b||"), None]));
        let col = Col::new(&strings).unwrap();
        let mut got = vec![];
        keys(&col, 0, Some(b"|"), |k| got.push(k));
        assert_eq!(got, vec![key_of(b"a"), key_of(b"b")]);
        got.clear();
        keys(&col, 1, None, |k| got.push(k));
        assert_eq!(got, vec![key_of(b"")]);
        let list: ArrayRef = Arc::new(ListArray::from_iter_primitive::<Int64Type, _, _>(vec![
            Some(vec![Some(3), None, Some(-4)]),
            None,
        ]));
        let col = Col::new(&list).unwrap();
        got.clear();
        keys(&col, 0, Some(b","), |k| got.push(k));
        assert_eq!(got, vec![key_of(b"3"), key_of(b"-4")]);
        got.clear();
        keys(&col, 1, Some(b","), |k| got.push(k));
        assert!(got.is_empty());
        let ints: ArrayRef = Arc::new(Int64Array::from(vec![1, 2]));
        let rule = LabelRule::ZeroOne;
        let col = Col::new(&ints).unwrap();
        assert_eq!(rule.label(col.get(0)), Ok(1.0));
        assert_eq!(rule.label(col.get(1)), Err("0 or 1"));
    }
}
