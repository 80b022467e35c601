//! Appending to a partition and rolling its active segment.

use crate::storage::checkpoint::sync_dir;
use crate::storage::error::{Error, IoContext, Result};
use crate::storage::fsync_batch::Ticket;
use crate::storage::options::FlushPolicy;
use crate::storage::record::header::{compute_crc, BatchHeader, ATTR_TIMESTAMP_LOG_APPEND};
use crate::storage::record::scan::{next_batch, Next};
use crate::storage::record::{
    encode_batches, fill_batches, for_each_record, record_area, BatchBuilder, EncodeRecord, ProducerStamp, RecordInput,
    TimestampType, ValueInput,
};
use crate::storage::segment::Segment;

use super::{now_ms, Log};

/// What a deferred append gives: the batch's (first, last) offsets, and under flush="always"
/// the ticket to wait for before acknowledging it.
pub type DeferredAppend = ((i64, i64), Option<Ticket>);

/// What `Log::try_append_builder_deferred` did with a batch.
pub enum TryAppend {
    Done(DeferredAppend),
    /// Not appended: another writer holds the append lock. Nothing is held.
    Busy(BatchBuilder),
    /// Not appended: the batch starts a new segment. The append lock stays held until the
    /// `RollHold` is given to `Log::append_rolling` (or dropped).
    Rolls(BatchBuilder, RollHold),
}

/// The append lock hold of a `TryAppend::Rolls` (None for an exclusive writer, which holds
/// every lock anyway).
pub struct RollHold {
    guard: Option<crate::storage::lock::AppendGuard>,
}

/// Whether the directory entries of a log's segments, up to its newest when this was made, are
/// durable: set once a directory sync returned after that segment was created (`durable_tickets`).
pub type DirDurable = std::sync::Arc<std::sync::atomic::AtomicBool>;

/// Upper bound for the batches `append_records` builds, below `max_message_bytes`.
const TARGET_BATCH_BYTES: usize = 1 << 20;

/// Kafka's broker refuses keyless records on compacted topics the same way.
fn null_key_error() -> Error {
    Error::InvalidRecord(
        "the topic is compacted (cleanup.policy=compact), so every record needs a key; this one has a null key".into(),
    )
}

impl Log {
    /// Run `f` as the partition's writer: shared writers take the append lock and first catch
    /// up with what the others appended; an exclusive writer already holds everything. Under
    /// flush="always", what `f` appended is then made durable by group commit, after the append
    /// lock is released (unless `f` took the ticket to wait for it later).
    pub(crate) fn as_writer<T>(&mut self, f: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        let result = self.as_writer_locked(f);
        let ticket = self.pending_durable.take();
        let value = result?;
        if let Some(ticket) = ticket {
            match &mut self.deferred_durable {
                Some(deferred) => *deferred = Some(ticket),
                None => self.wait_durable(&ticket)?,
            }
        }
        Ok(value)
    }

    /// Run `f` (an append) without waiting for durability: under flush="always" returns the
    /// ticket the caller must wait for (`Ticket::wait`) before acknowledging, so a caller that
    /// shares this log between threads can wait outside its lock and the threads' appends share
    /// one sync.
    pub fn defer_durability<T>(&mut self, f: impl FnOnce(&mut Self) -> Result<T>) -> Result<(T, Option<Ticket>)> {
        self.deferred_durable = Some(None);
        let result = f(self);
        let ticket = self.deferred_durable.take().flatten();
        Ok((result?, ticket))
    }

    /// The longest wait for another writer's sync from now (the lock timeout).
    pub fn durability_deadline(&self) -> Option<std::time::Instant> {
        self.config.lock_timeout.map(|t| std::time::Instant::now() + t)
    }

    fn as_writer_locked<T>(&mut self, f: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        self.check_writable()?;
        let Some(lock) = self.lock.as_ref().filter(|l| l.is_shared()) else {
            self.check_not_deleted()?;
            let result = f(self);
            self.release_idle_descriptors();
            return result;
        };
        let _append = if self.append_held {
            None
        } else {
            let deadline =
                self.lock_deadline.or_else(|| self.config.lock_timeout.map(|t| std::time::Instant::now() + t));
            Some(lock.enter(deadline)?)
        };
        self.check_not_deleted()?;
        self.follow_and_take_tail()?;
        f(self)
    }

    /// Run `f` (appends, as with the other methods) holding the partition's append lock if it is
    /// free now; `Ok(None)`, without running `f`, when another writer holds it. For a caller that
    /// must not block while it waits (the server: it retries with backoff, off its locks, until
    /// its own deadline), and that must know whether `f` ran: a `LockTimeout` from inside `f`
    /// (a wait for another writer's sync) is not "the lock was busy", so it is returned as an error.
    pub fn try_with_append_lock<T>(&mut self, f: impl FnOnce(&mut Self) -> Result<T>) -> Result<Option<T>> {
        let Some(guard) = self.try_enter_append_lock()? else { return Ok(None) };
        // Under flush="always" the sync is waited for after the lock is released, as `as_writer`
        // does (unless a `defer_durability` around this call takes the ticket).
        let deferring = self.deferred_durable.is_none();
        if deferring {
            self.deferred_durable = Some(None);
        }
        let result = self.with_append_held(guard.is_some(), f);
        drop(guard);
        let ticket = if deferring { self.deferred_durable.take().flatten() } else { None };
        let value = result?;
        if let Some(ticket) = ticket {
            self.wait_durable(&ticket)?;
        }
        Ok(Some(value))
    }

    /// The append lock without waiting (the `try_` appends): `None` when another writer holds
    /// it; the guard inside is `None` for an exclusive writer, which holds every lock anyway.
    fn try_enter_append_lock(&self) -> Result<Option<Option<crate::storage::lock::AppendGuard>>> {
        match self.lock.as_ref().filter(|l| l.is_shared()) {
            None => Ok(Some(None)),
            Some(lock) => Ok(lock.try_enter()?.map(Some)),
        }
    }

    /// Run `f` with `append_held` set to `held` (the caller holds the append lock, so the
    /// appends inside do not take it again: `as_writer_locked`), restored afterwards, also when
    /// `f` fails.
    fn with_append_held<T>(&mut self, held: bool, f: impl FnOnce(&mut Self) -> T) -> T {
        let was_held = std::mem::replace(&mut self.append_held, held);
        let result = f(self);
        self.append_held = was_held;
        result
    }

    /// Who holds this partition's append lock (the pid when the kernel tells), for a warning
    /// after a wait for it ran out.
    pub fn append_lock_holder(&self) -> String {
        self.lock.as_ref().map_or_else(|| "nobody (an exclusive writer)".into(), |l| l.append_holder())
    }

    /// Wait for group commit to make `ticket` durable. A failed sync poisons the log (a
    /// timeout waiting for another writer's sync does not: nothing failed).
    pub fn wait_durable(&mut self, ticket: &Ticket) -> Result<()> {
        let deadline = self.durability_deadline();
        ticket.wait(deadline).inspect_err(|e| {
            if !matches!(e, Error::LockTimeout { .. }) {
                self.poisoned = Some(e.to_string());
            }
        })
    }

    fn log_append_time(&self) -> Option<i64> {
        match self.config.timestamp_type {
            TimestampType::LogAppendTime => Some(now_ms()),
            TimestampType::CreateTime => None,
        }
    }

    /// Append records, building batches of up to ~1 MiB. Returns (first, last) offset.
    pub fn append_records(&mut self, records: &[RecordInput<'_>]) -> Result<(i64, i64)> {
        if self.config.compact && records.iter().any(|r| r.key.is_none()) {
            return Err(null_key_error());
        }
        self.append_inputs(records.iter().copied(), records.len(), "append")
    }

    /// Append values with null keys and no headers, all stamped `timestamp`.
    pub fn append_values(&mut self, values: &[&[u8]], timestamp: i64) -> Result<(i64, i64)> {
        if self.config.compact {
            return Err(null_key_error());
        }
        let inputs = values.iter().map(|&value| ValueInput { value, timestamp });
        self.append_inputs(inputs, values.len(), "append_values")
    }

    /// Encode `count` records into batches that stay under the target size, and append them.
    fn append_inputs(
        &mut self,
        inputs: impl Iterator<Item = impl EncodeRecord>,
        count: usize,
        what: &str,
    ) -> Result<(i64, i64)> {
        self.check_writable()?;
        if count == 0 {
            return Err(Error::config(format!("{what} needs at least one record")));
        }
        self.as_writer(|log| log.append_inputs_locked(inputs, count))
    }

    fn append_inputs_locked(
        &mut self,
        inputs: impl Iterator<Item = impl EncodeRecord>,
        count: usize,
    ) -> Result<(i64, i64)> {
        let first = self.end_offset();
        let target = self.target_batch_bytes();
        let builder = self.new_builder(target);
        let last = fill_batches(builder, inputs, target, |full| {
            self.append_built(full)?;
            Ok(self.new_builder(target))
        })?;
        self.append_built(last)?;
        self.after_append(count as u64)?;
        Ok((first, self.end_offset() - 1))
    }

    /// `records` encoded as this log's appends would batch them (compression, batch size
    /// target, the compacted topic's key rule, `max_message_bytes`) and stamped with `producer`
    /// (`record::encode_batches`), without appending: a caller that appends several partitions
    /// encodes them all first, so a record a partition refuses fails before any append, then
    /// hands each result to `append_produce` (`transactional`: a transactional producer's).
    pub fn encode_batches(
        &self,
        records: &[RecordInput<'_>],
        producer: ProducerStamp,
        transactional: bool,
    ) -> Result<Vec<u8>> {
        if self.config.compact && records.iter().any(|r| r.key.is_none()) {
            return Err(null_key_error());
        }
        let data =
            encode_batches(records, self.config.compression, self.target_batch_bytes(), producer, transactional)?;
        let mut pos = 0;
        while pos < data.len() {
            let size = BatchHeader::parse(&data[pos..])?.total_size();
            if size > self.config.max_message_bytes {
                return Err(Error::RecordTooLarge { size, max: self.config.max_message_bytes });
            }
            pos += size;
        }
        Ok(data)
    }

    /// Append one batch a client built (a producer's per-partition buffer). Returns (first, last).
    pub fn append_builder(&mut self, builder: BatchBuilder) -> Result<(i64, i64)> {
        let (range, ticket) = self.append_builder_deferred(builder)?;
        if let Some(ticket) = ticket {
            self.wait_durable(&ticket)?;
        }
        Ok(range)
    }

    /// `append_builder` without waiting for durability: under flush="always" it also returns
    /// the ticket to wait for (`Ticket::wait`, `fsync_batch::wait_all`) before acknowledging,
    /// so a producer can hand the batches of several partitions to one wait and append more
    /// meanwhile.
    pub fn append_builder_deferred(&mut self, builder: BatchBuilder) -> Result<DeferredAppend> {
        let mut held = Some(builder);
        let appended = self.append_held_deferred(&mut held, true)?;
        appended.ok_or_else(|| Error::config("cannot append an empty batch")) // (may_roll: always Some)
    }

    /// `append_builder_deferred` only if it can be done at once and quickly: no other writer
    /// holds the partition's append lock now (no wait; `TryAppend::Busy` gives the batch back
    /// untouched, nothing held), the batch fits the active segment (a roll writes and syncs
    /// checkpoints, the producer snapshot and under flush="always" the sealed segment), and the
    /// append itself does not sync (`appends_without_syncing`). The producer appends this way
    /// while holding the GIL, and does the rest (waiting for the lock, rolling) with the GIL
    /// released: releasing and retaking the GIL for every batch handed it to the other Python
    /// threads and back, which cost more than the append itself.
    ///
    /// A batch that would roll comes back as `TryAppend::Rolls` with the append lock still
    /// held (`RollHold`): the caller appends it in that same hold (`append_rolling`) once it
    /// may block. Releasing the lock there would make a hold that appended nothing: another
    /// writer could append in between, and a trace of the lock's holds could no longer pair
    /// each hold of a producer with the batch it wrote (tests/engine/test_power_loss_group_commit.py).
    pub fn try_append_builder_deferred(&mut self, builder: BatchBuilder) -> Result<TryAppend> {
        let Some(guard) = self.try_enter_append_lock()? else { return Ok(TryAppend::Busy(builder)) };
        let mut held = Some(builder);
        let result = self.with_append_held(guard.is_some(), |log| log.append_held_deferred(&mut held, false));
        match (result?, held) {
            (Some(appended), _) => Ok(TryAppend::Done(appended)),
            (None, Some(builder)) => Ok(TryAppend::Rolls(builder, RollHold { guard })),
            (None, None) => Err(Error::config("cannot append an empty batch")),
        }
    }

    /// Append a batch `try_append_builder_deferred` gave back as `Rolls`, rolling the segment,
    /// in the append lock hold it kept (released when this returns).
    pub fn append_rolling(&mut self, builder: BatchBuilder, hold: RollHold) -> Result<DeferredAppend> {
        let result = self.with_append_held(hold.guard.is_some(), |log| log.append_builder_deferred(builder));
        drop(hold);
        result
    }

    /// Whether an append that does not roll returns without syncing: flush="os", or
    /// flush="always" once the partition's group commit is joined (the appender waits for the
    /// ticket afterwards, outside its locks). Not flush every N messages: the Nth append syncs.
    pub fn appends_without_syncing(&self) -> bool {
        match self.config.flush {
            FlushPolicy::Os => true,
            FlushPolicy::Always => self.durability_ticket().is_some(),
            FlushPolicy::EveryMessages(_) => false,
        }
    }

    /// The append of `append_builder_deferred`; takes the batch out of `held` only once the
    /// append lock is held, and, unless `may_roll`, only if it fits the active segment
    /// (`Ok(None)` and the batch left in `held` when it does not).
    fn append_held_deferred(
        &mut self,
        held: &mut Option<BatchBuilder>,
        may_roll: bool,
    ) -> Result<Option<DeferredAppend>> {
        self.check_writable()?;
        let count = held.as_ref().map_or(0, |b| b.count() as u64);
        if count == 0 {
            return Err(Error::config("cannot append an empty batch"));
        }
        let mut ticket = None;
        let range = self.as_writer(|log| {
            let builder = held.take().ok_or_else(|| Error::config("cannot append an empty batch"))?;
            let first = log.end_offset();
            if !may_roll {
                let newest = log.log_append_time().unwrap_or(builder.max_timestamp());
                if log.roll_due(builder.size_upper_bound(), first + count as i64 - 1, newest) {
                    *held = Some(builder);
                    return Ok(None);
                }
            }
            log.append_built(builder)?;
            log.after_append(count)?;
            ticket = log.pending_durable.take();
            Ok(Some((first, log.end_offset() - 1)))
        })?;
        Ok(range.map(|range| (range, ticket)))
    }

    /// The LogAppendTime stamp given to the last batch this log built, if the topic uses it.
    pub fn last_log_append_time(&self) -> Option<i64> {
        self.last_log_append_time
    }

    /// Batches we build stay within max_message_bytes and within one segment.
    fn target_batch_bytes(&self) -> usize {
        TARGET_BATCH_BYTES.min(self.config.max_message_bytes).min(self.config.segment_bytes as usize)
    }

    fn new_builder(&mut self, capacity: usize) -> BatchBuilder {
        let mut buf = std::mem::take(&mut self.scratch);
        buf.reserve(capacity + crate::storage::record::header::HEADER_LEN);
        BatchBuilder::with_buffer(buf, self.config.compression, self.log_append_time())
    }

    pub(super) fn append_built(&mut self, mut builder: BatchBuilder) -> Result<()> {
        self.stamp_transactional(&mut builder)?;
        self.last_log_append_time = self.log_append_time();
        if let Some(now) = self.last_log_append_time {
            builder.stamp_log_append_time(now);
        }
        let (bytes, header) = builder.finish(0)?;
        if self.config.compact {
            let area = record_area(&bytes, &header)?;
            for_each_record(&area, &header, |r| if r.key.is_none() { Err(null_key_error()) } else { Ok(()) })?;
        }
        self.append_batch(&bytes, header)?;
        // The next builder reuses the buffer.
        if bytes.capacity() > self.scratch.capacity() {
            self.scratch = bytes;
        }
        Ok(())
    }

    /// Append pre-built v2 batches (from another Kafka client or broker): each is validated
    /// (CRC, structure, every record decodes), then given this log's next offsets. Control
    /// batches and batches whose offsets are not dense are refused. All or nothing: nothing
    /// is appended unless every batch is valid.
    pub fn append_raw_batches(&mut self, data: &[u8]) -> Result<(i64, i64)> {
        self.check_writable()?;
        let batches = self.validate_raw_batches(data)?;
        self.as_writer(|log| log.append_validated_batches(batches))
    }

    /// `append_raw_batches`' checks: every batch whole, valid and appendable by a client.
    pub(super) fn validate_raw_batches<'a>(&self, data: &'a [u8]) -> Result<Vec<(&'a [u8], BatchHeader)>> {
        let mut batches = Vec::new();
        let mut pos = 0;
        while pos < data.len() {
            let header = match next_batch(data, pos, true)? {
                Next::Batch(h) => h,
                _ => {
                    return Err(Error::corrupt(format!(
                        "{} bytes at position {pos} are not a whole record batch",
                        data.len() - pos
                    )))
                }
            };
            if header.is_control() {
                return Err(Error::config("control batches are written by brokers, not appended by clients"));
            }
            if header.records_count <= 0 || header.last_offset_delta + 1 != header.records_count {
                return Err(Error::corrupt(format!(
                    "batch at position {pos} has {} records but lastOffsetDelta {}; appended batches must have dense offsets",
                    header.records_count, header.last_offset_delta
                )));
            }
            let bytes = &data[pos..pos + header.total_size()];
            let area = record_area(bytes, &header)?;
            let compact = self.config.compact;
            for_each_record(
                &area,
                &header,
                |r| if compact && r.key.is_none() { Err(null_key_error()) } else { Ok(()) },
            )?;
            batches.push((bytes, header));
            pos += header.total_size();
        }
        if batches.is_empty() {
            return Err(Error::config("append_batches needs at least one record batch"));
        }
        Ok(batches)
    }

    pub(super) fn append_validated_batches(&mut self, batches: Vec<(&[u8], BatchHeader)>) -> Result<(i64, i64)> {
        let first = self.end_offset();
        let mut count = 0u64;
        for (bytes, mut header) in batches {
            count += header.records_count as u64;
            if let Some(now) = self.log_append_time() {
                // Broker behaviour for LogAppendTime: stamp maxTimestamp and bit 3, new CRC.
                let mut bytes = bytes.to_vec();
                header.attributes |= ATTR_TIMESTAMP_LOG_APPEND;
                header.max_timestamp = now;
                header.write(&mut bytes);
                header.crc = compute_crc(&bytes);
                header.write(&mut bytes);
                self.append_batch(&bytes, header)?;
            } else {
                // Stored as sent, straight from the caller's bytes (a Produce request's frame):
                // the new base offset goes into the prefix the segment writes.
                self.append_batch(bytes, header)?;
            }
        }
        self.after_append(count)?;
        Ok((first, self.end_offset() - 1))
    }

    /// Give a finished batch this log's next offsets, roll if needed, and write it.
    fn append_batch(&mut self, bytes: &[u8], mut header: BatchHeader) -> Result<()> {
        if bytes.len() > self.config.max_message_bytes {
            return Err(Error::RecordTooLarge { size: bytes.len(), max: self.config.max_message_bytes });
        }
        header.base_offset = self.end_offset(); // written by the segment (`Segment::append`)
        self.maybe_roll(bytes.len(), &header)?;
        let active = self.segments.last_mut().unwrap();
        if let Err(e) = active.append(bytes, &header) {
            if let Error::Poisoned(why) = &e {
                self.poisoned = Some(why.clone());
            }
            return Err(e);
        }
        if let Some(group) = &self.group {
            group.appended(active.base_offset, active.size());
        }
        self.producers_note(&header);
        Ok(())
    }

    /// Kafka's `maybeRoll`: size, time, full index or relative-offset overflow.
    fn maybe_roll(&mut self, size: usize, header: &BatchHeader) -> Result<()> {
        if self.roll_due(size, header.last_offset(), header.max_timestamp) {
            self.roll_locked()?;
        }
        Ok(())
    }

    /// Whether a batch of `size` bytes ending at `last_offset`, newest timestamp
    /// `max_timestamp`, starts a new segment (`maybe_roll`'s rule).
    fn roll_due(&self, size: usize, last_offset: i64, max_timestamp: i64) -> bool {
        let active = self.segments.last().unwrap();
        let by_time = self
            .config
            .segment_ms
            .is_some_and(|ms| active.size() > 0 && active.time_waited_for_roll(now_ms(), max_timestamp) > ms);
        by_time || active.is_full_for(size, last_offset)
    }

    /// Seal the active segment and start a new one at the log end offset.
    pub fn roll(&mut self) -> Result<()> {
        self.as_writer(|log| log.roll_locked())
    }

    /// Seal the active segment, then create the next one. A roll that fails at any step, or
    /// whose writer dies between steps, leaves a log every writer can append to: until the next
    /// segment exists, the sealed one is still the newest segment in the directory, and the
    /// next append (ours after `unseal`, another shared writer's in `adopt_for_append`, or the
    /// next open's recovery) takes it as the active segment and reserves blocks for it again.
    /// (Creating the next segment first would leave, on failure, an unsealed segment with an
    /// empty successor; a shared writer would append to the old one unless it listed the
    /// directory on every append.)
    pub(crate) fn roll_locked(&mut self) -> Result<()> {
        let base = self.end_offset();
        if self.segments.last().is_none_or(|s| s.is_empty()) {
            return Ok(());
        }
        let dir = self.dir.clone();
        let settings = self.settings();
        let flush = self.config.flush;
        let active = self.segments.last_mut().unwrap();
        crate::storage::failpoint::hit("roll.before_seal").context(|| format!("cannot roll {}", dir.display()))?;
        if let Err(e) = active.seal() {
            active.unseal();
            return Err(e);
        }
        if flush != FlushPolicy::Os {
            active.sync_all().inspect_err(|e| self.poisoned = Some(e.to_string()))?;
        }
        let created = crate::storage::failpoint::hit("roll.after_seal")
            .context(|| format!("cannot roll {}", dir.display()))
            .and_then(|()| Segment::create(&dir, base, settings, now_ms()));
        let seg = match created {
            Ok(seg) => seg,
            Err(e) => {
                active.unseal();
                ::log::warn!(
                    target: crate::LOG_TARGET,
                    "could not roll {} at offset {base} ({e}); undone, appends continue in the current segment",
                    dir.display()
                );
                return Err(e);
            }
        };
        self.segments.push(seg);
        self.flushed_position = 0;
        crate::storage::failpoint::hit("roll.after_create").context(|| format!("cannot roll {}", dir.display()))?;
        self.sync_dir_if_always()?;
        // Kafka takes a producer snapshot at every roll, named by the new segment's base.
        self.snapshot_producers(true);
        Ok(())
    }

    /// Under flush="always", a new segment's directory entries (log and indexes) are made
    /// durable before anything is acknowledged in it; a failed directory fsync poisons the log.
    pub(super) fn sync_dir_if_always(&mut self) -> Result<()> {
        if self.config.flush == FlushPolicy::Always {
            sync_dir(&self.dir).inspect_err(|e| self.poisoned = Some(e.to_string()))?;
        }
        Ok(())
    }

    pub(super) fn after_append(&mut self, records: u64) -> Result<()> {
        self.unflushed_messages += records;
        let due = match self.config.flush {
            FlushPolicy::Os => false,
            FlushPolicy::Always => match self.durability_ticket() {
                Some(ticket) => {
                    // Synced by group commit once the append lock is released (`as_writer`).
                    self.pending_durable = Some(ticket);
                    self.unflushed_messages = 0;
                    false
                }
                None => true,
            },
            FlushPolicy::EveryMessages(n) => self.unflushed_messages >= n,
        };
        if due {
            self.flush_data()?;
        }
        Ok(())
    }

    /// What makes every byte appended from offset `since` on durable, whatever this log's flush
    /// policy (a server answering acks=all once on disk): one ticket per segment holding such
    /// bytes, to wait for with `fsync_batch::wait_all` outside any lock, and the directory's
    /// state: its entries are durable once the flag is set; until then the waiter syncs the
    /// directory and sets it (flush="always" syncs it at every roll, other policies do not, so
    /// a new flag comes with each newer segment). Joins the partition's group commit on first
    /// use, so this writer's later appends publish their end and one sync covers them all;
    /// until then the first ticket may sync its whole segment (`sync_round`'s stale-watermark
    /// case). Segments rolled away are synced through their read maps (msync syncs the file's
    /// range whichever shared mapping dirtied it).
    pub fn durable_tickets(&mut self, since: i64) -> Result<(Vec<Ticket>, DirDurable)> {
        if self.group.is_none() {
            self.group = Some(crate::storage::fsync_batch::GroupCommit::open(&self.dir)?);
        }
        let group = self.group.as_ref().expect("joined just above");
        let first = self.segments.partition_point(|s| s.base_offset <= since).saturating_sub(1);
        let tickets = self.segments[first..]
            .iter()
            .filter_map(|s| s.map().map(|m| Ticket::new(group, s.base_offset, s.size(), m.clone(), s.log_path())))
            .collect();
        let newest = self.segments.last().map_or(self.start_offset, |s| s.base_offset);
        let dir = match &self.durable_dir {
            Some((base, dir)) if *base == newest => dir.clone(),
            _ => self.durable_dir.insert((newest, DirDurable::default())).1.clone(),
        };
        Ok((tickets, dir))
    }

    /// What the appends so far wait for: the active segment durable up to its end.
    fn durability_ticket(&self) -> Option<Ticket> {
        let group = self.group.as_ref()?;
        let active = self.segments.last()?;
        let map = active.write_map()?;
        Some(Ticket::new(group, active.base_offset, active.size(), map, active.log_path()))
    }
}
