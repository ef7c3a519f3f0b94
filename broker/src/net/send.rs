//! Fetch data to a client's socket: on a plaintext connection from the segment file by
//! `sendfile(2)`, so the bytes never pass through this process's memory (paper §3.1,
//! "Efficient transfer"); on a TLS connection read from the file and encrypted on their way
//! (kernel TLS would let `sendfile` through; this kernel has none, so a TLS fetch costs a
//! copy, measured in the benchmark).

use std::io;
use std::os::unix::fs::FileExt;

use std::time::Duration;

use service::tls::{MaybeTls, ServerStream};
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt, Interest};
use tokio::net::TcpStream;

use crate::log::FileSlice;
use crate::metrics::Metrics;

/// Bytes of a segment read per write on a TLS connection: a few TLS records.
const TLS_CHUNK_BYTES: usize = 256 << 10;

/// How long, and how many bytes, a connection closed on its last answer reads on and drops.
const LINGER_MS: u64 = 500;
const LINGER_BYTES_MAX: usize = 1 << 20;

/// Ends a connection whose last answer (a bad frame's error) is written: the write side is
/// shut first, then what the client still sends is read and dropped until it closes too, for
/// at most [`LINGER_MS`] and [`LINGER_BYTES_MAX`]. Closed with its input unread, the socket
/// would send a reset, which can overtake the answer and make the client lose it ("connection
/// reset" instead of the error code).
pub async fn close_lingering(stream: &mut ServerStream) {
    if stream.shutdown().await.is_err() {
        return;
    }
    let mut sink = [0u8; 8 << 10];
    let drain = async {
        let mut drained = 0;
        while drained < LINGER_BYTES_MAX {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => return,
                Ok(n) => drained += n,
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_millis(LINGER_MS), drain).await;
}

/// The error of a write the client's socket took nothing of for the stall timeout.
pub fn stalled() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "the client read nothing for client_timeout_ms")
}

/// Sends `slice`'s bytes to `stream`: by `sendfile` on a plaintext connection, read and
/// written through TLS otherwise. Fails with [`stalled`] when the socket takes no bytes for
/// `stall`.
pub async fn send_slice(
    stream: &mut ServerStream,
    slice: &FileSlice,
    metrics: &Metrics,
    stall: std::time::Duration,
) -> io::Result<()> {
    match stream {
        MaybeTls::Plain(stream) => sendfile(stream, slice, metrics, stall).await,
        MaybeTls::Tls(tls) => write_from_file(tls, slice, metrics, stall).await,
    }
}

/// Reads `slice` from its file and writes it to `output`, a TLS stream (kernel TLS would let
/// `sendfile` through). Fails with [`stalled`] when a write takes no bytes for `stall`.
pub async fn write_from_file<W: AsyncWrite + Unpin>(
    output: &mut W,
    slice: &FileSlice,
    metrics: &Metrics,
    stall: std::time::Duration,
) -> io::Result<()> {
    let mut buf = vec![0; TLS_CHUNK_BYTES.min(slice.len as usize)];
    let (mut position, end) = (slice.position, slice.position + slice.len);
    while position < end {
        let n = ((end - position) as usize).min(buf.len());
        // The page cache's bytes (what `sendfile` would send): a read of the file.
        let read = slice.segment.file.read_at(&mut buf[..n], position)?;
        if read == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("{} ended before offset {end}", slice.segment.path.display()),
            ));
        }
        tokio::time::timeout(stall, output.write_all(&buf[..read]))
            .await
            .unwrap_or_else(|_| Err(stalled()))?;
        metrics.tls_fetch_bytes.inc_by(read as u64);
        position += read as u64;
    }
    Ok(())
}

/// Sends `slice` to `stream`, waiting for the socket whenever its buffer is full — at most
/// `stall` each time.
pub async fn sendfile(
    stream: &TcpStream,
    slice: &FileSlice,
    metrics: &Metrics,
    stall: std::time::Duration,
) -> io::Result<()> {
    let end = slice.position + slice.len;
    let mut position = slice.position as nix::libc::off_t;
    while (position as u64) < end {
        let count = (end - position as u64) as usize;
        tokio::time::timeout(stall, stream.writable()).await.unwrap_or_else(|_| Err(stalled()))?;
        let sent = stream.try_io(Interest::WRITABLE, || {
            nix::sys::sendfile::sendfile(stream, &slice.segment.file, Some(&mut position), count)
                .map_err(io::Error::from)
        });
        match sent {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("{} ended before offset {end}", slice.segment.path.display()),
                ));
            }
            Ok(n) => {
                metrics.sendfile_bytes.inc_by(n as u64);
                metrics.sendfile_calls.inc();
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
