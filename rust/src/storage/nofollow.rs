//! Opening the files of a data directory without following symbolic links.
//!
//! A segment-named link (`00000000000000000000.log` -> a file anywhere) would otherwise make
//! a writer truncate and overwrite the link's target. Every file kafkalite opens in a data
//! directory goes through `open` (O_NOFOLLOW), and a partition directory that is itself a link
//! is refused at open (`check_dir`), so no path can lead outside the data directory. A link
//! found there is an error naming the path, never followed.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::storage::error::{Error, Result};

/// `OpenOptions` that refuse a symbolic link as the last path component.
pub fn options() -> OpenOptions {
    let mut o = OpenOptions::new();
    o.custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32);
    o
}

/// Open `path` with `opts` (made by `options()`); `what` names the file in errors.
pub fn open(opts: &OpenOptions, path: &Path, what: &str) -> Result<File> {
    opts.open(path).map_err(|e| describe(e, path, what))
}

/// Open for reading only.
pub fn open_read(path: &Path, what: &str) -> Result<File> {
    open(options().read(true), path, what)
}

/// The whole of the small file at `path` (a config file of the data directory), None when there
/// is none; never through a link. The caller parses it and calls a damaged one so.
pub fn read_if_exists(path: &Path, what: &str) -> Result<Option<Vec<u8>>> {
    use std::io::Read;
    let mut file = match open_read(path, what) {
        Ok(file) => file,
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).map_err(|e| Error::io_at(path, format!("cannot read {}", path.display()), e))?;
    Ok(Some(bytes))
}

/// The error for a failed open, naming a refused link as such.
pub fn describe(e: std::io::Error, path: &Path, what: &str) -> Error {
    if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) {
        Error::io_at(
            path,
            format!(
                "cannot open {what} {}: it is a symbolic link, and kafkalite never follows links inside a data \
                 directory (a link could make a writer overwrite a file elsewhere); replace it with the real file",
                path.display()
            ),
            e,
        )
    } else {
        Error::io_at(path, format!("cannot open {what} {}", path.display()), e)
    }
}

/// A partition directory must be a real directory, not a link to one elsewhere.
pub fn check_dir(dir: &Path) -> Result<()> {
    match std::fs::symlink_metadata(dir) {
        Ok(m) if m.file_type().is_symlink() => Err(Error::io_at(
            dir,
            format!(
                "the partition directory {} is a symbolic link; kafkalite does not follow links inside a data \
                 directory (a link could make a writer overwrite files elsewhere); use the real directory",
                dir.display()
            ),
            std::io::Error::from_raw_os_error(rustix::io::Errno::LOOP.raw_os_error()),
        )),
        _ => Ok(()),
    }
}
