//! `kafkalite._native.metadata_changes` / `read_metadata` / `update_metadata` and the topic
//! operations: the data directory's topic metadata through the engine (`datadir.rs` reads,
//! checks and writes it); this only converts between JSON values and Python objects.

use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use serde_json::{Map, Value};

use crate::py::errors::{InvalidTopicError, InvalidTopicTypeError, InvalidTypeError};
use crate::py::topic_config::to_py;
use crate::storage::datadir;

/// The parsed, checked metadata file at `path`, None when there is none.
#[pyfunction]
pub fn read_metadata(py: Python<'_>, path: PathBuf) -> PyResult<Option<Bound<'_, PyAny>>> {
    let data = py.detach(|| datadir::read_metadata(&path))?;
    data.map(|d| to_py(py, &d)).transpose()
}

/// What changed in the metadata of data directory `dir` since `position` (what the last call
/// returned; None: read everything): `(position, "same", None)`, `(position, "entries", JSON of
/// [entry, ...])` (journal entries to apply in order: `{"topics": {name: entry or null}}` and/or
/// `{"config": {...}}`), or `(position, "whole", JSON of the metadata, or None)`. Checked JSON
/// text, for `json.loads`: building thousands of topics' dicts in C is several times faster than
/// through the binding.
#[pyfunction]
#[pyo3(signature = (dir, position=None))]
pub fn metadata_changes(
    py: Python<'_>,
    dir: PathBuf,
    position: Option<Vec<i64>>,
) -> PyResult<(Vec<i64>, &'static str, Option<String>)> {
    let since = position.as_deref().and_then(datadir::Position::from_words);
    let (pos, kind, payload) = py.detach(|| -> crate::storage::error::Result<_> {
        let (pos, delta) = datadir::changes_since(&dir, since.as_ref())?;
        let (kind, payload) = match delta {
            datadir::Delta::Unchanged => ("same", None),
            datadir::Delta::Entries(entries) => ("entries", Some(Value::Array(entries).to_string())),
            datadir::Delta::Whole(data) => ("whole", data.map(|d| d.to_string())),
        };
        Ok((pos, kind, payload))
    })?;
    Ok((pos.to_words(), kind, payload))
}

/// `DataDir::create_checked_topic`: create a topic whose config Python checked already
/// (`validate_topic_config`, checked again here); False when it exists.
#[pyfunction]
pub fn create_topic(
    py: Python<'_>,
    dir: PathBuf,
    name: String,
    partitions: i32,
    config: Bound<'_, PyDict>,
) -> PyResult<bool> {
    let Value::Object(config) = to_json(config.as_any())? else { unreachable!("a dict is a JSON object") };
    let checked = crate::storage::topic_config::validate_topic_config(&config)?;
    Ok(py.detach(|| datadir::DataDir::new(&dir)?.create_checked_topic(&name, partitions, checked))?)
}

/// Under the admin lock of the data directory `dir`: read the metadata, call `change(dict or
/// None)`, which returns the new metadata, check it and replace the file atomically. The lock
/// is waited for without the GIL (another thread of this process may hold it and need the GIL).
#[pyfunction]
pub fn update_metadata(py: Python<'_>, dir: PathBuf, change: Py<PyAny>) -> PyResult<()> {
    py.detach(|| {
        datadir::update_metadata(&dir, |data| {
            Python::attach(|py| {
                let arg = data.map(|d| to_py(py, &d)).transpose()?;
                let result = change.bind(py).call1((arg,))?;
                to_json(&result)
            })
        })
    })
}

/// A Python value as JSON, as `json.dumps` would write it; anything else is an InvalidTypeError.
fn to_json(obj: &Bound<'_, PyAny>) -> PyResult<Value> {
    if obj.is_none() {
        return Ok(Value::Null);
    }
    if let Ok(b) = obj.cast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if obj.is_instance_of::<PyInt>() {
        return obj.extract::<i64>().map(Value::from).map_err(|_| {
            InvalidTypeError::new_err(format!("the topic metadata cannot hold the integer {obj} (outside 64 bits)"))
        });
    }
    if let Ok(f) = obj.cast::<PyFloat>() {
        return serde_json::Number::from_f64(f.value()).map(Value::Number).ok_or_else(|| {
            InvalidTypeError::new_err(format!("the topic metadata cannot hold the float {obj} (not finite)"))
        });
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(Value::String(s.to_str()?.to_string()));
    }
    if obj.is_instance_of::<PyList>() || obj.is_instance_of::<PyTuple>() {
        return obj.try_iter()?.map(|item| to_json(&item?)).collect::<PyResult<Vec<_>>>().map(Value::Array);
    }
    if let Ok(d) = obj.cast::<PyDict>() {
        let mut map = Map::new();
        for (k, v) in d.iter() {
            let Ok(key) = k.extract::<String>() else {
                let kind = k.get_type().name()?;
                return Err(InvalidTypeError::new_err(format!("the topic metadata's keys are str, not {kind}")));
            };
            map.insert(key, to_json(&v)?);
        }
        return Ok(Value::Object(map));
    }
    Err(InvalidTypeError::new_err(format!("the topic metadata cannot hold a {}", obj.get_type().name()?)))
}

/// `DataDir::open`: what every embedded client does first with an existing data directory, as
/// the server's start does (finish a topic delete a kill interrupted).
#[pyfunction]
pub fn open_data_dir(py: Python<'_>, dir: PathBuf) -> PyResult<()> {
    py.detach(|| datadir::DataDir::open(&dir))?;
    Ok(())
}

/// `DataDir::broker_owned`: a Kafka broker's log directory, which kafkalite only reads.
#[pyfunction]
pub fn broker_owned(py: Python<'_>, dir: PathBuf) -> PyResult<bool> {
    // `DataDir::new` would create a missing directory: a missing one is nobody's.
    Ok(dir.is_dir() && py.detach(|| datadir::DataDir::new(&dir)?.broker_owned())?)
}

/// `datadir::partition_folder`: (topic, partition) of a `<topic>-<partition>` folder name.
#[pyfunction]
pub fn partition_folder(name: &str) -> Option<(String, i32)> {
    datadir::partition_folder(name)
}

/// `datadir::topic_name_problem` for Python's `datadir.validate_topic_name`: the name back, or
/// InvalidTopicTypeError for a value that is not a str, InvalidTopicError for a broken rule.
#[pyfunction]
pub fn validate_topic_name<'py>(name: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyString>> {
    let Ok(text) = name.cast::<PyString>() else {
        let shown: String = name.repr()?.to_str()?.chars().take(100).collect();
        return Err(InvalidTopicTypeError::new_err(format!(
            "topic names are str, not {} ({shown})",
            name.get_type().name()?
        )));
    };
    // A str UTF-8 cannot hold (a lone surrogate) is not ASCII either: lossy keeps it refused.
    match datadir::topic_name_problem(&text.to_string_lossy()) {
        None => Ok(text.clone()),
        Some(why) => Err(InvalidTopicError::new_err(why)),
    }
}

/// `datadir::refuse_internal`: InvalidTopicError for a destructive call (`what`) on an internal
/// topic, the rule the server's DeleteRecords/DeleteTopics apply (Admin.delete_records).
#[pyfunction]
pub fn refuse_internal(topic: &str, what: &str) -> PyResult<()> {
    datadir::refuse_internal(topic, what)?;
    Ok(())
}

/// `DataDir::delete_topic`: what `Admin.delete_topic` and the server's DeleteTopics do (folders
/// renamed under each partition's append lock, then removed).
#[pyfunction]
pub fn delete_topic(py: Python<'_>, dir: PathBuf, name: String) -> PyResult<()> {
    py.detach(|| datadir::DataDir::new(&dir)?.delete_topic(&name))?;
    Ok(())
}

/// `DataDir::create_partitions`: grow a topic to `total` partitions (Admin.create_partitions,
/// the server's CreatePartitions).
#[pyfunction]
pub fn create_partitions(py: Python<'_>, dir: PathBuf, name: String, total: i32) -> PyResult<()> {
    py.detach(|| datadir::DataDir::new(&dir)?.create_partitions(&name, total, false))?;
    Ok(())
}

/// `DataDir::alter_topic_config`: set the `set` keys (values already checked by the caller) and
/// drop the `remove` keys of a topic's own config, checked again and stored under the metadata
/// lock (Admin.alter_config; the server's AlterConfigs/IncrementalAlterConfigs use the same).
#[pyfunction]
pub fn alter_topic_config(
    py: Python<'_>,
    dir: PathBuf,
    name: String,
    set: Bound<'_, PyDict>,
    remove: Vec<String>,
) -> PyResult<()> {
    let Value::Object(set) = to_json(set.as_any())? else { unreachable!("a dict is a JSON object") };
    py.detach(|| {
        datadir::DataDir::new(&dir)?.alter_topic_config(&name, false, |current| {
            let mut config = current.clone();
            config.extend(set);
            for key in &remove {
                config.remove(key);
            }
            Ok(config)
        })
    })?;
    Ok(())
}
