//! Records from Python (`Record` objects, or columns of values, keys and headers for
//! `Log.append_values`), held so their bytes can be borrowed with the GIL released, and seen
//! as the engine's `RecordInput`s.

use pyo3::prelude::*;
use pyo3::types::{PyAny, PyBytes};

use crate::storage::record::{Header, RecordInput};

use super::super::record::{header_slices, held_headers, to_bytes, HeldHeaders};

/// Records given as columns: `values` (bytes or None each), `keys` and `headers` (None, or one
/// entry per value), held so their bytes can be borrowed without the GIL.
pub(super) fn held_columns<'py>(
    values: &Bound<'py, PyAny>,
    keys: Option<&Bound<'py, PyAny>>,
    headers: Option<&Bound<'py, PyAny>>,
    timestamp: i64,
) -> PyResult<Vec<HeldRecord<'py>>> {
    let values = values.try_iter()?.collect::<PyResult<Vec<_>>>()?;
    let keys = column(keys, "keys", values.len())?;
    let headers = column(headers, "headers", values.len())?;
    let mut held = Vec::with_capacity(values.len());
    for (i, value) in values.into_iter().enumerate() {
        held.push(HeldRecord {
            key: to_bytes(keys.as_ref().map(|k| k[i].clone()), "key")?,
            value: to_bytes(Some(value), "value")?,
            headers: held_headers(headers.as_ref().map(|h| &h[i]))?,
            timestamp,
        });
    }
    Ok(held)
}

/// An optional column of one entry per value.
pub(super) fn column<'py>(
    c: Option<&Bound<'py, PyAny>>,
    name: &str,
    values: usize,
) -> PyResult<Option<Vec<Bound<'py, PyAny>>>> {
    let Some(c) = c.filter(|c| !c.is_none()) else { return Ok(None) };
    let items = c.try_iter()?.collect::<PyResult<Vec<_>>>()?;
    if items.len() != values {
        let n = items.len();
        return Err(
            crate::Error::config(format!("{name} has {n} entries for {values} values; give one per value")).into()
        );
    }
    Ok(Some(items))
}

pub(super) fn held_header_slices<'a>(held: &'a [HeldRecord<'_>]) -> PyResult<Vec<Vec<Header<'a>>>> {
    held.iter().map(|h| header_slices(&h.headers)).collect()
}

/// Held records as the engine's inputs (borrowing their bytes).
pub(super) fn record_inputs<'a>(
    held: &'a [HeldRecord<'_>],
    header_slices: &'a [Vec<Header<'a>>],
) -> Vec<RecordInput<'a>> {
    held.iter()
        .zip(header_slices)
        .map(|(h, hs)| RecordInput {
            key: h.key.as_ref().map(|b| b.as_bytes()),
            value: h.value.as_ref().map(|b| b.as_bytes()),
            headers: hs,
            timestamp: h.timestamp,
        })
        .collect()
}

/// Held references to one record's Python objects, so their bytes can be borrowed without the GIL.
pub(super) struct HeldRecord<'py> {
    pub(super) key: Option<Bound<'py, PyBytes>>,
    pub(super) value: Option<Bound<'py, PyBytes>>,
    pub(super) headers: HeldHeaders<'py>,
    pub(super) timestamp: i64,
}
