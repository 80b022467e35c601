//! Kafka's framing: a 4-byte big-endian size, then that many bytes (request header + body).
//! The size is checked against `socket.request.max.bytes` before anything is buffered, and
//! the body is read as it arrives (never allocated up front from the claimed size), with the
//! bytes of large frames held by all connections together bounded by a shared budget
//! (`queued.max.request.bytes`), so hostile sizes cannot exhaust memory; connections that have
//! not authenticated draw on a small budget of their own. Frames of one chunk or less skip the
//! budget, so small requests are never locked out by stalled large ones.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Kafka's `socket.request.max.bytes` default: 100 MiB.
pub const MAX_REQUEST_BYTES: i32 = 100 * 1024 * 1024;
/// The most request bytes buffered across all connections at once.
pub const QUEUED_MAX_REQUEST_BYTES: usize = 512 * 1024 * 1024;
/// The most bytes of large frames (over one chunk) buffered across connections that have not
/// authenticated: a budget of their own, so sockets that never authenticate, each stalled in a
/// frame of `sasl.server.max.receive.size`, cannot take the authenticated clients' budget
/// (1,024 of them held all 512 MiB). A real client's frames before authentication (ApiVersions,
/// SaslHandshake, a SCRAM message) are far below one chunk and never wait on it.
pub const QUEUED_MAX_UNAUTHENTICATED_BYTES: usize = 16 * 1024 * 1024;
/// The most record bytes of fetch responses read and not yet written, across all connections
/// (`fetch_limits::Limits`), past which a fetch gets only its first batch: a memory safety net, the
/// response side of `queued.max.request.bytes`. Each byte may be resident twice while its
/// response is encoded (the mapped page and the frame's copy); above `fetch.max.bytes`' default
/// (55 MiB), so one full-size response always fits.
pub const QUEUED_MAX_RESPONSE_BYTES: usize = 64 * 1024 * 1024;
/// Bytes read (and budgeted) per step while a large frame arrives; frames up to this size
/// skip the budget once the client authenticated (`read_frame`).
pub const CHUNK: usize = 64 * 1024;
/// Frames up to this size skip the budget before authentication: a real client's (ApiVersions,
/// SaslHandshake, a SCRAM message) are a few hundred bytes. At `CHUNK`, each unauthenticated
/// socket that only sent a frame's size held a chunk outside any budget (10,000 of them, 640 MiB).
pub const UNAUTHENTICATED_UNBUDGETED: usize = 4 * 1024;

#[derive(Debug)]
pub enum FrameError {
    /// The peer closed between frames: a normal end.
    Closed,
    /// Negative, or above `socket.request.max.bytes` (or `sasl.server.max.receive.size`).
    BadSize(i32),
    /// The peer closed or failed in the middle of a frame.
    Io(std::io::Error),
}

/// One request frame's bytes, holding its share of the memory budget until dropped.
pub struct Frame {
    pub bytes: Bytes,
    _permits: Vec<OwnedSemaphorePermit>,
}

/// Read the next frame of at most `max` bytes (`MAX_REQUEST_BYTES`, or less before a SASL
/// client has authenticated); frames over `unbudgeted` bytes (`CHUNK`, or
/// `UNAUTHENTICATED_UNBUDGETED`) draw on `budget`. Never allocates more than has arrived plus
/// one chunk.
pub async fn read_frame<R: AsyncRead + Unpin>(
    reader: &mut R,
    budget: &Arc<Semaphore>,
    max: i32,
    unbudgeted: usize,
) -> Result<Frame, FrameError> {
    let mut size = [0u8; 4];
    match reader.read_exact(&mut size).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Err(FrameError::Closed),
        Err(e) => return Err(FrameError::Io(e)),
    }
    let size = i32::from_be_bytes(size);
    if !(0..=max.min(MAX_REQUEST_BYTES)).contains(&size) {
        return Err(FrameError::BadSize(size));
    }
    let size = size as usize;
    let mut buf = BytesMut::new();
    let mut permits = Vec::new();
    if size <= unbudgeted.min(CHUNK) {
        // A small frame skips the shared budget: a connection holds one frame at a time (or
        // up to `pipeline::MAX_WAITING` Produce frames whose answers wait for a sync), so these
        // hold at most a few chunks per connection, and a metadata, ApiVersions or fetch
        // request is never queued behind other connections' large frames stalled part way
        // (six 100 MiB frames stopped at 90 MiB held the whole budget: tests/engine/test_adversary_session6.py).
        buf.resize(size, 0);
        reader.read_exact(&mut buf[..]).await.map_err(FrameError::Io)?;
        return Ok(Frame { bytes: buf.freeze(), _permits: permits });
    }
    while buf.len() < size {
        let step = CHUNK.min(size - buf.len());
        // The budget is far larger than one request, so a single frame always fits.
        let permit = budget.clone().acquire_many_owned(step as u32).await.map_err(|_| FrameError::Closed)?;
        permits.push(permit);
        let start = buf.len();
        buf.resize(start + step, 0);
        reader.read_exact(&mut buf[start..]).await.map_err(FrameError::Io)?;
    }
    Ok(Frame { bytes: buf.freeze(), _permits: permits })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame_of(size: usize) -> Vec<u8> {
        let mut bytes = (size as i32).to_be_bytes().to_vec();
        bytes.resize(4 + size, 7);
        bytes
    }

    #[test]
    fn before_authentication_only_tiny_frames_skip_the_budget() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let empty = Arc::new(Semaphore::new(0));
        let read = |size: usize, unbudgeted: usize| {
            let bytes = frame_of(size);
            rt.block_on(async {
                let wait = std::time::Duration::from_millis(100);
                tokio::time::timeout(wait, read_frame(&mut &bytes[..], &empty, MAX_REQUEST_BYTES, unbudgeted))
                    .await
                    .is_ok()
            })
        };
        // A socket that sent only the size of a 64 KiB frame held 64 KiB outside any budget.
        assert!(!read(UNAUTHENTICATED_UNBUDGETED + 1, UNAUTHENTICATED_UNBUDGETED), "waits for the budget");
        assert!(read(UNAUTHENTICATED_UNBUDGETED, UNAUTHENTICATED_UNBUDGETED));
        assert!(read(CHUNK, CHUNK), "an authenticated client's small frame skips it");
        let budget = Arc::new(Semaphore::new(QUEUED_MAX_UNAUTHENTICATED_BYTES));
        let bytes = frame_of(5000);
        let frame = rt.block_on(read_frame(&mut &bytes[..], &budget, MAX_REQUEST_BYTES, UNAUTHENTICATED_UNBUDGETED));
        assert_eq!(budget.available_permits(), QUEUED_MAX_UNAUTHENTICATED_BYTES - 5000);
        drop(frame);
        assert_eq!(budget.available_permits(), QUEUED_MAX_UNAUTHENTICATED_BYTES);
    }
}
