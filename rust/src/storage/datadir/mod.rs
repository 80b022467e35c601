//! A data directory's topic metadata: `{"version": 1, "topics": {name: {"partitions": n,
//! "config": {...}}}, "config": {...}}`, kept as a snapshot (`.kafkalite-topics.json`) and a
//! journal of the changes since (`.kafkalite-topics.journal`), changed under an exclusive flock
//! on `.kafkalite-admin.lock`, one appended entry per change (`metadata_file` says how).
//!
//! This is the one reader, checker and writer of those files: the wire-protocol server uses it
//! directly, Python's `datadir.py` through `kafkalite._native` (`metadata_changes`,
//! `update_metadata` and the topic operations). A hand-damaged file is an
//! `Error::CorruptMetadata` naming the file, the topic and the fix, whichever of them reads it.
//!
//! Here: `DataDir`, the topics' operations (create, delete, add partitions, change config) and a
//! topic's resolved config. `metadata_file` reads, checks and writes the metadata, `journal` the
//! journal's bytes; `topic_names` holds Kafka's topic-name rules and the internal topics.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Map, Value};

use crate::storage::error::{Error, IoContext, Result};
use crate::storage::files::{
    APPEND_LOCK_FILE, KAFKA_META_PROPERTIES, KAFKA_PARTITION_FILES, TOPICS_FILE, WRITERS_FILE,
};
use crate::storage::options::LogConfig;
use crate::storage::record::Compression;
use crate::storage::topic_config;

mod journal;
mod metadata_file;
mod topic_names;

pub use metadata_file::{
    admin_lock, change_metadata, changes_since, check_metadata, metadata_stamp, read_metadata, update_metadata,
    with_metadata, Delta, MetadataStamp, Position, Write, COMPACT_MIN_BYTES,
};
pub use topic_names::{
    is_internal, partition_folder, refuse_internal, topic_name_problem, validate_topic_name, INTERNAL_TOPICS,
    OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC,
};

/// The most partitions a topic may have (`topic_config::MAX_PARTITIONS`).
pub const MAX_PARTITIONS: i32 = topic_config::MAX_PARTITIONS as i32;

/// One topic as the metadata file describes it. `discovered` topics come from the folder
/// names of a Kafka broker's log directory (`DataDir::broker_owned`): read-only.
#[derive(Clone, Debug, PartialEq)]
pub struct TopicMeta {
    pub partitions: i32,
    pub config: Map<String, Value>,
    pub discovered: bool,
}

/// The data directory of one broker: where topics live and how they are described.
#[derive(Clone, Debug)]
pub struct DataDir {
    path: PathBuf,
}

impl DataDir {
    pub fn new(path: impl AsRef<Path>) -> Result<DataDir> {
        let path = path.as_ref();
        std::fs::create_dir_all(path).context(|| format!("cannot create data directory {}", path.display()))?;
        let path = path.canonicalize().context(|| format!("cannot resolve {}", path.display()))?;
        Ok(DataDir { path })
    }

    /// The data directory as the server (`Broker::open`) and every embedded client (Python's
    /// `DataDir`, which Admin, Producer, Consumer and the Spark paths build on, through
    /// `_native.open_data_dir`) start using it: a topic delete killed between its folder renames
    /// and its metadata write is finished first (`finish_interrupted_deletes`), so no client sees
    /// the topic listed with its data gone. Failing that (a read-only directory) is logged, not
    /// fatal: reading is still possible, and the next opener with write access finishes it.
    pub fn open(path: impl AsRef<Path>) -> Result<DataDir> {
        let dir = DataDir::new(path)?;
        if let Err(e) = dir.finish_interrupted_deletes() {
            ::log::warn!(target: "kafkalite::admin", "cannot finish an interrupted topic delete in {}: {e}", dir.path.display());
        }
        Ok(dir)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn metadata_path(&self) -> PathBuf {
        self.path.join(TOPICS_FILE)
    }

    pub fn partition_path(&self, topic: &str, partition: i32) -> PathBuf {
        self.path.join(format!("{topic}-{partition}"))
    }

    /// Every topic: from the metadata, or discovered from folder names without any.
    pub fn topics(&self) -> Result<BTreeMap<String, TopicMeta>> {
        let listed = with_metadata(&self.path, |data| {
            let topics = data?.get("topics")?.as_object()?;
            Some(topics.iter().map(|(name, meta)| (name.clone(), topic_meta(meta))).collect())
        })?;
        listed.map_or_else(|| self.discovered(), Ok)
    }

    /// One topic (None when there is none), without copying the others.
    pub fn topic(&self, name: &str) -> Result<Option<TopicMeta>> {
        let listed =
            with_metadata(&self.path, |data| data.map(|d| d.get("topics").and_then(|t| t.get(name)).map(topic_meta)))?;
        match listed {
            Some(found) => Ok(found),
            None => Ok(self.discovered()?.remove(name)),
        }
    }

    /// The data directory's own config (broker names, as `kafkalite config` sets them; no
    /// defaults filled in): empty without metadata.
    pub fn dir_config(&self) -> Result<Map<String, Value>> {
        with_metadata(&self.path, |data| {
            data.and_then(|d| d.get("config").and_then(Value::as_object).cloned()).unwrap_or_default()
        })
    }

    /// The topics of a directory without metadata, from its `<topic>-<partition>` folders:
    /// `discovered` (read-only) in a broker's log directory; otherwise folders that kafkalite's
    /// `Log` made, which the first metadata write records as topics (`update`).
    fn discovered(&self) -> Result<BTreeMap<String, TopicMeta>> {
        let broker = self.broker_owned()?;
        let mut found = BTreeMap::new();
        for (topic, partition) in self.partition_folders()? {
            let meta =
                found.entry(topic).or_insert(TopicMeta { partitions: 0, config: Map::new(), discovered: broker });
            meta.partitions = meta.partitions.max(partition + 1);
        }
        Ok(found)
    }

    /// Every `<topic>-<partition>` folder at the top of the directory, as (topic, partition).
    fn partition_folders(&self) -> Result<Vec<(String, i32)>> {
        let entries = std::fs::read_dir(&self.path).context(|| format!("cannot list {}", self.path.display()))?;
        Ok(entries
            .flatten()
            .filter(|entry| entry.path().is_dir())
            .filter_map(|entry| partition_folder(&entry.file_name().to_string_lossy()))
            .collect())
    }

    /// A Kafka broker's log directory, which kafkalite only reads (the broker's metadata log owns
    /// its topics) until it is adopted: no kafkalite metadata, and the broker's `meta.properties`
    /// at the top or a partition folder holding a file only a broker writes
    /// (`KAFKA_PARTITION_FILES`). Partition folders alone do not make one: `Log("dir/t-0")`
    /// makes such a folder in a directory kafkalite then owns.
    pub fn broker_owned(&self) -> Result<bool> {
        if self.metadata_path().exists() {
            return Ok(false);
        }
        if self.path.join(KAFKA_META_PROPERTIES).exists() {
            return Ok(true);
        }
        Ok(self.partition_folders()?.iter().any(|(topic, partition)| {
            let folder = self.partition_path(topic, *partition);
            KAFKA_PARTITION_FILES.iter().any(|name| folder.join(name).exists())
        }))
    }

    /// Create a topic as `Admin.create_topic` does. `config` holds Kafka config strings.
    /// Returns false (and changes nothing) when the topic already exists.
    pub fn create_topic(&self, name: &str, partitions: i32, config: &BTreeMap<String, String>) -> Result<bool> {
        validate_topic_name(name)?;
        if !(1..=MAX_PARTITIONS).contains(&partitions) {
            return Err(Error::config(format!(
                "partitions must be between 1 and {MAX_PARTITIONS} (MAX_PARTITIONS), got {partitions}"
            )));
        }
        self.create_checked_topic(name, partitions, validate_config(config)?)
    }

    /// `create_topic` with config already checked (`topic_config::validate_topic_config`):
    /// Python's `Admin.create_topic`, which checks its own values first.
    pub fn create_checked_topic(&self, name: &str, partitions: i32, checked: Map<String, Value>) -> Result<bool> {
        validate_topic_name(name)?;
        if !(1..=MAX_PARTITIONS).contains(&partitions) {
            return Err(Error::config(format!(
                "partitions must be between 1 and {MAX_PARTITIONS} (MAX_PARTITIONS), got {partitions}"
            )));
        }
        let mut created = false;
        self.update(|topics, changed| {
            if topics.contains_key(name) {
                return Ok(());
            }
            if let Some(clash) = topics.keys().find(|t| collides(t, name)) {
                return Err(Error::InvalidTopic(format!(
                    "topic {name:?} collides with {clash:?} ('.' and '_' are the same to Kafka's metrics)"
                )));
            }
            self.create_partition_folders(name, 0..partitions)?;
            topic_config::warn_unapplied(&format!("topic {name:?}"), &Map::new(), &checked);
            changed.insert(name.to_string(), json!({"partitions": partitions, "config": checked}));
            created = true;
            Ok(())
        })?;
        Ok(created)
    }

    /// Delete a topic as `Admin.delete_topic` and Kafka's DeleteTopics do: under the metadata
    /// lock, each partition folder is renamed the way Kafka marks it (`<topic>-<p>.<id>-delete`)
    /// while holding its append lock, then the topic leaves the metadata and the renamed folders
    /// are removed. A shared writer checks under that lock that its folder is still the one it
    /// opened, so an append either finished before the rename (deleted with the topic) or fails
    /// with UnknownTopicOrPartition; none is acknowledged into the renamed folder. An exclusive
    /// writer holds the append lock for life: it is not waited for (its next append fails the
    /// same check).
    pub fn delete_topic(&self, name: &str) -> Result<()> {
        validate_topic_name(name)?;
        refuse_internal(name, "deleting the topic")?;
        let mut doomed = Vec::new();
        self.update(|topics, changed| {
            if !topics.contains_key(name) {
                return Err(self.unknown_topic(name));
            }
            self.unlist_topic(topics, changed, name, &mut doomed)
        })?;
        remove_doomed(&doomed);
        Ok(())
    }

    /// `delete_topic`'s step under the metadata lock: rename the topic's partition folders away
    /// (pushed on `doomed`) holding their append locks, then mark it deleted in `changed`.
    fn unlist_topic(
        &self,
        topics: &Map<String, Value>,
        changed: &mut Map<String, Value>,
        name: &str,
        doomed: &mut Vec<PathBuf>,
    ) -> Result<()> {
        let partitions = topics.get(name).and_then(|e| e["partitions"].as_i64()).unwrap_or(0) as i32;
        let mut held = Vec::new();
        let mut sources = Vec::new();
        for p in 0..partitions {
            let src = self.partition_path(name, p);
            if src.is_dir() {
                held.extend(hold_append_lock(&src)?);
                sources.push(src);
            }
        }
        for src in sources {
            let dst = PathBuf::from(format!("{}.{}-delete", src.display(), deletion_id()));
            std::fs::rename(&src, &dst).context_at(&src, || format!("cannot rename {}", src.display()))?;
            doomed.push(dst);
        }
        drop(held); // releases the append locks
        changed.insert(name.to_string(), Value::Null);
        Ok(())
    }

    /// Finish what a killed `delete_topic` left, as Kafka's log manager does at startup: a
    /// topic still listed while one of its partition folders exists only renamed away
    /// (`<topic>-<p>.<id>-delete`, no `<topic>-<p>`) was being deleted, so the delete is
    /// completed; every `-delete` folder is removed. A directory without kafkalite metadata
    /// (a Kafka broker's, read-only here) is left alone. Returns the topics whose delete it finished.
    pub fn finish_interrupted_deletes(&self) -> Result<Vec<String>> {
        let leftovers = |dir: &Path| -> Result<Vec<(PathBuf, String, i32)>> {
            let entries = std::fs::read_dir(dir).context(|| format!("cannot list {}", dir.display()))?;
            Ok(entries
                .flatten()
                .filter_map(|entry| {
                    let name = entry.file_name().to_string_lossy().into_owned();
                    let (folder, _id) = name.strip_suffix("-delete")?.rsplit_once('.')?;
                    let (topic, partition) = folder.rsplit_once('-')?;
                    let partition = partition.parse::<i32>().ok()?;
                    Some((entry.path(), topic.to_string(), partition))
                })
                .collect())
        };
        // Every client's open runs this: the directory listing first, the metadata parsed only
        // when there is something to finish.
        if leftovers(&self.path)?.is_empty() || !with_metadata(&self.path, |data| data.is_some())? {
            return Ok(Vec::new());
        }
        let mut finished = Vec::new();
        let mut doomed = Vec::new();
        self.update(|topics, changed| {
            for (_, topic, partition) in leftovers(&self.path)? {
                // Only a partition the listed topic has: a leftover of an older topic of the
                // same name (re-created with fewer partitions while another process was still
                // removing the old folders) must not delete the live one.
                let listed = topics.get(&topic).and_then(|e| e["partitions"].as_i64()).unwrap_or(0);
                let interrupted = i64::from(partition) < listed && !self.partition_path(&topic, partition).exists();
                if interrupted && !finished.contains(&topic) {
                    self.unlist_topic(topics, changed, &topic, &mut doomed)?;
                    finished.push(topic);
                }
            }
            Ok(())
        })?;
        for topic in &finished {
            ::log::warn!(target: "kafkalite::admin", "finished deleting topic {topic:?}, which an interrupted delete left half-deleted");
        }
        doomed.extend(leftovers(&self.path)?.into_iter().map(|(path, _, _)| path));
        remove_doomed(&doomed);
        Ok(finished)
    }

    /// Grow a topic to `total` partitions, as `Admin.create_partitions` and Kafka's
    /// CreatePartitions do (never shrink): `Error::InvalidConfig` when `total` is not larger than
    /// the current count or above MAX_PARTITIONS, `UnknownTopicOrPartition` for a missing topic.
    /// `validate_only` checks without changing anything.
    pub fn create_partitions(&self, name: &str, total: i32, validate_only: bool) -> Result<()> {
        validate_topic_name(name)?;
        // A group's partition of `__consumer_offsets` is its hash modulo 50: more partitions
        // would move the groups away from their committed offsets.
        refuse_internal(name, "adding partitions")?;
        if !(1..=MAX_PARTITIONS).contains(&total) {
            return Err(Error::config(format!(
                "partitions must be between 1 and {MAX_PARTITIONS} (MAX_PARTITIONS), got {total}"
            )));
        }
        let check = |topics: &Map<String, Value>| -> Result<i32> {
            let Some(entry) = topics.get(name) else { return Err(self.unknown_topic(name)) };
            let current = entry["partitions"].as_i64().unwrap_or(0) as i32;
            if total <= current {
                return Err(Error::config(format!(
                    "topic {name:?} has {current} partitions; the new total must be larger, got {total}"
                )));
            }
            Ok(current)
        };
        if validate_only {
            let empty = Map::new();
            return with_metadata(&self.path, |data| {
                check(data.and_then(|d| d["topics"].as_object()).unwrap_or(&empty)).map(|_| ())
            })?;
        }
        self.update(|topics, changed| {
            let current = check(topics)?;
            self.create_partition_folders(name, current..total)?;
            let mut entry = topics[name].clone();
            entry["partitions"] = json!(total);
            changed.insert(name.to_string(), entry);
            Ok(())
        })
    }

    /// Change a topic's own config under the metadata lock: `change` gets the stored config and
    /// returns the new one, which is checked (`topic_config::validate_topic_config`) and stored
    /// normalised unless `validate_only`. What AlterConfigs/IncrementalAlterConfigs and
    /// `Admin.alter_config` do.
    pub fn alter_topic_config(
        &self,
        name: &str,
        validate_only: bool,
        change: impl FnOnce(&Map<String, Value>) -> Result<Map<String, Value>>,
    ) -> Result<()> {
        validate_topic_name(name)?;
        let unknown = || self.unknown_topic(name);
        if validate_only {
            let topic = self.topics()?.remove(name).ok_or_else(unknown)?;
            return topic_config::validate_topic_config(&change(&topic.config)?).map(|_| ());
        }
        self.update(|topics, changed| {
            let mut entry = topics.get(name).ok_or_else(unknown)?.clone();
            let current = entry.get("config").and_then(Value::as_object).cloned().unwrap_or_default();
            let checked = topic_config::validate_topic_config(&change(&current)?)?;
            topic_config::warn_unapplied(&format!("topic {name:?}"), &current, &checked);
            entry["config"] = Value::Object(checked);
            changed.insert(name.to_string(), entry);
            Ok(())
        })
    }

    /// Change the data directory's own config (broker names, `kafkalite config alter`), checked
    /// by `topic_config::validate_dir_config`, as `Admin.alter_data_dir_config` stores it.
    pub fn alter_dir_config(
        &self,
        validate_only: bool,
        change: impl FnOnce(&Map<String, Value>) -> Result<Map<String, Value>>,
    ) -> Result<()> {
        if validate_only {
            return topic_config::validate_dir_config(&change(&self.dir_config()?)?).map(|_| ());
        }
        change_metadata(&self.path, |data| {
            let current = data.and_then(|d| d.get("config")).and_then(Value::as_object).cloned().unwrap_or_default();
            let checked = topic_config::validate_dir_config(&change(&current)?)?;
            topic_config::warn_unapplied("the data directory", &current, &checked);
            let write = match data {
                Some(_) => Write::Entry(json!({"config": checked})),
                None => Write::Snapshot(json!({"version": 1, "topics": {}, "config": checked})),
            };
            Ok::<_, Error>((write, ()))
        })
    }

    fn unknown_topic(&self, name: &str) -> Error {
        Error::UnknownTopicOrPartition(format!("unknown topic {name:?} in {}", self.path.display()))
    }

    /// Make a topic's partition folders `partitions` and sync the data directory, so that no
    /// topic the metadata lists loses its folders to a crash (under the metadata lock).
    fn create_partition_folders(&self, name: &str, partitions: std::ops::Range<i32>) -> Result<()> {
        for p in partitions {
            let dir = self.partition_path(name, p);
            std::fs::create_dir_all(&dir).context(|| format!("cannot create {}", dir.display()))?;
        }
        crate::storage::checkpoint::sync_dir(&self.path)
    }

    /// Change topics under the data-directory lock: `change` reads the current topics and puts
    /// each topic it changes into `changed` (its whole new entry, or null when it is deleted),
    /// which is written as one journal entry. A directory without metadata gets its first
    /// snapshot: the partition folders made by kafkalite's `Log` become topics.
    fn update(&self, change: impl FnOnce(&Map<String, Value>, &mut Map<String, Value>) -> Result<()>) -> Result<()> {
        change_metadata(&self.path, |data| {
            let mut changed = Map::new();
            let Some(data) = data else {
                if self.broker_owned()? {
                    return Err(Error::config(format!(
                        "{} is a Kafka broker's log directory (no kafkalite metadata); it can be read but not changed",
                        self.path.display()
                    )));
                }
                let mut topics: Map<String, Value> = self
                    .discovered()?
                    .into_iter()
                    .map(|(name, meta)| (name, json!({"partitions": meta.partitions, "config": {}})))
                    .collect();
                change(&topics, &mut changed)?;
                for (name, meta) in changed {
                    match meta {
                        Value::Null => topics.remove(&name),
                        meta => topics.insert(name, meta),
                    };
                }
                return Ok((Write::Snapshot(json!({"version": 1, "topics": topics})), ()));
            };
            // `read_metadata` has checked that "topics" is an object.
            let empty = Map::new();
            change(data.get("topics").and_then(Value::as_object).unwrap_or(&empty), &mut changed)?;
            Ok((if changed.is_empty() { Write::Nothing } else { Write::Entry(json!({"topics": changed})) }, ()))
        })
    }
}

/// A topic's entry in the metadata as a `TopicMeta` (the entry's shape is checked when read).
fn topic_meta(meta: &Value) -> TopicMeta {
    let partitions = meta["partitions"].as_i64().unwrap_or(0) as i32;
    let config = meta.get("config").and_then(Value::as_object).cloned().unwrap_or_default();
    TopicMeta { partitions, config, discovered: false }
}

/// Two topic names Kafka's metrics cannot tell apart ('.' and '_' are the same to them), without
/// building either's dotless form (every create compares its name with every topic's).
fn collides(a: &str, b: &str) -> bool {
    let same = |x: u8, y: u8| x == y || (matches!(x, b'.' | b'_') && matches!(y, b'.' | b'_'));
    a.len() == b.len() && a != b && a.bytes().zip(b.bytes()).all(|(x, y)| same(x, y))
}

/// How long a delete waits for a shared writer's append (normally microseconds) to finish.
const DELETE_LOCK_PATIENCE: Duration = Duration::from_secs(10);

/// Hold a partition's append lock (the engine's flock, `lock.rs`) for a delete, waiting up to
/// DELETE_LOCK_PATIENCE for a shared writer's append. None for an exclusive writer, which holds
/// it for its lifetime (see `DataDir::delete_topic`).
fn hold_append_lock(partition_dir: &Path) -> Result<Option<std::fs::File>> {
    let path = partition_dir.join(APPEND_LOCK_FILE);
    let file = crate::storage::nofollow::open(
        crate::storage::nofollow::options().create(true).append(true).read(true),
        &path,
        "the partition's append lock",
    )?;
    let start = Instant::now();
    let mut holder = String::new();
    let held = crate::storage::lock::retry_until(Some(start + DELETE_LOCK_PATIENCE), || {
        if rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_ok() {
            return Some(true);
        }
        holder = std::fs::read_to_string(partition_dir.join(WRITERS_FILE)).unwrap_or_default();
        holder.contains("(exclusive)").then_some(false)
    });
    match held {
        Some(true) => Ok(Some(file)),
        Some(false) => Ok(None),
        None => Err(Error::LockTimeout {
            path,
            waited_ms: start.elapsed().as_millis() as u64,
            holder: if holder.trim().is_empty() { "another process".into() } else { holder.trim().to_string() },
        }),
    }
}

/// Remove deleted partitions' renamed folders (after the metadata lock is released). Another
/// process finishing the same folders meanwhile is no failure.
fn remove_doomed(doomed: &[PathBuf]) {
    for path in doomed {
        match std::fs::remove_dir_all(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                ::log::warn!(target: "kafkalite::admin", "cannot remove the deleted partition folder {}: {e}", path.display());
            }
            _ => {}
        }
    }
}

/// A unique part for a deleted partition's folder name (Kafka uses a random UUID).
fn deletion_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    format!("{:016x}{:08x}{:08x}", nanos as u64, std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Config strings from the wire (CreateTopics), checked against `topic_config::TOPIC_CONFIGS`:
/// normalised values, as `Admin.create_topic` stores them.
pub fn validate_config(config: &BTreeMap<String, String>) -> Result<Map<String, Value>> {
    let config: Map<String, Value> = config.iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect();
    topic_config::validate_topic_config(&config)
}

/// A topic config value with its default, as a string (how Kafka's configs travel).
pub fn config_value(dir_config: &Map<String, Value>, config: &Map<String, Value>, key: &str) -> Option<String> {
    let v = topic_config::effective_config(dir_config, config).remove(key)?;
    Some(match v {
        Value::String(s) => s,
        other => other.to_string(),
    })
}

/// The `LogConfig` a topic's partitions are opened with by a writer that does not compress
/// itself (`topic_config::resolve`, the resolution Python's clients use too).
pub fn log_config(dir_config: &Map<String, Value>, meta: &TopicMeta) -> Result<LogConfig> {
    let mut config = topic_config::resolve(dir_config, &meta.config, Compression::None)?;
    config.readonly = meta.discovered;
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creates_topics_in_the_python_format() {
        let dir = tempfile::tempdir().unwrap();
        let dd = DataDir::new(dir.path()).unwrap();
        let mut config = BTreeMap::new();
        config.insert("retention.ms".to_string(), "1000".to_string());
        assert!(dd.create_topic("events", 3, &config).unwrap());
        let topics = dd.topics().unwrap();
        assert_eq!(topics["events"].partitions, 3);
        assert_eq!(topics["events"].config["retention.ms"], json!(1000));
        assert!(dd.partition_path("events", 2).is_dir());
        assert!(!dd.create_topic("events", 1, &BTreeMap::new()).unwrap());
        assert!(dd.create_topic("bad/name", 1, &BTreeMap::new()).is_err());
        assert!(dd.create_topic("events_x", 0, &BTreeMap::new()).is_err());
        assert_eq!(log_config(&dd.dir_config().unwrap(), &topics["events"]).unwrap().retention_ms, Some(1000));
    }

    #[test]
    fn damaged_metadata_is_refused_naming_file_and_topic() {
        let dir = tempfile::tempdir().unwrap();
        let dd = DataDir::new(dir.path()).unwrap();
        std::fs::write(dd.metadata_path(), r#"{"version": 1, "topics": {"t": {"partitions": 0}}}"#).unwrap();
        let err = dd.topics().unwrap_err();
        assert!(matches!(err, Error::CorruptMetadata(_)), "{err}");
        assert!(err.to_string().contains(TOPICS_FILE) && err.to_string().contains("\"t\""), "{err}");
        // A change that would damage the file is refused before it is written.
        std::fs::write(dd.metadata_path(), r#"{"version": 1, "topics": {}}"#).unwrap();
        let err = update_metadata(dd.path(), |_| Ok::<_, Error>(json!({"topics": {"t": 1}}))).unwrap_err();
        assert!(matches!(err, Error::CorruptMetadata(_)), "{err}");
        assert_eq!(std::fs::read_to_string(dd.metadata_path()).unwrap(), r#"{"version": 1, "topics": {}}"#);
    }

    #[test]
    fn delete_topic_renames_under_the_append_lock_then_removes() {
        let dir = tempfile::tempdir().unwrap();
        let dd = DataDir::new(dir.path()).unwrap();
        assert!(dd.create_topic("t", 2, &BTreeMap::new()).unwrap());
        // A shared writer mid-append holds the partition's append lock: the delete waits for it.
        let held = std::fs::File::create(dd.partition_path("t", 0).join(APPEND_LOCK_FILE)).unwrap();
        rustix::fs::flock(&held, rustix::fs::FlockOperation::LockExclusive).unwrap();
        let deleter = {
            let dd = dd.clone();
            std::thread::spawn(move || dd.delete_topic("t"))
        };
        std::thread::sleep(Duration::from_millis(300));
        assert!(dd.partition_path("t", 0).is_dir(), "renamed while an append held the lock");
        assert!(!deleter.is_finished());
        drop(held);
        deleter.join().unwrap().unwrap();
        assert!(dd.topics().unwrap().is_empty());
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().map(|e| e.file_name()).collect();
        assert!(left.iter().all(|n| !n.to_string_lossy().starts_with("t-")), "{left:?}");
        assert!(matches!(dd.delete_topic("t"), Err(Error::UnknownTopicOrPartition(_))));
        assert!(matches!(dd.delete_topic("../t"), Err(Error::InvalidConfig(_))));
    }

    #[test]
    fn partitions_only_grow_and_validate_only_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let dd = DataDir::new(dir.path()).unwrap();
        dd.create_topic("t", 2, &BTreeMap::new()).unwrap();
        dd.create_partitions("t", 4, true).unwrap();
        assert_eq!(dd.topics().unwrap()["t"].partitions, 2);
        dd.create_partitions("t", 4, false).unwrap();
        assert_eq!(dd.topics().unwrap()["t"].partitions, 4);
        assert!(dd.partition_path("t", 3).is_dir());
        for bad in [4, 3, 0, -1, MAX_PARTITIONS + 1] {
            assert!(matches!(dd.create_partitions("t", bad, false), Err(Error::InvalidConfig(_))), "{bad}");
        }
        assert!(matches!(dd.create_partitions("nope", 3, false), Err(Error::UnknownTopicOrPartition(_))));
    }

    #[test]
    fn topic_config_changes_are_checked_and_normalised() {
        let dir = tempfile::tempdir().unwrap();
        let dd = DataDir::new(dir.path()).unwrap();
        dd.create_topic("t", 1, &BTreeMap::new()).unwrap();
        let set = |key: &str, value: &str| {
            let (key, value) = (key.to_string(), json!(value));
            move |c: &Map<String, Value>| {
                let mut c = c.clone();
                c.insert(key, value);
                Ok(c)
            }
        };
        dd.alter_topic_config("t", true, set("retention.ms", "5")).unwrap();
        assert!(dd.topics().unwrap()["t"].config.is_empty(), "validate_only stored it");
        dd.alter_topic_config("t", false, set("retention.ms", "5")).unwrap();
        assert_eq!(dd.topics().unwrap()["t"].config["retention.ms"], json!(5));
        let err = dd.alter_topic_config("t", false, set("retention.ms", "soon")).unwrap_err();
        assert!(err.to_string().contains("retention.ms must be an integer"), "{err}");
        assert!(dd.alter_topic_config("t", false, set("no.such", "1")).is_err());
        assert_eq!(dd.topics().unwrap()["t"].config["retention.ms"], json!(5));
    }
}
