//! A data directory's topic metadata on disk: the snapshot `.kafkalite-topics.json` (the format
//! `datadir.py` has always written: `{"version": 1, "topics": {name: {"partitions": n, "config":
//! {...}}}, "config": {...}}`, plus `"journal": <generation>`) and the journal
//! `.kafkalite-topics.journal` of the changes since (`journal.rs` has its bytes). The metadata is
//! the snapshot with the journal's entries applied in order, when the journal's generation is the
//! one the snapshot names; a journal of an older generation is already folded in.
//!
//! Changes are made under the data directory's admin lock (an exclusive flock on
//! `.kafkalite-admin.lock`): one change appends one entry (a topic's whole entry, or the
//! directory's config) and syncs it, so its cost does not grow with the number of topics. When
//! the journal outgrows both `COMPACT_MIN_BYTES` and the snapshot, the writer compacts: it
//! writes the whole metadata as a new snapshot naming generation G+1 (temp file, fsync, rename,
//! fsync of the directory), then replaces the journal by an empty one of generation G+1 the same
//! way. Killed between the two, the snapshot holds everything and names a generation the old
//! journal does not have, so the old journal is ignored, and the next writer replaces it before
//! appending: no entry is lost or applied twice (and applying one twice would change nothing).
//! A directory without a snapshot (new, or holding only `Log`-made folders) gets one at its
//! first write; one written before the journal existed (no `"journal"` key: generation 0) is read
//! as it is and starts its journal, generation 0, at its first change.
//!
//! Readers never lock: they open the journal, then read the snapshot (a compaction replaces the
//! snapshot first, so the snapshot read is at least as new as the journal opened), and stop at an
//! entry cut short or failing its CRC (a writer's append in progress, or a killed one's tail,
//! which the next writer cuts off). A reader that remembers its `Position` pays only for what
//! changed since: two `lstat`s when nothing did, the new entries when some were appended, and a
//! whole read only after a compaction or a hand edit. This process's readers and writers share
//! one cache per directory (`CACHES`); Python keeps its own dict and asks for the entries since
//! its position (`changes_since`).
//!
//! Everything read is checked: a hand-damaged entry is an `Error::CorruptMetadata` naming the
//! file, the topic and the fix.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{Map, Value};

use crate::storage::checkpoint::write_atomically;
use crate::storage::error::{Error, IoContext, Result};
use crate::storage::files::{ADMIN_LOCK_FILE, TOPICS_FILE, TOPICS_JOURNAL_FILE};

use super::journal;
use super::{validate_topic_name, MAX_PARTITIONS};

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

/// Compaction starts once the journal is longer than this and than the snapshot (so its cost,
/// a rewrite of every topic, is spread over as many bytes of changes as it writes).
pub const COMPACT_MIN_BYTES: u64 = 256 * 1024;

/// A file's identity and version, as `lstat` shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    mtime_ns: i64,
    size: u64,
}

impl Stamp {
    fn of(m: &std::fs::Metadata) -> Stamp {
        use std::os::unix::fs::MetadataExt;
        Stamp { dev: m.dev(), ino: m.ino(), mtime_ns: m.mtime() * 1_000_000_000 + m.mtime_nsec(), size: m.size() }
    }

    /// The stamp of `path` (never following a link), None when there is no file.
    fn at(path: &Path) -> Result<Option<Stamp>> {
        match std::fs::symlink_metadata(path) {
            Ok(m) => Ok(Some(Stamp::of(&m))),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory) => Ok(None),
            Err(e) => Err(Error::io_at(path, format!("cannot stat {}", path.display()), e)),
        }
    }
}

/// The journal a reader has read: which file, its generation, whether it applies to the
/// snapshot read, and where its valid entries end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct JournalAt {
    dev: u64,
    ino: u64,
    generation: u64,
    applies: bool,
    end: u64,
}

/// How far a reader has read the metadata: which snapshot, which journal and how far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Position {
    snapshot: Option<Stamp>,
    /// The generation the snapshot names (its `"journal"`).
    wanted: u64,
    journal: Option<JournalAt>,
}

impl Position {
    /// The position as integers (Python keeps it between calls).
    pub fn to_words(&self) -> Vec<i64> {
        let mut out = Vec::with_capacity(12);
        match self.snapshot {
            Some(s) => out.extend([1, s.dev as i64, s.ino as i64, s.mtime_ns, s.size as i64]),
            None => out.extend([0; 5]),
        }
        out.push(self.wanted as i64);
        match self.journal {
            Some(j) => out.extend([1, j.dev as i64, j.ino as i64, j.generation as i64, j.applies as i64, j.end as i64]),
            None => out.extend([0; 6]),
        }
        out
    }

    /// A position `to_words` made; None for anything else (then the reader reads everything).
    pub fn from_words(w: &[i64]) -> Option<Position> {
        let [has_snapshot, dev, ino, mtime_ns, size, wanted, has_journal, jdev, jino, generation, applies, end] =
            w.try_into().ok()?;
        let snapshot =
            (has_snapshot == 1).then_some(Stamp { dev: dev as u64, ino: ino as u64, mtime_ns, size: size as u64 });
        let journal = (has_journal == 1).then_some(JournalAt {
            dev: jdev as u64,
            ino: jino as u64,
            generation: generation as u64,
            applies: applies == 1,
            end: end as u64,
        });
        Some(Position { snapshot, wanted: wanted as u64, journal })
    }
}

/// What changed since a reader's position.
pub enum Delta {
    /// Nothing.
    Unchanged,
    /// These journal entries (checked), to apply in order to what the reader has.
    Entries(Vec<Value>),
    /// Read it all again: the whole metadata (None: there is none).
    Whole(Option<Value>),
}

fn journal_path(dir: &Path) -> PathBuf {
    dir.join(TOPICS_JOURNAL_FILE)
}

/// What changed in the metadata of data directory `dir` since `since` (None: everything), and
/// the reader's new position.
pub fn changes_since(dir: &Path, since: Option<&Position>) -> Result<(Position, Delta)> {
    if let Some(pos) = since {
        if let Some(found) = appended_since(dir, pos)? {
            return Ok(found);
        }
    }
    read_whole(dir)
}

/// The entries appended since `pos`, or None when more than appends happened (read it all).
fn appended_since(dir: &Path, pos: &Position) -> Result<Option<(Position, Delta)>> {
    if Stamp::at(&dir.join(TOPICS_FILE))? != pos.snapshot {
        return Ok(None);
    }
    let jpath = journal_path(dir);
    let at = Stamp::at(&jpath)?;
    let Some(j) = pos.journal else {
        return Ok(at.is_none().then_some((*pos, Delta::Unchanged)));
    };
    let Some(at) = at.filter(|s| s.dev == j.dev && s.ino == j.ino) else { return Ok(None) };
    if !j.applies || at.size == j.end {
        return Ok(Some((*pos, Delta::Unchanged)));
    }
    if at.size < j.end {
        return Ok(None); // entries only go whole, by compaction; a hand edit: read it all
    }
    let Some(file) = open_if_exists(&jpath, "the topic journal")? else { return Ok(None) };
    let now = Stamp::of(&file.metadata().context_at(&jpath, || format!("cannot stat {}", jpath.display()))?);
    if now.dev != j.dev || now.ino != j.ino {
        return Ok(None);
    }
    let (entries, end) = journal::read_entries(&file, j.end, &jpath)?;
    for entry in &entries {
        check_entry(&jpath, entry)?;
    }
    let mut pos = *pos;
    pos.journal = Some(JournalAt { end, ..j });
    Ok(Some((pos, Delta::Entries(entries))))
}

/// `path` opened for reading, None when there is none. Only a regular file is read: a FIFO
/// planted there is opened without waiting (O_NONBLOCK) and refused, not read forever.
fn open_if_exists(path: &Path, what: &str) -> Result<Option<std::fs::File>> {
    use std::os::unix::fs::OpenOptionsExt;
    let flags = rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK;
    match crate::storage::nofollow::open(
        crate::storage::nofollow::options().read(true).custom_flags(flags.bits() as i32),
        path,
        what,
    ) {
        Ok(file) if file.metadata().context_at(path, || format!("cannot stat {}", path.display()))?.is_file() => {
            Ok(Some(file))
        }
        Ok(_) => Err(Error::io_at(
            path,
            format!("cannot read {what} {}: it is not a regular file; replace it with the real file", path.display()),
            std::io::Error::from(std::io::ErrorKind::InvalidInput),
        )),
        Err(Error::Io { source, .. })
            if matches!(source.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory) =>
        {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// The whole metadata: the journal opened first, then the snapshot (see the module comment).
fn read_whole(dir: &Path) -> Result<(Position, Delta)> {
    let jpath = journal_path(dir);
    let journal = open_if_exists(&jpath, "the topic journal")?;
    let meta = dir.join(TOPICS_FILE);
    let Some((mut data, snapshot)) = read_snapshot(&meta)? else {
        return Ok((Position::default(), Delta::Whole(None)));
    };
    let wanted = take_generation(&meta, &mut data)?;
    let mut pos = Position { snapshot: Some(snapshot), wanted, journal: None };
    if let Some(file) = journal {
        let stamp = Stamp::of(&file.metadata().context_at(&jpath, || format!("cannot stat {}", jpath.display()))?);
        let generation = journal::read_generation(&file, &jpath)?;
        if generation > wanted {
            return Err(Error::CorruptMetadata(format!(
                "{} is of generation {generation}, newer than the {wanted} {} names (a file restored or copied \
                 on its own?); restore both files from the same backup or re-create the topics",
                jpath.display(),
                meta.display()
            )));
        }
        let mut end = stamp.size;
        if generation == wanted {
            let (entries, valid) = journal::read_entries(&file, journal::HEADER_LEN, &jpath)?;
            for entry in entries {
                check_entry(&jpath, &entry)?;
                apply(&mut data, entry);
            }
            end = valid;
        }
        pos.journal =
            Some(JournalAt { dev: stamp.dev, ino: stamp.ino, generation, applies: generation == wanted, end });
    }
    Ok((pos, Delta::Whole(Some(data))))
}

/// The parsed and checked snapshot at `meta` and its stamp, None when there is none.
fn read_snapshot(meta: &Path) -> Result<Option<(Value, Stamp)>> {
    let Some(mut file) = open_if_exists(meta, "the topic metadata")? else { return Ok(None) };
    let stamp = Stamp::of(&file.metadata().context_at(meta, || format!("cannot stat {}", meta.display()))?);
    let mut raw = Vec::new();
    file.read_to_end(&mut raw).context_at(meta, || format!("cannot read {}", meta.display()))?;
    let data: Value = serde_json::from_slice(&raw).map_err(|e| {
        Error::CorruptMetadata(format!(
            "{} is damaged ({e}); restore it from a backup or re-create the topics",
            meta.display()
        ))
    })?;
    check_metadata(meta, &data)?;
    Ok(Some((data, stamp)))
}

/// Remove the snapshot's `"journal"` (no reader above this module sees it) and return it.
fn take_generation(meta: &Path, data: &mut Value) -> Result<u64> {
    match data.as_object_mut().and_then(|d| d.remove(JOURNAL_KEY)) {
        None => Ok(0),
        Some(v) => v.as_u64().ok_or_else(|| {
            Error::CorruptMetadata(format!(
                "{} is damaged (\"{JOURNAL_KEY}\": {}, not a generation number); restore it from a backup or \
                 re-create the topics",
                meta.display(),
                shown(&v)
            ))
        }),
    }
}

/// The snapshot's key naming the journal generation it does not hold yet.
const JOURNAL_KEY: &str = "journal";

/// A journal entry's shape: `"topics"` an object of checked topic entries or null (deleted),
/// `"config"` as the snapshot's.
fn check_entry(jpath: &Path, entry: &Value) -> Result<()> {
    let mut doc = Map::new();
    let mut topics = Map::new();
    match entry.get("topics") {
        None => {}
        Some(Value::Object(changed)) => {
            for (name, meta) in changed {
                if meta.is_null() {
                    validate_topic_name(name).map_err(|_| {
                        Error::CorruptMetadata(format!(
                            "{} is damaged (topic {name:?} is not a valid topic name); restore the data directory's \
                             topic files from a backup or re-create the topics",
                            jpath.display()
                        ))
                    })?;
                } else {
                    topics.insert(name.clone(), meta.clone());
                }
            }
        }
        Some(other) => {
            return Err(Error::CorruptMetadata(format!(
                "{} is damaged (an entry's \"topics\": {}, not an object); restore the data directory's topic \
                 files from a backup or re-create the topics",
                jpath.display(),
                shown(other)
            )))
        }
    }
    doc.insert("topics".into(), Value::Object(topics));
    if let Some(config) = entry.get("config") {
        doc.insert("config".into(), config.clone());
    }
    check_metadata(jpath, &Value::Object(doc))
}

/// Apply one checked journal entry to the metadata.
fn apply(data: &mut Value, entry: Value) {
    let Value::Object(mut entry) = entry else { return };
    if let (Some(Value::Object(changed)), Some(topics)) =
        (entry.remove("topics"), data.get_mut("topics").and_then(Value::as_object_mut))
    {
        for (name, meta) in changed {
            if meta.is_null() {
                topics.remove(&name);
            } else {
                topics.insert(name, meta);
            }
        }
    }
    if let Some(config) = entry.remove("config") {
        data["config"] = config;
    }
}

/// The parsed and checked metadata of the data directory holding `meta` (its snapshot's path),
/// None when there is none. Never follows a link; damage is an `Error::CorruptMetadata` naming
/// the file (`check_metadata`).
pub fn read_metadata(meta: &Path) -> Result<Option<Value>> {
    with_metadata(meta.parent().unwrap_or(Path::new(".")), |data| data.cloned())
}

/// `read` run on the metadata of data directory `dir` (None when there is none), from this
/// process's cache brought up to date: no copy of every topic for a reader that needs a few.
pub fn with_metadata<R>(dir: &Path, read: impl FnOnce(Option<&Value>) -> R) -> Result<R> {
    let cache = cache_of(dir);
    let mut cached = lock(&cache);
    cached.refresh(dir)?;
    Ok(read(cached.data.as_ref()))
}

/// A stamp of the metadata's files that changes whenever the metadata does (for a reader's
/// cache of something derived from it, such as the server's topics).
pub fn metadata_stamp(dir: &Path) -> Result<MetadataStamp> {
    Ok(MetadataStamp(Stamp::at(&dir.join(TOPICS_FILE))?, Stamp::at(&journal_path(dir))?))
}

/// `metadata_stamp`'s answer: the snapshot's and the journal's stamps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetadataStamp(Option<Stamp>, Option<Stamp>);

impl MetadataStamp {
    /// There is a snapshot (without one, the topics come from folder names, which no stamp covers).
    pub fn exists(&self) -> bool {
        self.0.is_some()
    }
}

/// One process's view of one directory's metadata, kept up to date by `refresh`.
#[derive(Default)]
struct Cached {
    pos: Option<Position>,
    data: Option<Value>,
}

impl Cached {
    fn refresh(&mut self, dir: &Path) -> Result<()> {
        let result = changes_since(dir, self.pos.as_ref());
        let (pos, delta) = match result {
            Ok(found) => found,
            Err(e) => {
                *self = Cached::default();
                return Err(e);
            }
        };
        match delta {
            Delta::Unchanged => {}
            Delta::Entries(entries) => match self.data.as_mut() {
                Some(data) => entries.into_iter().for_each(|entry| apply(data, entry)),
                // A position past a journal comes with its snapshot's data; read it all if not.
                None => {
                    *self = Cached::default();
                    return self.refresh(dir);
                }
            },
            Delta::Whole(data) => self.data = data,
        }
        self.pos = Some(pos);
        Ok(())
    }
}

/// The most directories whose metadata one process keeps (the least recently used goes first).
const CACHED_DIRS: usize = 32;

/// This process's cached metadata, per data directory.
static CACHES: Mutex<Vec<(PathBuf, Arc<Mutex<Cached>>)>> = Mutex::new(Vec::new());

fn cache_of(dir: &Path) -> Arc<Mutex<Cached>> {
    let mut caches = lock(&CACHES);
    let cache = match caches.iter().position(|(d, _)| d == dir) {
        Some(i) => caches.remove(i).1,
        None => Arc::default(),
    };
    caches.push((dir.to_path_buf(), cache.clone()));
    if caches.len() > CACHED_DIRS {
        caches.remove(0);
    }
    cache
}

/// A cache's lock; a panic while it was held leaves a cache that the next `refresh` checks
/// against the files anyway.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// What a change writes.
pub enum Write {
    /// Nothing (the change found nothing to do).
    Nothing,
    /// One journal entry (see `journal.rs`): `{"topics": {name: entry or null}}` and/or
    /// `{"config": {...}}`.
    Entry(Value),
    /// The whole metadata, as a new snapshot (the first write of a directory).
    Snapshot(Value),
}

/// Change the metadata of the data directory `dir` under its admin lock: `change` gets the
/// current metadata (None when there is none yet) and says what to write, which is checked and
/// written (an entry appended and synced, or a snapshot written atomically), and returns a
/// result for the caller. A journal past its size is compacted afterwards (a failure to
/// compact is logged: the change itself is durable).
pub fn change_metadata<T, E: From<Error>>(
    dir: &Path,
    change: impl FnOnce(Option<&Value>) -> std::result::Result<(Write, T), E>,
) -> std::result::Result<T, E> {
    let lock_file = admin_lock(dir)?;
    let cache = cache_of(dir);
    let mut cached = lock(&cache);
    cached.refresh(dir)?;
    let (write, out) = change(cached.data.as_ref())?;
    let written = match write {
        Write::Nothing => Ok(()),
        Write::Entry(entry) => append_entry(dir, &mut cached, entry),
        Write::Snapshot(data) => {
            let written = check_metadata(&dir.join(TOPICS_FILE), &data)
                .and_then(|()| write_snapshot(dir, cached.pos.as_ref(), &data));
            *cached = Cached::default();
            written
        }
    };
    drop(cached);
    drop(lock_file); // releases the flock
    written?;
    Ok(out)
}

/// Change the metadata of the data directory `dir` as a whole under its admin lock: `change`
/// gets a copy of it (None when there is none yet) and returns the new metadata, which is
/// checked and written as the entry of what differs (a snapshot for a directory without one, or
/// when keys other than the topics and the config changed). For changes of any shape (Python's
/// `DataDir.update_metadata`); the topic operations of `DataDir` write their entry directly.
pub fn update_metadata<E: From<Error>>(
    dir: &Path,
    change: impl FnOnce(Option<Value>) -> std::result::Result<Value, E>,
) -> std::result::Result<(), E> {
    let meta = dir.join(TOPICS_FILE);
    change_metadata(dir, |current| {
        let new = change(current.cloned())?;
        check_metadata(&meta, &new)?;
        Ok((current.map_or_else(|| Write::Snapshot(new.clone()), |old| difference(old, &new)), ()))
    })
}

/// The write that turns `old` into `new`.
fn difference(old: &Value, new: &Value) -> Write {
    let (Some(old_map), Some(new_map)) = (old.as_object(), new.as_object()) else {
        return Write::Snapshot(new.clone());
    };
    let others = |m: &Map<String, Value>| -> Map<String, Value> {
        m.iter()
            .filter(|(k, _)| !matches!(k.as_str(), "topics" | "config"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    if others(old_map) != others(new_map) {
        return Write::Snapshot(new.clone());
    }
    let empty = Map::new();
    let old_topics = old["topics"].as_object().unwrap_or(&empty);
    let new_topics = new["topics"].as_object().unwrap_or(&empty);
    let mut topics: Map<String, Value> = old_topics
        .keys()
        .filter(|name| !new_topics.contains_key(*name))
        .map(|name| (name.clone(), Value::Null))
        .collect();
    for (name, meta) in new_topics {
        if old_topics.get(name) != Some(meta) {
            topics.insert(name.clone(), meta.clone());
        }
    }
    let mut entry = Map::new();
    if !topics.is_empty() {
        entry.insert("topics".into(), Value::Object(topics));
    }
    let config = |m: &Map<String, Value>| m.get("config").cloned().unwrap_or(Value::Null);
    if config(old_map) != config(new_map) {
        entry.insert("config".into(), config(new_map));
    }
    if entry.is_empty() {
        Write::Nothing
    } else {
        Write::Entry(Value::Object(entry))
    }
}

/// Append `entry` to the journal (starting one of the generation the snapshot names when there
/// is none or only an older one), update `cached`, and compact when the journal grew past its
/// size. Called under the admin lock with `cached` fresh.
fn append_entry(dir: &Path, cached: &mut Cached, entry: Value) -> Result<()> {
    let jpath = journal_path(dir);
    check_entry(&jpath, &entry)?;
    let Some(pos) = cached.pos.filter(|p| p.snapshot.is_some()) else {
        return Err(Error::config(format!("{} has no topic metadata to change", dir.display())));
    };
    if !pos.journal.is_some_and(|j| j.applies) {
        journal::replace(dir, TOPICS_JOURNAL_FILE, pos.wanted)?;
        *cached = Cached::default();
        cached.refresh(dir)?;
    }
    let (Some(pos), Some(j)) = (cached.pos, cached.pos.and_then(|p| p.journal)) else {
        return Err(Error::config(format!("{} vanished while it was being started", jpath.display())));
    };
    let file = crate::storage::nofollow::open(
        crate::storage::nofollow::options().read(true).write(true),
        &jpath,
        "the topic journal",
    )?;
    let now = Stamp::of(&file.metadata().context_at(&jpath, || format!("cannot stat {}", jpath.display()))?);
    if now.dev != j.dev || now.ino != j.ino {
        *cached = Cached::default();
        return Err(Error::config(format!("{} was replaced by hand while the admin lock was held", jpath.display())));
    }
    let bytes = journal::encode_entry(&entry);
    if let Err(e) = journal::append(&file, j.end, &bytes, &jpath) {
        *cached = Cached::default(); // the entry may be there: read it all next time
        return Err(e);
    }
    let end = j.end + bytes.len() as u64;
    // The journal's own stamp is not kept: only its size moved (appends touch nothing else that
    // `appended_since` compares).
    let pos = Position { journal: Some(JournalAt { end, ..j }), ..pos };
    let Some(data) = cached.data.as_mut() else {
        *cached = Cached::default(); // cannot be (a snapshot was read): read it all next time
        return Ok(());
    };
    apply(data, entry);
    cached.pos = Some(pos);
    if end > COMPACT_MIN_BYTES.max(pos.snapshot.map_or(0, |s| s.size)) {
        if let Err(e) = write_snapshot(dir, Some(&pos), data) {
            ::log::warn!(target: "kafkalite::admin", "cannot compact the topic journal {}: {e}", jpath.display());
        }
        *cached = Cached::default();
    }
    Ok(())
}

/// Write `data` as the snapshot naming the next journal generation, then start that journal
/// (the module comment says why in this order). Under the admin lock.
fn write_snapshot(dir: &Path, pos: Option<&Position>, data: &Value) -> Result<()> {
    let current = pos.map_or(0, |p| p.wanted.max(p.journal.map_or(0, |j| j.generation)));
    let generation = current + 1;
    let mut data = data.clone();
    if let Some(d) = data.as_object_mut() {
        d.insert(JOURNAL_KEY.into(), Value::from(generation));
    }
    let meta = dir.join(TOPICS_FILE);
    crate::storage::failpoint::hit("topics.snapshot.write")
        .context_at(&meta, || format!("cannot write {}", meta.display()))?;
    write_atomically(dir, TOPICS_FILE, snapshot_text(&meta, &data)?.as_bytes())?;
    crate::storage::failpoint::hit("topics.snapshot.written")
        .context_at(&meta, || format!("cannot replace {}", journal_path(dir).display()))?;
    journal::replace(dir, TOPICS_JOURNAL_FILE, generation)
}

/// The snapshot's text, as datadir.py has always written it (`json.dumps(indent=1,
/// sort_keys=True)`; serde_json's maps are sorted).
fn snapshot_text(meta: &Path, data: &Value) -> Result<String> {
    let pretty = serde_json::to_string_pretty(data)
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
    Ok(text.join("\n"))
}

/// The data directory's admin lock, held (exclusive flock on `.kafkalite-admin.lock`, never
/// through a link) until the returned file is dropped: it serializes every read-modify-write of
/// the data directory's own files (topics, users).
pub fn admin_lock(dir: &Path) -> Result<std::fs::File> {
    let lock_path = dir.join(ADMIN_LOCK_FILE);
    let lock = crate::storage::nofollow::open(
        crate::storage::nofollow::options().create(true).append(true).read(true),
        &lock_path,
        "the data directory's admin lock",
    )?;
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive)
        .map_err(|e| Error::io_at(&lock_path, format!("cannot lock {}", lock_path.display()), e.into()))?;
    Ok(lock)
}
