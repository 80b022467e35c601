//! The metadata file, `.kafkalite-topics.json`, on disk: read without following links, checked
//! (a hand-damaged entry is an `Error::CorruptMetadata` naming the file, the topic and the fix),
//! and replaced atomically under the data directory's admin lock in the format `datadir.py`
//! has always written.

use std::io::Read;
use std::path::Path;

use serde_json::Value;

use crate::checkpoint::write_atomically;
use crate::error::{Error, IoContext, Result};
use crate::files::{ADMIN_LOCK_FILE, TOPICS_FILE};

use super::{validate_topic_name, MAX_PARTITIONS};

/// The parsed and checked metadata file at `meta`, None when there is none. Never follows a
/// link; damage is an `Error::CorruptMetadata` naming the file (`check_metadata`).
pub fn read_metadata(meta: &Path) -> Result<Option<Value>> {
    let mut file = match crate::nofollow::open_read(meta, "the topic metadata") {
        Ok(file) => file,
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut raw = Vec::new();
    file.read_to_end(&mut raw).context_at(meta, || format!("cannot read {}", meta.display()))?;
    let data: Value = serde_json::from_slice(&raw).map_err(|e| {
        Error::CorruptMetadata(format!(
            "{} is damaged ({e}); restore it from a backup or re-create the topics",
            meta.display()
        ))
    })?;
    check_metadata(meta, &data)?;
    Ok(Some(data))
}

/// The shape every reader relies on: `{"topics": {name: {"partitions": 1..MAX_PARTITIONS,
/// "config": {...}}}, "config": {...} or null}`, topic names by Kafka's rules (so no folder
/// leaves the data directory). A hand-edited entry of the wrong shape is refused here, naming
/// the file and the topic, not an odd error in whichever client reads it first.
pub fn check_metadata(meta: &Path, data: &Value) -> Result<()> {
    let Some(topics) = data.get("topics").and_then(Value::as_object) else {
        return Err(Error::CorruptMetadata(format!(
            "{} is damaged (no topics table); restore it from a backup or re-create the topics",
            meta.display()
        )));
    };
    match data.get("config") {
        None | Some(Value::Null) | Some(Value::Object(_)) => {}
        Some(other) => {
            return Err(Error::CorruptMetadata(format!(
                "{} is damaged (\"config\": {}, not an object); fix it by hand, restore the file from a backup or \
                 set the data directory config again",
                meta.display(),
                shown(other)
            )))
        }
    }
    for (name, entry) in topics {
        let partitions = entry.get("partitions");
        let problem = if validate_topic_name(name).is_err() {
            "is not a valid topic name (its folders would leave the data directory)".to_string()
        } else if !entry.is_object() {
            format!("is {} {}, not an object", type_name(entry), shown(entry))
        } else if !partitions.is_some_and(|p| p.is_i64() || p.is_u64()) {
            format!("has \"partitions\": {}, not an integer", partitions.map_or("None".to_string(), shown))
        } else if !partitions.and_then(Value::as_i64).is_some_and(|n| (1..=MAX_PARTITIONS as i64).contains(&n)) {
            format!("has \"partitions\": {}, outside 1..{MAX_PARTITIONS}", shown(partitions.unwrap_or(&Value::Null)))
        } else if entry.get("config").is_some_and(|c| !c.is_object()) {
            format!("has \"config\": {}, not an object", shown(&entry["config"]))
        } else {
            continue;
        };
        return Err(Error::CorruptMetadata(format!(
            "{} is damaged (topic {name:?} {problem}); fix that entry by hand, restore the file from a backup or \
             re-create the topic",
            meta.display()
        )));
    }
    Ok(())
}

/// A JSON value in an error message, cut at 100 characters (a damaged file may be huge).
fn shown(v: &Value) -> String {
    v.to_string().chars().take(100).collect()
}

/// The Python type a JSON value reads as, as datadir.py named it.
fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "NoneType",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float",
        Value::Number(_) => "int",
        Value::String(_) => "str",
        Value::Array(_) => "list",
        Value::Object(_) => "dict",
    }
}

/// Change the metadata of the data directory `dir` under its admin lock (an exclusive flock on
/// `.kafkalite-admin.lock`, never through a link): read and check it, hand it to `change`
/// (None when there is no file yet), check what comes back and replace the file atomically
/// (temp file, fsync, rename, fsync the directory) in the format datadir.py has always written
/// (`json.dumps(indent=1, sort_keys=True)`; serde_json's maps are sorted).
pub fn update_metadata<E: From<Error>>(
    dir: &Path,
    change: impl FnOnce(Option<Value>) -> std::result::Result<Value, E>,
) -> std::result::Result<(), E> {
    let lock = admin_lock(dir)?;
    let meta = dir.join(TOPICS_FILE);
    let data = change(read_metadata(&meta)?)?;
    check_metadata(&meta, &data)?;
    let pretty = serde_json::to_string_pretty(&data)
        .map_err(|e| Error::config(format!("cannot write {}: {e}", meta.display())))?;
    // serde_json indents by two spaces, json.dumps(indent=1) by one; JSON strings hold no raw
    // newline, so every line starts with indentation only.
    let text: Vec<String> = pretty
        .lines()
        .map(|line| {
            let body = line.trim_start_matches(' ');
            format!("{}{body}", " ".repeat((line.len() - body.len()) / 2))
        })
        .collect();
    write_atomically(dir, TOPICS_FILE, text.join("\n").as_bytes())?;
    drop(lock); // releases the flock
    Ok(())
}

/// The data directory's admin lock, held (exclusive flock on `.kafkalite-admin.lock`, never
/// through a link) until the returned file is dropped: it serializes every read-modify-write of
/// the data directory's own files (topics, users).
pub fn admin_lock(dir: &Path) -> Result<std::fs::File> {
    let lock_path = dir.join(ADMIN_LOCK_FILE);
    let lock = crate::nofollow::open(
        crate::nofollow::options().create(true).append(true).read(true),
        &lock_path,
        "the data directory's admin lock",
    )?;
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive)
        .map_err(|e| Error::io_at(&lock_path, format!("cannot lock {}", lock_path.display()), e.into()))?;
    Ok(lock)
}
