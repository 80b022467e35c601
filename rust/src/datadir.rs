//! A data directory's topic metadata, `.kafkalite-topics.json`, read and written exactly as
//! `python/kafkalite/datadir.py` does: `{"version": 1, "topics": {name: {"partitions": n,
//! "config": {...}}}}`, changed under an exclusive flock on `.kafkalite-admin.lock` and
//! replaced atomically (temp file, fsync, rename, fsync the directory).
//!
//! This is the one Rust reader/writer of that file (the wire-protocol server uses it); the
//! Python side should later call it instead of keeping its own copy of these rules.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};

use crate::checkpoint::write_atomically;
use crate::error::{Error, IoContext, Result};
use crate::files::{ADMIN_LOCK_FILE, TOPICS_FILE};
use crate::options::LogConfig;
use crate::record::Compression;
use crate::topic_config;

/// The most partitions a topic may have (`topic_config::MAX_PARTITIONS`).
pub const MAX_PARTITIONS: i32 = topic_config::MAX_PARTITIONS as i32;

/// One topic as the metadata file describes it. `discovered` topics come from the folder
/// names of a directory without metadata (a Kafka broker's): read-only.
#[derive(Clone, Debug, PartialEq)]
pub struct TopicMeta {
    pub partitions: i32,
    pub config: Map<String, Value>,
    pub discovered: bool,
}

/// Kafka's topic-name rules (`Topic.validate`), with the message datadir.py gives.
pub fn validate_topic_name(name: &str) -> Result<()> {
    if name == "." || name == ".." {
        return Err(Error::config(format!("topic name {name:?} is not allowed")));
    }
    let ok = !name.is_empty()
        && name.len() <= 249
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-');
    if !ok {
        return Err(Error::config(format!(
            "topic name {name:?} is invalid: use 1-249 characters of ASCII letters, digits, '.', '_' and '-'"
        )));
    }
    Ok(())
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

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn metadata_path(&self) -> PathBuf {
        self.path.join(TOPICS_FILE)
    }

    pub fn partition_path(&self, topic: &str, partition: i32) -> PathBuf {
        self.path.join(format!("{topic}-{partition}"))
    }

    /// Every topic: from the metadata file, or discovered from folder names without one.
    pub fn topics(&self) -> Result<BTreeMap<String, TopicMeta>> {
        let meta = self.metadata_path();
        match std::fs::read(&meta) {
            Ok(bytes) => parse_topics(&bytes).map_err(|e| Error::corrupt(format!("{}: {e}", meta.display()))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => self.discovered(),
            Err(e) => Err(Error::io(format!("cannot read {}", meta.display()), e)),
        }
    }

    /// The data directory's own config (broker names, as `kafkalite config` sets them; no
    /// defaults filled in): empty without metadata.
    pub fn dir_config(&self) -> Result<Map<String, Value>> {
        let meta = self.metadata_path();
        let data: Value = match std::fs::read(&meta) {
            Ok(bytes) => {
                serde_json::from_slice(&bytes).map_err(|e| Error::corrupt(format!("{}: {e}", meta.display())))?
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Map::new()),
            Err(e) => return Err(Error::io(format!("cannot read {}", meta.display()), e)),
        };
        Ok(data.get("config").and_then(Value::as_object).cloned().unwrap_or_default())
    }

    fn discovered(&self) -> Result<BTreeMap<String, TopicMeta>> {
        let mut found = BTreeMap::new();
        let entries = std::fs::read_dir(&self.path).context(|| format!("cannot list {}", self.path.display()))?;
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some((topic, partition)) = name.rsplit_once('-') else { continue };
            let Ok(partition) = partition.parse::<i32>() else { continue };
            if partition < 0 || !entry.path().is_dir() || validate_topic_name(topic).is_err() {
                continue;
            }
            let meta = found.entry(topic.to_string()).or_insert(TopicMeta {
                partitions: 0,
                config: Map::new(),
                discovered: true,
            });
            meta.partitions = meta.partitions.max(partition + 1);
        }
        Ok(found)
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
        let checked = validate_config(config)?;
        let mut created = false;
        self.update(|topics| {
            if topics.contains_key(name) {
                return Ok(());
            }
            let dotless = name.replace('.', "_");
            if let Some(clash) = topics.keys().find(|t| t.replace('.', "_") == dotless) {
                return Err(Error::config(format!(
                    "topic {name:?} collides with {clash:?} ('.' and '_' are the same to Kafka's metrics)"
                )));
            }
            for p in 0..partitions {
                let dir = self.partition_path(name, p);
                std::fs::create_dir_all(&dir).context(|| format!("cannot create {}", dir.display()))?;
            }
            topics.insert(name.to_string(), json!({"partitions": partitions, "config": checked}));
            created = true;
            Ok(())
        })?;
        Ok(created)
    }

    /// Apply `change` to the topics under the data-directory lock and write them atomically.
    fn update(&self, change: impl FnOnce(&mut Map<String, Value>) -> Result<()>) -> Result<()> {
        let lock_path = self.path.join(ADMIN_LOCK_FILE);
        let lock = OpenOptions::new()
            .create(true)
            .append(true)
            .read(true)
            .open(&lock_path)
            .context(|| format!("cannot open {}", lock_path.display()))?;
        rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive)
            .map_err(|e| Error::io(format!("cannot lock {}", lock_path.display()), e.into()))?;
        let meta = self.metadata_path();
        let mut data: Value = match std::fs::read(&meta) {
            Ok(bytes) => {
                serde_json::from_slice(&bytes).map_err(|e| Error::corrupt(format!("{}: {e}", meta.display())))?
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if !self.discovered()?.is_empty() {
                    return Err(Error::config(format!(
                        "{} holds partitions but no kafkalite metadata (a Kafka broker's log directory?); it can be read but not changed",
                        self.path.display()
                    )));
                }
                json!({"version": 1, "topics": {}})
            }
            Err(e) => return Err(Error::io(format!("cannot read {}", meta.display()), e)),
        };
        let topics = data
            .get_mut("topics")
            .and_then(Value::as_object_mut)
            .ok_or_else(|| Error::corrupt(format!("{} has no \"topics\" object", meta.display())))?;
        change(topics)?;
        // Python writes json.dump(indent=1, sort_keys=True); serde_json's maps are sorted too.
        let text = serde_json::to_string_pretty(&data).map_err(|e| Error::corrupt(e.to_string()))?;
        write_atomically(&self.path, TOPICS_FILE, text.as_bytes())
        // The flock is released when `lock` drops.
    }
}

fn parse_topics(bytes: &[u8]) -> std::result::Result<BTreeMap<String, TopicMeta>, String> {
    let data: Value = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    let topics = data.get("topics").and_then(Value::as_object).ok_or("no \"topics\" object")?;
    let mut out = BTreeMap::new();
    for (name, meta) in topics {
        let partitions = meta
            .get("partitions")
            .and_then(Value::as_i64)
            .filter(|n| (1..=MAX_PARTITIONS as i64).contains(n))
            .ok_or_else(|| format!("topic {name:?} has no valid \"partitions\""))?;
        let config = meta.get("config").and_then(Value::as_object).cloned().unwrap_or_default();
        out.insert(name.clone(), TopicMeta { partitions: partitions as i32, config, discovered: false });
    }
    Ok(out)
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
}
