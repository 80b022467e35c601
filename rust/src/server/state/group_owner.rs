//! Which side coordinates a group id: the embedded consumers of `group.py` (file-based state
//! in the group's folder) or this server (in memory). The two cannot share one membership, so
//! a group id is used by one side at a time and the side that comes second is refused; a
//! partition never has two owners.
//!
//! The server's claim is a file in the group's folder, `GROUP_NETWORK_OWNER_FILE`, on which it
//! holds an exclusive flock while the group has network members. The kernel drops the flock
//! when the server process dies, however it dies (kill -9 included), so a dead server never
//! locks the group out. Claiming happens under the group's `GROUP_STATE_LOCK_FILE`, the lock
//! every embedded join takes before it checks this file, so a claim and an embedded join are
//! serialized: whichever takes the state lock first wins, the other sees it and is refused.
//! A second server on the same data directory finds the flock taken and is refused too.
//! An embedded static member (`group_instance_id`) keeps the group on the embedded side until
//! its session expires, dead or alive, as its partitions wait for it there.

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use rustix::fs::{flock, FlockOperation};

use crate::storage::error::{Error, Result};
use crate::storage::files::{id_file_name, GROUPS_DIR, GROUP_NETWORK_OWNER_FILE, GROUP_STATE_LOCK_FILE};
use crate::storage::nofollow;

/// This server's claim on a group; dropping it (closing the file) releases the group.
#[derive(Debug)]
pub struct NetworkOwner {
    _file: File,
}

/// The answer to `claim`.
#[derive(Debug)]
pub enum Claim {
    Owned(NetworkOwner),
    /// Embedded `kafkalite.Consumer`s of the group are alive.
    Embedded,
    /// Another server (described by what it wrote in the file) coordinates the group.
    OtherServer(String),
    /// An embedded member holds the group's state lock right now (described: its pid when the
    /// kernel tells): try again later.
    Busy(String),
}

/// The group's folder, named as `group.py` names it (`files::id_file_name`).
fn group_dir(data_dir: &Path, group: &str) -> Result<PathBuf> {
    Ok(data_dir.join(GROUPS_DIR).join(id_file_name(group, "group id")?))
}

/// Claim `group` for this server, if the group's state lock (which embedded members hold only
/// for a read-modify-write) is free now: `Claim::Busy` otherwise, and the caller retries until its
/// deadline (a member stopped while it holds the lock must not hold up the server). `who` is
/// written into the claim file so that a refused embedded consumer can say which server holds
/// the group.
pub fn claim(data_dir: &Path, group: &str, who: &str) -> Result<Claim> {
    let dir = group_dir(data_dir, group)?;
    std::fs::create_dir_all(&dir).map_err(|e| Error::io_at(&dir, format!("cannot create {}", dir.display()), e))?;
    nofollow::check_dir(&dir)?;
    let state_lock = nofollow::open(
        nofollow::options().read(true).write(true).create(true).truncate(false),
        &dir.join(GROUP_STATE_LOCK_FILE),
        "the group's state lock",
    )?;
    match flock(&state_lock, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => {}
        Err(rustix::io::Errno::WOULDBLOCK) => {
            return Ok(Claim::Busy(crate::storage::lock::describe_holder(&state_lock, || "an embedded member".into())))
        }
        Err(e) => return Err(Error::io(format!("cannot lock the state of group {group:?}"), e.into())),
    }
    if embedded_members_alive(&dir) {
        return Ok(Claim::Embedded);
    }
    let path = dir.join(GROUP_NETWORK_OWNER_FILE);
    let mut file = nofollow::open(
        nofollow::options().read(true).write(true).create(true).truncate(false),
        &path,
        "the group's network-owner file",
    )?;
    if flock(&file, FlockOperation::NonBlockingLockExclusive).is_err() {
        let mut holder = String::new();
        let _ = file.read_to_string(&mut holder);
        return Ok(Claim::OtherServer(holder.trim().to_string()));
    }
    // Only the holder of the flock writes the file, so readers see one server's words.
    let describe = |e| Error::io_at(&path, format!("cannot write {}", path.display()), e);
    file.set_len(0).map_err(describe)?;
    file.write_all(who.as_bytes()).map_err(describe)?;
    Ok(Claim::Owned(NetworkOwner { _file: file }))
    // `state_lock` closes here: embedded joins proceed and now see the claim.
}

/// True when an embedded `kafkalite.Consumer` of the group is alive: it holds an exclusive
/// flock on its `.member` file for life (group.py), so a failed non-blocking flock means alive.
/// A static member (`group_instance_id`) counts until its session expires, alive or not: its
/// partitions wait for it (see `static_members_waited_for`).
fn embedded_members_alive(dir: &Path) -> bool {
    live_member_files(dir) || static_members_waited_for(dir)
}

/// Whether a static embedded member's place waits for it, as group.py decides it: its last
/// heartbeat (the first 8 bytes of its `.member` file: milliseconds since the epoch, little
/// endian) is within its `session_timeout_ms` (in the group's `state.json`). Unreadable files
/// count as no such member.
fn static_members_waited_for(dir: &Path) -> bool {
    let Ok(bytes) = std::fs::read(dir.join("state.json")) else { return false };
    let Ok(state) = serde_json::from_slice::<serde_json::Value>(&bytes) else { return false };
    let Some(members) = state.get("members").and_then(|m| m.as_object()) else { return false };
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(i64::MAX);
    members.iter().any(|(member_id, info)| {
        if info.get("instance_id").and_then(|i| i.as_str()).is_none() {
            return false;
        }
        let session = info.get("session_timeout_ms").and_then(|s| s.as_i64()).unwrap_or(0);
        let Ok(name) = id_file_name(member_id, "member id") else { return false };
        let Ok(mut file) = nofollow::open_read(&dir.join(format!("{name}.member")), "a group member's file") else {
            return false;
        };
        let mut stamp = [0u8; 8];
        file.read_exact(&mut stamp).is_ok() && now_ms - i64::from_le_bytes(stamp) <= session
    })
}

/// Whether a process holds a `.member` file's lock (an embedded member alive).
fn live_member_files(dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else { return false };
    entries.flatten().any(|e| {
        let path = e.path();
        if path.extension().and_then(|x| x.to_str()) != Some("member") {
            return false;
        }
        let Ok(file) = nofollow::open_read(&path, "a group member's file") else { return false };
        // Getting the lock means the member is dead; it is released when `file` closes.
        flock(&file, FlockOperation::NonBlockingLockExclusive).is_err()
    })
}

/// Whether embedded `kafkalite.Consumer`s of `group` are alive (never, for the empty id, which
/// names no folder).
pub fn embedded_members(data_dir: &Path, group: &str) -> bool {
    group_dir(data_dir, group).is_ok_and(|dir| embedded_members_alive(&dir))
}

/// Remove an embedded group's folder (`.kafkalite-groups/<id>`: its state and members' files),
/// as `Admin.delete_group` does: a symlink there is removed as a link, never followed, and
/// nothing outside the groups folder is touched. Ok(true) when there was one (never for the
/// empty id, which names no folder).
pub fn remove_group_folder(data_dir: &Path, group: &str) -> std::io::Result<bool> {
    let Ok(name) = id_file_name(group, "group id") else { return Ok(false) };
    let root = data_dir.join(GROUPS_DIR);
    if root.symlink_metadata().map(|m| m.file_type().is_symlink()).unwrap_or(false) {
        return Err(std::io::Error::other(format!("refusing to delete under {}: it is a symlink", root.display())));
    }
    let path = root.join(name);
    match path.symlink_metadata() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(&path).map(|_| true),
        Ok(_) => std::fs::remove_file(&path).map(|_| true),
    }
}
