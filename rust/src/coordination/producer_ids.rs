//! Producer ids for `InitProducerId`, unique in a data directory across restarts and across
//! the processes serving it (Kafka's `ProducerIdManager`): ids are reserved in blocks of
//! `BLOCK_SIZE` by moving the number in `PRODUCER_IDS_FILE` forward under the data
//! directory's checkpoint lock, written atomically before any id of the block is handed out.
//! A restart starts at the next block, so an id is never handed out twice (the rest of a
//! block dies with its process, as Kafka's does).
//!
//! The id space is split so network producers never meet the ids the embedded side stamps:
//! ids handed out here are below `FIRST_SINK_PRODUCER_ID`, and the Spark sink's ids (derived
//! from the sink id, `spark/sink.py`) are at or above it.

use std::io::Read;
use std::path::{Path, PathBuf};

use crate::storage::checkpoint::{lock_data_dir, write_atomically};
use crate::storage::error::{Error, Result};
use crate::storage::files::PRODUCER_IDS_FILE;

/// Kafka's `ProducerIdsBlock` size: ids reserved per write of `PRODUCER_IDS_FILE`.
pub const BLOCK_SIZE: i64 = 1000;
/// The first producer id of the range the Spark sink stamps (bit 62 set); `InitProducerId`
/// hands out ids below it.
pub const FIRST_SINK_PRODUCER_ID: i64 = 1 << 62;

/// The ids of one data directory; one per server process.
#[derive(Debug)]
pub struct ProducerIds {
    data_dir: PathBuf,
    next: i64,
    limit: i64,
}

impl ProducerIds {
    pub fn new(data_dir: &Path) -> ProducerIds {
        ProducerIds { data_dir: data_dir.to_path_buf(), next: 0, limit: 0 }
    }

    /// A producer id never handed out before in this data directory.
    pub fn allocate(&mut self) -> Result<i64> {
        if self.next >= self.limit {
            self.reserve_block()?;
        }
        let id = self.next;
        self.next += 1;
        Ok(id)
    }

    fn reserve_block(&mut self) -> Result<()> {
        let _lock = lock_data_dir(&self.data_dir)?;
        let first = read_next(&self.data_dir)?;
        let limit = first + BLOCK_SIZE;
        if limit > FIRST_SINK_PRODUCER_ID {
            return Err(Error::CorruptMetadata(format!(
                "{} says the next producer id is {first}: the ids below {FIRST_SINK_PRODUCER_ID} are used up",
                self.data_dir.join(PRODUCER_IDS_FILE).display()
            )));
        }
        write_atomically(&self.data_dir, PRODUCER_IDS_FILE, format!("{limit}\n").as_bytes())?;
        (self.next, self.limit) = (first, limit);
        Ok(())
    }
}

/// The next unreserved id: 0 when the file does not exist yet. A damaged file is an error, not
/// 0: starting again would hand out ids whose old batches are still in the logs, and their
/// retries would be taken for duplicates.
fn read_next(data_dir: &Path) -> Result<i64> {
    let path = data_dir.join(PRODUCER_IDS_FILE);
    let mut text = String::new();
    match crate::storage::nofollow::open_read(&path, "producer id file") {
        Ok(mut f) => f
            .read_to_string(&mut text)
            .map_err(|e| Error::io_at(&path, format!("cannot read {}", path.display()), e))?,
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    match text.trim().parse::<i64>() {
        Ok(n) if (0..FIRST_SINK_PRODUCER_ID).contains(&n) => Ok(n),
        _ => Err(Error::CorruptMetadata(format!(
            "{} is damaged (it should hold the next producer id, a number); write into it a number above every \
             producerId in the data directory's partitions (`kafkalite dump-log` shows them)",
            path.display()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_across_restarts_and_damage_is_refused() {
        let tmp = std::env::temp_dir().join(format!("kl-pids-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp).unwrap();
        let mut a = ProducerIds::new(&tmp);
        assert_eq!((a.allocate().unwrap(), a.allocate().unwrap()), (0, 1));
        // Another process (or a restart) gets the next block, never 2.
        let mut b = ProducerIds::new(&tmp);
        assert_eq!(b.allocate().unwrap(), BLOCK_SIZE);
        for _ in 2..BLOCK_SIZE {
            a.allocate().unwrap();
        }
        assert_eq!(a.allocate().unwrap(), 2 * BLOCK_SIZE, "a's next block comes after b's");
        assert_eq!(std::fs::read_to_string(tmp.join(PRODUCER_IDS_FILE)).unwrap(), format!("{}\n", 3 * BLOCK_SIZE));
        std::fs::write(tmp.join(PRODUCER_IDS_FILE), "garbage").unwrap();
        let err = ProducerIds::new(&tmp).allocate().unwrap_err();
        assert!(matches!(err, Error::CorruptMetadata(ref m) if m.contains("damaged")), "{err}");
        std::fs::write(tmp.join(PRODUCER_IDS_FILE), format!("{}", FIRST_SINK_PRODUCER_ID - 10)).unwrap();
        assert!(ProducerIds::new(&tmp).allocate().is_err(), "ids may not reach the sink's range");
        std::fs::remove_dir_all(&tmp).unwrap();
    }
}
