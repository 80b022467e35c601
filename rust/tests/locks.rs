//! Failure paths of the engine's locks: the cross-process append lock is released on every way
//! out of its critical section, and a mutex poisoned by a panic is an error, not a silent recovery.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kafkalite::storage::lock::WriterLock;
use kafkalite::storage::log::TryAppend;
use kafkalite::storage::sync::lock_log;
use kafkalite::{Error, Log, LogConfig, Result};

/// Two shared writers of one partition, as two processes would hold them (flock locks belong
/// to the open file, so two opens in one process exclude each other like two processes).
fn two_shared_writers(dir: &std::path::Path) -> (WriterLock, WriterLock) {
    let mut first = WriterLock::shared(dir).unwrap();
    assert!(first.alone());
    first.share().unwrap();
    let second = WriterLock::shared(dir).unwrap();
    assert!(!second.alone());
    (first, second)
}

/// A critical section that fails half way with `?`, as an append that meets a full disk does.
fn failing_critical_section(lock: &WriterLock) -> Result<()> {
    let _append = lock.enter(None)?;
    Err(Error::corrupt("injected failure inside the append lock"))?;
    unreachable!("the `?` above returns");
}

#[test]
fn append_lock_is_released_by_a_question_mark_return() {
    let dir = tempfile::tempdir().unwrap();
    let (first, second) = two_shared_writers(dir.path());

    // While the first holds the lock, the second times out: the lock is real.
    let held = first.enter(None).unwrap();
    let waited = second.enter(Some(Instant::now() + Duration::from_millis(50)));
    assert!(matches!(waited, Err(Error::LockTimeout { .. })), "{waited:?}");
    drop(held);

    let failed = failing_critical_section(&first);
    assert!(matches!(failed, Err(Error::Corrupt(_))), "{failed:?}");
    // The early return dropped the guard: the other writer gets the lock at once.
    let taken = second.enter(Some(Instant::now() + Duration::from_secs(5)));
    assert!(taken.is_ok(), "the append lock stayed held after an early return: {taken:?}");
}

#[test]
fn a_shared_log_whose_append_fails_lets_the_other_writer_in() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events-0");
    let config = LogConfig {
        shared_writers: true,
        max_message_bytes: 1024,
        lock_timeout: Some(Duration::from_secs(5)),
        ..LogConfig::default()
    };
    let mut first = Log::open(&path, config.clone()).unwrap();
    let mut second = Log::open(&path, config).unwrap();
    // Refused inside the append lock (the batch is built and measured there).
    let big = vec![b'x'; 4096];
    let refused = first.append_values(&[big.as_slice()], 1);
    assert!(refused.is_err(), "a batch above max_message_bytes was accepted");
    second.append_values(&[b"after".as_slice()], 2).unwrap();
    first.append_values(&[b"again".as_slice()], 3).unwrap();
    assert_eq!(first.end_offset(), 2);
}

#[test]
fn a_poisoned_log_mutex_is_an_error() {
    let shared = Arc::new(Mutex::new(0u64));
    let holder = Arc::clone(&shared);
    let panicked = std::thread::spawn(move || {
        let _guard = holder.lock().unwrap();
        panic!("injected panic while holding the log's mutex");
    })
    .join();
    assert!(panicked.is_err());
    match lock_log(&shared, || "the log of events-0".to_string()) {
        Err(e @ Error::LogPoisoned(_)) => {
            let message = e.to_string();
            assert!(message.contains("the log of events-0") && message.contains("open it again"), "{message}");
        }
        other => panic!("expected Error::LogPoisoned, got {:?}", other.map(|g| *g)),
    }
    // A mutex nobody poisoned locks as usual.
    let fine = Mutex::new(1u64);
    assert_eq!(*lock_log(&fine, String::new).unwrap(), 1);
}

/// A one-record batch, as a producer's accumulator hands it over.
fn one_record_batch(value: &[u8]) -> kafkalite::storage::record::BatchBuilder {
    use kafkalite::storage::record::{BatchBuilder, Compression, RecordInput};
    let mut batch = BatchBuilder::new(Compression::None, None, 256);
    batch.push(&RecordInput { key: None, value: Some(value), headers: &[], timestamp: 1 });
    batch
}

#[test]
fn try_append_gives_the_batch_back_while_another_writer_holds_the_append_lock() {
    // The producer appends with the GIL held only through this: it must not wait for the lock,
    // must not lose the batch when the lock is taken, and must leave later appends their wait.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events-0");
    let config = LogConfig { shared_writers: true, lock_timeout: Some(Duration::from_secs(5)), ..LogConfig::default() };
    let mut log = Log::open(&path, config).unwrap();
    let other = Arc::new(WriterLock::shared(&path).unwrap());
    let held = other.enter(None).unwrap();
    let started = Instant::now();
    let TryAppend::Busy(back) = log.try_append_builder_deferred(one_record_batch(b"first")).unwrap() else {
        panic!("appended while another writer held the append lock");
    };
    assert!(started.elapsed() < Duration::from_secs(1), "waited for the lock: {:?}", started.elapsed());
    assert_eq!((back.count(), log.end_offset()), (1, 0));
    drop(held);
    let TryAppend::Done(((first, last), _)) = log.try_append_builder_deferred(back).unwrap() else {
        panic!("the batch came back though the lock is free");
    };
    assert_eq!((first, last), (0, 0));
    // A plain append afterwards still waits for a held lock (up to lock_timeout), not just tries it.
    let held = other.enter(None).unwrap();
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        drop(held);
    });
    let ((first, _), _) = log.append_builder_deferred(one_record_batch(b"second")).unwrap();
    releaser.join().unwrap();
    assert_eq!(first, 1);
    assert_eq!(log.end_offset(), 2);
}

#[test]
fn try_append_gives_back_a_batch_that_would_roll_the_segment_still_holding_the_append_lock() {
    // A roll writes and syncs checkpoints and the producer snapshot (under flush="always" the
    // sealed segment too): the producer does it with the GIL released (`append_rolling`), so the
    // GIL-held try gives the batch back, keeping the append lock for that very append: a hold
    // that appended nothing would let another writer in between.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events-0");
    let config = LogConfig {
        segment_bytes: 200,
        shared_writers: true,
        lock_timeout: Some(Duration::from_secs(5)),
        ..LogConfig::default()
    };
    let mut log = Log::open(&path, config).unwrap();
    let other = WriterLock::shared(&path).unwrap();
    let TryAppend::Done(_) = log.try_append_builder_deferred(one_record_batch(&[b'x'; 120])).unwrap() else {
        panic!("the first batch of an empty segment never rolls");
    };
    assert!(other.try_enter().unwrap().is_some(), "an append that did not roll kept the append lock");
    let TryAppend::Rolls(back, hold) = log.try_append_builder_deferred(one_record_batch(&[b'y'; 120])).unwrap() else {
        panic!("appended a batch that rolled the segment");
    };
    assert_eq!((back.count(), log.end_offset(), log.segments().len()), (1, 1, 1));
    assert!(other.try_enter().unwrap().is_none(), "the append lock was released before the rolling append");
    let ((first, _), _) = log.append_rolling(back, hold).unwrap();
    assert_eq!((first, log.end_offset(), log.segments().len()), (1, 2, 2));
    assert!(other.try_enter().unwrap().is_some(), "the rolling append kept the append lock");
}

#[test]
fn try_with_append_lock_runs_nothing_while_another_writer_holds_the_lock() {
    // The server tries the lock and waits elsewhere (without the log) between tries: a busy lock
    // must come back at once without running the append, and a free one run it once, holding it.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events-0");
    let config =
        LogConfig { shared_writers: true, lock_timeout: Some(Duration::from_secs(60)), ..LogConfig::default() };
    let mut log = Log::open(&path, config).unwrap();
    let other = WriterLock::shared(&path).unwrap();
    let held = other.enter(None).unwrap();
    let started = Instant::now();
    let mut runs = 0;
    let busy = log.try_with_append_lock(|log| {
        runs += 1;
        log.append_values(&[b"first".as_slice()], 1)
    });
    assert!(matches!(busy, Ok(None)), "{busy:?}");
    assert!(started.elapsed() < Duration::from_secs(1), "waited for the lock: {:?}", started.elapsed());
    assert_eq!((runs, log.end_offset()), (0, 0));
    drop(held);
    let done = log.try_with_append_lock(|log| {
        runs += 1;
        // Inside, the lock is this writer's: the other one cannot take it.
        assert!(matches!(other.try_enter(), Ok(None)));
        log.append_values(&[b"first".as_slice()], 1)
    });
    assert!(matches!(done, Ok(Some(_))), "{done:?}");
    assert_eq!((runs, log.end_offset()), (1, 1));
    // Released on the way out.
    assert!(matches!(other.try_enter(), Ok(Some(_))));
}
