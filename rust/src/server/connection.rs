//! Accepting clients and serving one connection: frames are read, answered and written
//! in order (Kafka's per-connection ordering), one request at a time, each first admitted by
//! the connection's SASL session (`sasl.rs`). A bad frame closes only its own connection; every task's failure stays inside that task.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::OwnedReadHalf;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::broker::Broker;
use super::dispatch::{decode_request, handle};
use super::frame::{read_frame, FrameError};
use super::sasl::{Outcome, Session, AUTH_FAILURE_DELAY};
use super::ServerConfig;

pub async fn accept_loop(
    listener: TcpListener,
    broker: Arc<Broker>,
    config: ServerConfig,
    mut stop: watch::Receiver<bool>,
) {
    let open = Arc::new(AtomicUsize::new(0));
    loop {
        let accepted = tokio::select! {
            _ = stop.changed() => return,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(_) => {
                // EMFILE and friends: wait for connections to close instead of spinning.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if open.load(Ordering::SeqCst) >= config.max_connections {
            drop(stream); // over max.connections: closed at once
            continue;
        }
        open.fetch_add(1, Ordering::SeqCst);
        let (broker, open, stop, idle, sasl) =
            (broker.clone(), open.clone(), stop.clone(), config.idle_timeout, config.sasl);
        tokio::spawn(async move {
            serve(stream, &broker, idle, sasl, stop).await;
            open.fetch_sub(1, Ordering::SeqCst);
        });
    }
}

/// Resolves when the peer closes while a request is being handled, so a long poll or a
/// group join of a client that went away is dropped. Pipelined bytes stay buffered in the
/// reader for the next frame; once some arrived, this just waits.
async fn closed_by_peer(reader: &mut BufReader<OwnedReadHalf>) {
    match reader.fill_buf().await {
        Ok([]) | Err(_) => {}
        Ok(_) => std::future::pending().await,
    }
}

/// Serve one client until it closes, sends something we cannot answer, fails to authenticate
/// (`sasl`: the listener is SASL_PLAINTEXT), idles past `connections.max.idle.ms`, or the
/// server stops.
async fn serve(stream: TcpStream, broker: &Broker, idle: Duration, sasl: bool, mut stop: watch::Receiver<bool>) {
    let _ = stream.set_nodelay(true);
    // Kafka's DescribeGroups shows members' hosts as "/<ip>".
    let peer = stream.peer_addr().map(|a| format!("/{}", a.ip())).unwrap_or_default();
    let mut session = Session::new(sasl, &peer);
    let (reader, mut writer) = stream.into_split();
    let mut reader = BufReader::with_capacity(64 * 1024, reader);
    loop {
        let max = session.max_frame();
        let frame = tokio::select! {
            _ = stop.changed() => return,
            read = tokio::time::timeout(idle, read_frame(&mut reader, &broker.request_budget, max)) => match read {
                Ok(Ok(frame)) => frame,
                Ok(Err(FrameError::Closed | FrameError::BadSize(_) | FrameError::Io(_))) | Err(_) => return,
            },
        };
        let (outcome, request) = if session.expects_raw_token() {
            (session.raw_token(&frame.bytes, broker.dir.path()), None)
        } else {
            // Kafka closes a connection whose request it cannot parse (InvalidRequestException).
            let Ok(request) = decode_request(frame.bytes.clone()) else { return };
            (session.admit(&request, broker.dir.path()), Some(request))
        };
        let request = match (outcome, request) {
            (Outcome::Serve, Some(request)) => request,
            (Outcome::Serve, None) => return, // a bare token is never served
            (Outcome::Reply(bytes), _) => {
                if writer.write_all(&bytes).await.is_err() {
                    return;
                }
                continue;
            }
            (Outcome::ReplyAndClose(bytes), _) => {
                if writer.write_all(&bytes).await.is_ok() {
                    tokio::time::sleep(AUTH_FAILURE_DELAY).await;
                }
                return;
            }
            (Outcome::Close, _) => return,
        };
        let response = tokio::select! {
            _ = stop.changed() => return,
            _ = closed_by_peer(&mut reader) => return,
            response = handle(broker, request, &peer) => response,
        };
        match response {
            Ok(Some(bytes)) => {
                if writer.write_all(&bytes).await.is_err() {
                    return;
                }
            }
            Ok(None) => {}
            Err(_) => return,
        }
        // The frame (and its share of the request budget) lives until its request is answered:
        // decoded bodies such as Produce records point into it.
        drop(frame);
    }
}
