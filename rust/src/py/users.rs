//! `kafkalite._native.users_*`: the SASL/SCRAM users of a data directory (`crate::coordination::users` owns the
//! file and its format; `kafkalite.users` and `kafkalite users` call these).

use std::path::PathBuf;

use pyo3::prelude::*;

use crate::coordination::users::{self, Mechanism};
use crate::storage::error::Error;

fn mechanisms(names: &[String]) -> Result<Vec<Mechanism>, Error> {
    names
        .iter()
        .map(|n| {
            Mechanism::from_name(n).ok_or_else(|| {
                Error::config(format!("unknown SASL mechanism {n:?}: use SCRAM-SHA-256 or SCRAM-SHA-512"))
            })
        })
        .collect()
}

/// Add a user, or replace its credentials for `mechanisms`; the key derivation runs without the GIL.
#[pyfunction]
fn users_add(
    py: Python<'_>,
    data_dir: PathBuf,
    name: String,
    password: Vec<u8>,
    mechanisms: Vec<String>,
    iterations: u32,
) -> PyResult<()> {
    let mechanisms = self::mechanisms(&mechanisms)?;
    py.detach(|| users::add(&data_dir, &name, &password, &mechanisms, iterations))?;
    Ok(())
}

/// A user and its (mechanism, iterations) pairs.
type UserEntry = (String, Vec<(&'static str, u32)>);

/// Every user: `[(name, [(mechanism, iterations), ...]), ...]`.
#[pyfunction]
fn users_list(data_dir: PathBuf) -> PyResult<Vec<UserEntry>> {
    Ok(users::list(&data_dir)?
        .into_iter()
        .map(|(user, creds)| (user, creds.into_iter().map(|(m, i)| (m.name(), i)).collect()))
        .collect())
}

/// Delete a user; False when there was none.
#[pyfunction]
fn users_delete(data_dir: PathBuf, name: String) -> PyResult<bool> {
    Ok(users::delete(&data_dir, &name)?)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(users_add, m)?)?;
    m.add_function(wrap_pyfunction!(users_list, m)?)?;
    m.add_function(wrap_pyfunction!(users_delete, m)?)?;
    m.add("USERS_FILE", crate::storage::files::USERS_FILE)?;
    m.add("SCRAM_MECHANISMS", Mechanism::ALL.map(Mechanism::name).to_vec())?;
    m.add("SCRAM_DEFAULT_ITERATIONS", users::DEFAULT_ITERATIONS)?;
    m.add("SCRAM_MIN_ITERATIONS", users::MIN_ITERATIONS)?;
    m.add("SCRAM_MAX_ITERATIONS", users::MAX_ITERATIONS)?;
    Ok(())
}
