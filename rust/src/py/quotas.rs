//! `kafkalite._native.quotas_*`: the client quotas of a data directory (`crate::coordination::quotas` owns the
//! file, its format and Kafka's validation; `kafkalite.quotas` and `kafkalite quotas` call these).

use std::path::PathBuf;

use pyo3::prelude::*;

use crate::coordination::quotas::{self, Entity};
use crate::storage::error::Error;

/// An entity as (type, name or None for the default) pairs.
type Parts = Vec<(String, Option<String>)>;

fn entity(parts: &Parts) -> Result<Entity, Error> {
    Entity::from_parts(parts.iter().map(|(k, n)| (k.as_str(), n.as_deref()))).map_err(Error::config)
}

fn parts(e: &Entity) -> Parts {
    e.parts().into_iter().map(|(k, n)| (k.to_string(), n.map(str::to_string))).collect()
}

/// An entity and its (key, value) quotas.
type QuotaEntry = (Parts, Vec<(String, f64)>);

/// Every entity's quotas: `[([(type, name)], [(key, value)]), ...]`.
#[pyfunction]
fn quotas_list(data_dir: PathBuf) -> PyResult<Vec<QuotaEntry>> {
    Ok(quotas::read(&data_dir)?.iter().map(|(e, values)| (parts(e), values.clone().into_iter().collect())).collect())
}

/// Set (a value) or remove (None) `changes` of one entity, validated as Kafka validates them.
#[pyfunction]
fn quotas_alter(data_dir: PathBuf, entity: Parts, changes: Vec<(String, Option<f64>)>) -> PyResult<()> {
    let entity = self::entity(&entity)?;
    let mut checked = Vec::with_capacity(changes.len());
    for (key, value) in changes {
        if let Some(why) = entity.invalid_value(&key, value.unwrap_or(1.0)) {
            return Err(Error::config(why).into());
        }
        checked.push((entity.clone(), key, value));
    }
    quotas::alter(&data_dir, &checked)?;
    Ok(())
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(quotas_list, m)?)?;
    m.add_function(wrap_pyfunction!(quotas_alter, m)?)?;
    m.add("QUOTAS_FILE", crate::storage::files::QUOTAS_FILE)?;
    Ok(())
}
