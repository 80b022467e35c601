//! `_native.topic_config_defs()` and friends: the engine's topic and data-directory config
//! tables (`crate::storage::topic_config`) and their validation and resolution, for Python's `datadir.py`
//! and docs generator. Conversions only; the rules live in the engine.

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use serde_json::{Map, Value};

use crate::storage::options::LogConfig;
use crate::storage::record::{Compression, TimestampType};
use crate::storage::topic_config::{self, ConfigDef, Kind};

/// A Python config value as the engine's JSON value. Python's `datadir.py` has already refused
/// other types with a typed error naming the key; this is the backstop.
fn to_value(obj: &Bound<'_, PyAny>) -> PyResult<Value> {
    if obj.is_none() {
        return Ok(Value::Null);
    }
    if let Ok(b) = obj.cast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if obj.is_instance_of::<PyInt>() {
        // Integers past i64 travel as text, so the engine reports them as out of range.
        return Ok(match obj.extract::<i64>() {
            Ok(n) => Value::from(n),
            Err(_) => Value::String(obj.str()?.to_string()),
        });
    }
    if let Ok(f) = obj.cast::<PyFloat>() {
        let f = f.value();
        return Ok(serde_json::Number::from_f64(f).map(Value::Number).unwrap_or(Value::String(f.to_string())));
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(Value::String(s.to_str()?.to_string()));
    }
    if obj.is_instance_of::<PyList>() || obj.is_instance_of::<PyTuple>() {
        return obj.try_iter()?.map(|item| to_value(&item?)).collect::<PyResult<Vec<_>>>().map(Value::Array);
    }
    Err(crate::py::errors::InvalidTypeError::new_err(format!(
        "config values are str, int, float or bool, not {}",
        obj.get_type().name()?
    )))
}

fn to_map(config: Option<&Bound<'_, PyDict>>) -> PyResult<Map<String, Value>> {
    let mut out = Map::new();
    if let Some(config) = config {
        for (k, v) in config.iter() {
            let key = k.extract::<String>()?;
            // Name the key: a hand-edited metadata file may hold any JSON value.
            let value = to_value(&v)
                .map_err(|e| crate::py::errors::InvalidTypeError::new_err(format!("{key}: {}", e.value(v.py()))))?;
            out.insert(key, value);
        }
    }
    Ok(out)
}

pub(super) fn to_py<'py>(py: Python<'py>, value: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        Value::Number(n) => match n.as_i64() {
            Some(i) => i.into_pyobject(py)?.into_any(),
            None => n.as_f64().unwrap_or(f64::NAN).into_pyobject(py)?.into_any(),
        },
        Value::String(s) => PyString::new(py, s).into_any(),
        Value::Array(items) => {
            PyList::new(py, items.iter().map(|v| to_py(py, v)).collect::<PyResult<Vec<_>>>()?)?.into_any()
        }
        Value::Object(map) => map_to_py(py, map)?.into_any(),
    })
}

fn map_to_py<'py>(py: Python<'py>, map: &Map<String, Value>) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (k, v) in map {
        d.set_item(k, to_py(py, v)?)?;
    }
    Ok(d)
}

fn def_to_py<'py>(py: Python<'py>, def: &ConfigDef) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("name", def.name)?;
    d.set_item("broker_name", def.broker_name)?;
    d.set_item("type", def.kind.type_name())?;
    d.set_item("default", to_py(py, &def.default.to_value())?)?;
    d.set_item("doc", def.doc)?;
    d.set_item("applied", def.applied)?;
    let (min, max, choices): (Option<i64>, Option<i64>, Option<Vec<&str>>) = match def.kind {
        Kind::Int { min, max } => (Some(min), Some(max), None),
        Kind::Choice(c) | Kind::List(c) => (None, None, Some(c.to_vec())),
        Kind::Ratio | Kind::Bool | Kind::Text => (None, None, None),
    };
    d.set_item("min", min)?;
    d.set_item("max", max)?;
    d.set_item("choices", choices)?;
    Ok(d)
}

/// The topic config table: a list of dicts (name, broker_name, type, default, min, max,
/// choices, doc), in the engine's order.
#[pyfunction]
pub fn topic_config_defs(py: Python<'_>) -> PyResult<Vec<Bound<'_, PyDict>>> {
    topic_config::TOPIC_CONFIGS.iter().map(|d| def_to_py(py, d)).collect()
}

/// The data directory's own config table (its topic defaults are the topic table's broker names).
#[pyfunction]
pub fn dir_config_defs(py: Python<'_>) -> PyResult<Vec<Bound<'_, PyDict>>> {
    topic_config::DIR_CONFIGS.iter().map(|d| def_to_py(py, d)).collect()
}

/// Check topic config (Kafka's names); returns it normalised.
#[pyfunction]
pub fn validate_topic_config<'py>(py: Python<'py>, config: &Bound<'py, PyDict>) -> PyResult<Bound<'py, PyDict>> {
    map_to_py(py, &topic_config::validate_topic_config(&to_map(Some(config))?)?)
}

/// `topic_config::warn_unapplied`: a WARNING for each config of `after` (new in it) that
/// kafkalite stores but does not apply; `what` names the topic or the data directory.
#[pyfunction]
pub fn warn_unapplied(what: &str, before: &Bound<'_, PyDict>, after: &Bound<'_, PyDict>) -> PyResult<()> {
    topic_config::warn_unapplied(what, &to_map(Some(before))?, &to_map(Some(after))?);
    Ok(())
}

/// Check data-directory config (a broker's names); returns it normalised.
#[pyfunction]
pub fn validate_dir_config<'py>(py: Python<'py>, config: &Bound<'py, PyDict>) -> PyResult<Bound<'py, PyDict>> {
    map_to_py(py, &topic_config::validate_dir_config(&to_map(Some(config))?)?)
}

/// A topic's full config: its own keys, else the data directory's defaults, else Kafka's.
#[pyfunction]
#[pyo3(signature = (dir_config, topic_config))]
pub fn effective_topic_config<'py>(
    py: Python<'py>,
    dir_config: Option<&Bound<'py, PyDict>>,
    topic_config: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyDict>> {
    map_to_py(py, &topic_config::effective_config(&to_map(dir_config)?, &to_map(topic_config)?))
}

/// `Log` keyword arguments for one topic's partitions, resolved by `topic_config::resolve` for
/// a writer whose own codec is `producer_compression`.
#[pyfunction]
#[pyo3(signature = (dir_config, topic_config, producer_compression=None))]
pub fn topic_log_options<'py>(
    py: Python<'py>,
    dir_config: Option<&Bound<'py, PyDict>>,
    topic_config: Option<&Bound<'py, PyDict>>,
    producer_compression: Option<&str>,
) -> PyResult<Bound<'py, PyDict>> {
    let producer = match producer_compression {
        Some(name) => Compression::parse(name)?,
        None => Compression::None,
    };
    let c: LogConfig = topic_config::resolve(&to_map(dir_config)?, &to_map(topic_config)?, producer)?;
    let d = PyDict::new(py);
    d.set_item("segment_bytes", c.segment_bytes)?;
    d.set_item("segment_ms", c.segment_ms)?;
    d.set_item("retention_ms", c.retention_ms)?;
    d.set_item("retention_bytes", c.retention_bytes)?;
    d.set_item("max_message_bytes", c.max_message_bytes)?;
    d.set_item(
        "timestamp_type",
        match c.timestamp_type {
            TimestampType::CreateTime => "create",
            TimestampType::LogAppendTime => "log_append",
        },
    )?;
    d.set_item("compression", c.compression.name())?;
    d.set_item("compact", c.compact)?;
    Ok(d)
}
