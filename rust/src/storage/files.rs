//! Every name the engine gives a file, in one place (Kafka's `LogFileUtils`): the suffixes of a
//! segment's files, the offset-to-filename rule, and the fixed names of kafkalite's and Kafka's
//! own files in a partition and a data directory.
//!
//! Two spellings exist on disk: the partition locks are `.kafkalite.lock` / `.kafkalite.writers`
//! (the first names kafkalite ever wrote) and every later file is `.kafkalite-<what>`. They are
//! kept as they are: a renamed lock would let an old writer and a new one hold different files
//! for the same partition, and Python (`admin.py`) and other processes find these files by
//! these names (the binding exports the lock names as `APPEND_LOCK_FILE` / `WRITERS_FILE`).

use std::path::{Path, PathBuf};

// -- segment files, `<20-digit base offset><suffix>` (Kafka's names) --------------------------

/// Record batches back to back.
pub const LOG_SUFFIX: &str = ".log";
/// 8-byte entries: offset relative to the segment's base (4 bytes), position (4 bytes).
pub const INDEX_SUFFIX: &str = ".index";
/// 12-byte entries: timestamp (8 bytes), offset relative to the segment's base (4 bytes).
pub const TIME_INDEX_SUFFIX: &str = ".timeindex";
/// Aborted transactions (34-byte entries).
pub const TXN_INDEX_SUFFIX: &str = ".txnindex";
/// A producer-state snapshot, `<log end offset>.snapshot` (`producer_state.rs`, Kafka's
/// `ProducerStateManager`), taken at roll and clean close by a log whose producer state is loaded.
pub const SNAPSHOT_SUFFIX: &str = ".snapshot";

// -- suffixes appended to a whole file name while it is being replaced or removed -------------

/// A file scheduled for deletion (Kafka renames before it deletes); removed at open.
pub const DELETED_SUFFIX: &str = ".deleted";
/// The cleaner's new segment before its commit point; removed at open.
pub const CLEANED_SUFFIX: &str = ".cleaned";
/// The cleaner's new segment after its commit point; completed at open (`cleaner.rs`).
pub const SWAP_SUFFIX: &str = ".swap";
/// A small file being written atomically (`checkpoint::write_atomically`); removed at open.
pub const TMP_SUFFIX: &str = ".tmp";

/// The suffixes of a segment's index files (dropped at open when their `.log` is missing).
pub const INDEX_SUFFIXES: [&str; 3] = [INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX];
/// Every file one segment may own, the log first (index files without a log are dropped at open,
/// so deleting in this order never leaves a log without what it needs).
pub const SEGMENT_SUFFIXES: [&str; 4] = [LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX];

/// `<20-digit base offset><suffix>`, Kafka's file naming (`LogFileUtils.filenamePrefixFromOffset`).
pub fn file_name(base_offset: i64, suffix: &str) -> String {
    format!("{base_offset:020}{suffix}")
}

/// `dir/<20-digit base offset><suffix>`.
pub fn segment_path(dir: &Path, base_offset: i64, suffix: &str) -> PathBuf {
    dir.join(file_name(base_offset, suffix))
}

/// `dir/<20-digit base offset><suffix><marker>`, e.g. `00…07.log.swap` (`marker` is one of
/// `CLEANED_SUFFIX`, `SWAP_SUFFIX`, `DELETED_SUFFIX`).
pub fn marked_path(dir: &Path, base_offset: i64, suffix: &str, marker: &str) -> PathBuf {
    dir.join(format!("{}{marker}", file_name(base_offset, suffix)))
}

/// The base offset of a file named `<digits><suffix>`: at least 20 digits and non-negative,
/// as Kafka writes them (a shorter or signed stem is somebody else's file).
pub fn parse_base_offset(name: &str, suffix: &str) -> Option<i64> {
    let stem = name.strip_suffix(suffix)?;
    let base = stem.parse::<i64>().ok()?;
    (stem.len() >= 20 && base >= 0).then_some(base)
}

// -- a partition directory's own files -------------------------------------------------------

/// The append lock: shared writers hold it around each append (`lock.rs`). Its spelling
/// predates the `.kafkalite-…` names; see the module comment.
pub const APPEND_LOCK_FILE: &str = ".kafkalite.lock";
/// The presence lock; the writer holding it exclusively writes its pid into it (`lock.rs`).
pub const WRITERS_FILE: &str = ".kafkalite.writers";
/// Present after a clean close; its absence at open means "recover the active segment".
pub const CLEAN_SHUTDOWN_FILE: &str = ".kafkalite-clean-shutdown";
/// The log start offset, when it is above the first segment's base (Kafka keeps this in
/// the log directory's `log-start-offset-checkpoint`).
pub const LOG_START_OFFSET_FILE: &str = ".kafkalite-log-start-offset";
/// The cleaner's first dirty offset: compaction resumes from here (Kafka keeps this in the
/// log directory's `cleaner-offset-checkpoint`).
pub const CLEANER_OFFSET_FILE: &str = ".kafkalite-cleaner-offset";

/// The segment generation: a counter bumped by whoever deletes or replaces segment files, so
/// followers list the directory only when it moved (`log/generation.rs`).
pub const SEGMENTS_GENERATION_FILE: &str = ".kafkalite-segments";

/// Group commit's shared watermarks (appended, durable) and, by its `flock`, the sync lock of
/// `flush="always"` writers (`fsync_batch.rs`).
pub const DURABLE_FILE: &str = ".kafkalite-durable";

// -- a data directory's own files ------------------------------------------------------------

/// Topic metadata: the snapshot (`datadir/metadata_file.rs`); its presence makes a kafkalite
/// data directory.
pub const TOPICS_FILE: &str = ".kafkalite-topics.json";
/// Topic metadata: the changes since the snapshot, appended (`datadir/journal.rs`).
pub const TOPICS_JOURNAL_FILE: &str = ".kafkalite-topics.journal";
/// Serializes changes to `TOPICS_FILE` and `TOPICS_JOURNAL_FILE` (`datadir.rs`).
pub const ADMIN_LOCK_FILE: &str = ".kafkalite-admin.lock";
/// The counter producers bump after appending (`notify.rs`).
pub const NOTIFY_FILE: &str = ".kafkalite-notify";
/// Serializes read-modify-write of Kafka's shared checkpoint files (`checkpoint.rs`).
pub const CHECKPOINT_LOCK_FILE: &str = ".kafkalite-checkpoints.lock";
/// The next producer id `InitProducerId` hands out, reserved in blocks (`producer_ids.rs`).
pub const PRODUCER_IDS_FILE: &str = ".kafkalite-producer-ids";
/// SASL/SCRAM users: salted, hashed credentials, never passwords; mode 0600 (`users.rs`).
pub const USERS_FILE: &str = ".kafkalite-users.json";
/// The secret the server derives an unknown SCRAM user's made-up salt from, so the salt is the
/// same for the same name across restarts and servers of the directory; mode 0600
/// (`server/credentials.rs`).
pub const SCRAM_DECOY_KEY_FILE: &str = ".kafkalite-scram-decoy.key";
/// The server's ACLs (Kafka's ACL model); mode 0600 (`server/authorizer.rs`).
pub const ACLS_FILE: &str = ".kafkalite-acls.json";
/// The client quotas (`quotas.rs`: Kafka's `/config/users` and `/config/clients` quota configs).
pub const QUOTAS_FILE: &str = ".kafkalite-quotas.json";
/// Consumer-group state, one folder per group.
pub const GROUPS_DIR: &str = ".kafkalite-groups";
/// In a group's folder: the flock serializing every change of the group's membership, taken by
/// embedded members (`group.py`) and by `kafkalite serve` when it claims the group.
pub const GROUP_STATE_LOCK_FILE: &str = "state.lock";
/// In a group's folder: held (exclusive flock, for as long as the group has network members) by
/// the `kafkalite serve` that coordinates the group; holds its pid and address for messages.
/// The kernel drops the flock when that server dies, however it dies (`server/group_owner.rs`).
pub const GROUP_NETWORK_OWNER_FILE: &str = "network-owner.lock";

/// Transaction coordination: one lock file per transactional id (`<id_file_name>.lock`), the
/// flock every coordinator operation on that id holds (`transactions/lock.rs`), embedded
/// producers and `kafkalite serve` alike; it dies with its holder.
pub const TRANSACTIONS_DIR: &str = ".kafkalite-transactions";
/// The suffix of a transactional id's lock file in `TRANSACTIONS_DIR`.
pub const TRANSACTION_LOCK_SUFFIX: &str = ".lock";
/// The boot id (Linux's `/proc/sys/kernel/random/boot_id`) `kafkalite serve` last served
/// transactions under: a start under another boot aborts the transactions still open
/// (`transactions/boot_id.rs`).
pub const BOOT_ID_FILE: &str = ".kafkalite-boot-id";

/// Kafka's per-log-directory checkpoint files (`CheckpointFile`: version line 0, count line,
/// then `topic partition offset` lines), shared by every partition of the directory.
pub const KAFKA_LOG_START_OFFSET: &str = "log-start-offset-checkpoint";
pub const KAFKA_RECOVERY_POINT: &str = "recovery-point-offset-checkpoint";
pub const KAFKA_CLEANER_OFFSET: &str = "cleaner-offset-checkpoint";
/// A Kafka broker's log-directory identity file.
pub const KAFKA_META_PROPERTIES: &str = "meta.properties";
/// Files a Kafka broker keeps in every partition folder and kafkalite never writes (the topic
/// id since Kafka 2.8; the leader epochs since 0.11): how a broker's log directory without
/// `meta.properties` is told from partition folders that kafkalite's `Log` made.
pub const KAFKA_PARTITION_FILES: [&str; 2] = ["partition.metadata", "leader-epoch-checkpoint"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        assert_eq!(file_name(42, LOG_SUFFIX), "00000000000000000042.log");
        assert_eq!(parse_base_offset("00000000000000000042.log", LOG_SUFFIX), Some(42));
        assert_eq!(parse_base_offset("42.log", LOG_SUFFIX), None, "Kafka's names have 20 digits");
        assert_eq!(parse_base_offset("-0000000000000000042.log", LOG_SUFFIX), None);
        assert_eq!(parse_base_offset("00000000000000000042.index", LOG_SUFFIX), None);
        assert_eq!(
            marked_path(Path::new("d"), 7, LOG_SUFFIX, SWAP_SUFFIX),
            Path::new("d/00000000000000000007.log.swap")
        );
    }
}

// -- group and member ids as file names -----------------------------------------------------

/// Encoded names longer than this are hashed (`id_file_name`): NAME_MAX is 255 bytes, and a
/// member file adds ".member".
pub const ID_NAME_MAX: usize = 200;
/// A hashed name is this, then the SHA-256 of the id's UTF-8 bytes in lowercase hex (the id
/// itself is then read back from the group's state.json, `group_files.py`).
pub const HASHED_ID_PREFIX: &str = "=";

/// The file-name component that stands for a group id (`GROUPS_DIR/<name>`) or a member id
/// (`<name>.member`), for `group_files.py` and the server alike: one path component, never "." or
/// "..", never longer than `ID_NAME_MAX`, different for every id. An id of `[A-Za-z0-9._-]`
/// (not "." or "..") is its own name; any other id is its UTF-8 bytes with every byte but
/// `[A-Za-z0-9_-]` written `%XX` (the dot too, so no encoded name is "." or "..": a plain name
/// never holds '%', an encoded one always does, so the mapping is injective); a name longer
/// than `ID_NAME_MAX` is `HASHED_ID_PREFIX` + the id's SHA-256. Existing group folders were
/// named by exactly these rules (they were Python's first): they must never change.
/// `what` names the id in the error for an empty one.
pub fn id_file_name(value: &str, what: &str) -> crate::storage::error::Result<String> {
    use sha2::{Digest, Sha256};
    use std::fmt::Write as _;

    if value.is_empty() {
        return Err(crate::storage::error::Error::InvalidConfig(format!("{what} must not be empty")));
    }
    let plain = value.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
        && value != "."
        && value != "..";
    let mut name = String::with_capacity(value.len());
    if plain {
        name.push_str(value);
    } else {
        for b in value.bytes() {
            if b.is_ascii_alphanumeric() || b == b'_' || b == b'-' {
                name.push(b as char);
            } else {
                let _ = write!(name, "%{b:02X}");
            }
        }
    }
    if name.len() <= ID_NAME_MAX {
        return Ok(name);
    }
    let mut hashed = String::from(HASHED_ID_PREFIX);
    for b in Sha256::digest(value.as_bytes()) {
        let _ = write!(hashed, "{b:02x}");
    }
    Ok(hashed)
}

#[cfg(test)]
mod id_name_tests {
    use super::*;

    #[test]
    fn plain_encoded_and_hashed_names() {
        assert_eq!(id_file_name("orders.v1_x-y", "g").unwrap(), "orders.v1_x-y");
        assert_eq!(id_file_name("a b/c", "g").unwrap(), "a%20b%2Fc");
        assert_eq!(id_file_name("..", "g").unwrap(), "%2E%2E");
        assert_eq!(id_file_name("\u{e9}", "g").unwrap(), "%C3%A9");
        assert_eq!(id_file_name(&"x".repeat(200), "g").unwrap(), "x".repeat(200));
        // hashlib.sha256(b"x" * 201).hexdigest()
        let hashed = "=84a0678c90937f5dcf9994d5866668da6b995109c8ad845410559b48a4ecafed";
        assert_eq!(id_file_name(&"x".repeat(201), "g").unwrap(), hashed);
        assert!(id_file_name("", "group_id").unwrap_err().to_string().contains("group_id must not be empty"));
    }
}
