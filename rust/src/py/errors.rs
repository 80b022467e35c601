//! Engine errors become the exception classes defined in Python (`kafkalite.errors`), so
//! they can subclass both `KafkaliteError` and the matching builtin (ValueError, OSError...).

use pyo3::prelude::*;

use crate::error::Error;

fn class_name(e: &Error) -> &'static str {
    match e {
        Error::Corrupt(_) => "CorruptRecordError",
        Error::OffsetOutOfRange { .. } => "OffsetOutOfRangeError",
        Error::Locked { .. } | Error::LockTimeout { .. } => "LogLockedError",
        Error::InvalidConfig(_) => "InvalidConfigError",
        Error::RecordTooLarge { .. } => "RecordTooLargeError",
        Error::InvalidRecord(_) => "InvalidRecordError",
        Error::Unsupported(_) => "UnsupportedFormatError",
        Error::Closed(_) => "LogClosedError",
        Error::Poisoned(_) | Error::LogPoisoned(_) => "LogPoisonedError",
        Error::UnknownTopicOrPartition(_) => "UnknownTopicOrPartitionError",
        Error::Io { .. } => "KafkaliteIOError",
    }
}

impl From<Error> for PyErr {
    fn from(e: Error) -> PyErr {
        Python::attach(|py| {
            let msg = e.to_string();
            match py.import("kafkalite.errors").and_then(|m| m.getattr(class_name(&e))) {
                Ok(cls) => match cls.call1((msg,)) {
                    Ok(instance) => PyErr::from_value(instance),
                    Err(err) => err,
                },
                Err(err) => err,
            }
        })
    }
}
