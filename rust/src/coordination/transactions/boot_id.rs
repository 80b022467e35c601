//! Whether this machine restarted (an OS crash, a power loss, a reboot) since `kafkalite serve`
//! last started in a data directory: Linux's boot id (`/proc/sys/kernel/random/boot_id`, a
//! random id the kernel draws at every boot) against the one the server recorded in the data
//! directory (`files::BOOT_ID_FILE`, written atomically and durably by `Coordinator::record_boot`
//! before the server's first transactional InitProducerId, and at a start that found another
//! boot and transactions in the directory). The file only ever holds the id of the boot that
//! wrote it: it can vouch for the same boot, never for one whose page cache was lost.
//!
//! Why the coordinator needs it: a served transactional Produce is answered before its records
//! are synced (`server::durable`): a transaction's records are made durable when it is decided
//! (`Coordinator::end`'s `sync_records`). A process killed keeps what it wrote in the page
//! cache, but an OS crash loses it, and a producer on another host survives that, reconnects to
//! the restarted server and could commit a transaction whose acknowledged records are gone. So a
//! start after a restart of the machine aborts every transaction still open
//! (`Coordinator::abort_open_after_reboot`), fencing their producers as a timeout does.
//!
//! What counts as a restart: a recorded id that differs from the current one, and anything
//! that does not prove the same boot: no file (the data directory's first start, or one written
//! before this rule), a file that is not a plain regular file of at most `MAX_ID_LEN` printable
//! bytes (a symbolic link is never followed, a FIFO never waited on, a huge file never read
//! whole), and no current boot id at all (not Linux: every start counts). Counting too often
//! only fences producers that were mid-transaction at the server's start (they re-initialise);
//! counting too rarely could commit missing records.
//!
//! `KAFKALITE_BOOT_ID` (tests only: the fault tests simulate a reboot with it, without one)
//! replaces the kernel's boot id when set; set empty, there is none (as off Linux).

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::storage::checkpoint::write_atomically;
use crate::storage::error::Result;
use crate::storage::files::BOOT_ID_FILE;

/// Where Linux publishes the current boot's id.
const KERNEL_BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";
/// Test-only override of the current boot id (see the module comment).
pub const BOOT_ID_ENV: &str = "KAFKALITE_BOOT_ID";
/// The longest id accepted (the kernel's is a 36-character UUID).
const MAX_ID_LEN: usize = 64;

/// What the data directory says about the boot its server last started in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recorded {
    /// No file: no server of this version started here yet.
    Missing,
    /// The recorded id.
    Id(String),
    /// A file that cannot be trusted (unreadable, not a regular file, too long, not an id): why.
    Unusable(String),
}

/// An id as kafkalite accepts it: 1 to `MAX_ID_LEN` printable ASCII characters, no spaces.
fn checked(text: &str) -> Option<&str> {
    let id = text.trim_end_matches('\n');
    (!id.is_empty() && id.len() <= MAX_ID_LEN && id.bytes().all(|b| b.is_ascii_graphic())).then_some(id)
}

/// The current boot's id: `KAFKALITE_BOOT_ID` if set (tests), else the kernel's; None when
/// there is none (not Linux, an unreadable or unexpected `/proc` file, or the variable empty).
pub fn current() -> Option<String> {
    let text = match std::env::var(BOOT_ID_ENV) {
        Ok(id) => id,
        Err(_) => std::fs::read_to_string(KERNEL_BOOT_ID).ok()?,
    };
    checked(&text).map(str::to_string)
}

/// The boot id recorded in `data_dir`, read without following a link, waiting on a FIFO or
/// reading more than `MAX_ID_LEN` + 1 bytes.
pub fn recorded(data_dir: &Path) -> Recorded {
    let path = data_dir.join(BOOT_ID_FILE);
    let mut opts = crate::storage::nofollow::options();
    opts.read(true).custom_flags((rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK).bits() as i32);
    let file = match opts.open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Recorded::Missing,
        Err(e) => return Recorded::Unusable(format!("cannot open it ({e}; a symbolic link is never followed)")),
    };
    match file.metadata() {
        Ok(m) if m.file_type().is_file() => {}
        Ok(_) => return Recorded::Unusable("it is not a regular file".into()),
        Err(e) => return Recorded::Unusable(format!("cannot stat it: {e}")),
    }
    let mut bytes = Vec::with_capacity(MAX_ID_LEN + 2);
    if let Err(e) = file.take(MAX_ID_LEN as u64 + 2).read_to_end(&mut bytes) {
        return Recorded::Unusable(format!("cannot read it: {e}"));
    }
    match std::str::from_utf8(&bytes).ok().and_then(checked) {
        Some(id) => Recorded::Id(id.to_string()),
        None => Recorded::Unusable(format!("it does not hold a boot id ({} bytes or more)", bytes.len())),
    }
}

/// Why this start counts as a restart of the machine since the recorded one, or None when the
/// recorded id proves the same boot.
pub fn rebooted(current: Option<&str>, recorded: &Recorded) -> Option<String> {
    match (current, recorded) {
        (Some(now), Recorded::Id(then)) if now == then => None,
        (None, _) => Some("this system has no boot id, so every start counts as a restart".into()),
        (Some(_), Recorded::Id(then)) => Some(format!("the machine restarted since the boot id {then:?} was recorded")),
        (Some(_), Recorded::Missing) => Some(format!("no boot id was recorded ({BOOT_ID_FILE} is missing)")),
        (Some(_), Recorded::Unusable(why)) => Some(format!("the recorded boot id is unusable: {BOOT_ID_FILE}: {why}")),
    }
}

/// Record `id` as the boot of this start, atomically and durably (a link or junk at the name is
/// replaced, never written through).
pub fn record(data_dir: &Path, id: &str) -> Result<()> {
    write_atomically(data_dir, BOOT_ID_FILE, format!("{id}\n").as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: &str = "6f1c9a53-3c4e-4d7e-a1b0-1d2a3b4c5d6e";

    fn dir() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    #[test]
    fn a_missing_file_counts_as_a_restart_then_the_recorded_id_is_the_same_boot() {
        let d = dir();
        assert_eq!(recorded(d.path()), Recorded::Missing);
        assert!(rebooted(Some(NOW), &recorded(d.path())).is_some());
        record(d.path(), NOW).unwrap();
        assert_eq!(recorded(d.path()), Recorded::Id(NOW.into()));
        assert_eq!(rebooted(Some(NOW), &recorded(d.path())), None);
    }

    #[test]
    fn a_different_id_counts_as_a_restart() {
        let d = dir();
        record(d.path(), "an-earlier-boot").unwrap();
        let why = rebooted(Some(NOW), &recorded(d.path())).unwrap();
        assert!(why.contains("an-earlier-boot"), "{why}");
    }

    #[test]
    fn no_current_boot_id_always_counts_as_a_restart() {
        let d = dir();
        record(d.path(), NOW).unwrap();
        assert!(rebooted(None, &recorded(d.path())).is_some());
    }

    #[test]
    fn junk_a_huge_file_and_an_empty_one_are_unusable_never_read_whole() {
        let d = dir();
        let path = d.path().join(BOOT_ID_FILE);
        for junk in [vec![0u8, 159, 146, 150, 255, 10], NOW.repeat(100_000).into_bytes(), Vec::new(), b"a b\n".to_vec()]
        {
            std::fs::write(&path, &junk).unwrap();
            let r = recorded(d.path());
            assert!(matches!(r, Recorded::Unusable(_)), "{r:?}");
            assert!(rebooted(Some(NOW), &r).is_some());
        }
        // A huge file holding the current id first is still not that id.
        std::fs::write(&path, format!("{NOW}\n{}", "x".repeat(1 << 20))).unwrap();
        assert!(rebooted(Some(NOW), &recorded(d.path())).is_some());
    }

    #[test]
    fn a_symbolic_link_is_not_followed_and_is_replaced_not_written_through() {
        let d = dir();
        let outside = dir();
        let target = outside.path().join("victim");
        std::fs::write(&target, format!("{NOW}\n")).unwrap();
        std::os::unix::fs::symlink(&target, d.path().join(BOOT_ID_FILE)).unwrap();
        let r = recorded(d.path());
        assert!(matches!(r, Recorded::Unusable(_)), "a link holding the current id is not trusted: {r:?}");
        assert!(rebooted(Some(NOW), &r).is_some());
        record(d.path(), "new-boot").unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), format!("{NOW}\n"), "the link's target is untouched");
        assert!(!std::fs::symlink_metadata(d.path().join(BOOT_ID_FILE)).unwrap().file_type().is_symlink());
        assert_eq!(recorded(d.path()), Recorded::Id("new-boot".into()));
    }

    #[test]
    fn a_fifo_or_a_directory_at_the_name_is_unusable_without_waiting() {
        let d = dir();
        let path = d.path().join(BOOT_ID_FILE);
        rustix::fs::mknodat(rustix::fs::CWD, &path, rustix::fs::FileType::Fifo, rustix::fs::Mode::from(0o644), 0)
            .unwrap();
        assert!(matches!(recorded(d.path()), Recorded::Unusable(_)), "a FIFO with no writer must not block");
        std::fs::remove_file(&path).unwrap();
        std::fs::create_dir(&path).unwrap();
        assert!(matches!(recorded(d.path()), Recorded::Unusable(_)));
        // Recording over a directory is an error, not a panic.
        assert!(record(d.path(), NOW).is_err());
    }

    #[test]
    fn the_kernel_s_id_is_an_id_on_linux() {
        if std::env::var_os(BOOT_ID_ENV).is_none() && Path::new(KERNEL_BOOT_ID).exists() {
            let id = current().expect("Linux has a boot id");
            assert_eq!(id.len(), 36, "{id}");
        }
    }
}
