//! A client's connection to the broker: plaintext, whose fetches go from the segment file to
//! the socket by `sendfile` (zero copy), or TLS, whose fetches are read from the file and
//! encrypted on their way (kernel TLS would let `sendfile` through; this kernel has none, so a
//! TLS fetch costs a copy, measured in the benchmark).

use std::io;
use std::os::unix::fs::FileExt;

use service::tls::{MaybeTls, ServerStream};
use tokio::io::AsyncWriteExt;

use crate::log::FileSlice;
use crate::metrics::Metrics;
use crate::sendfile::send_slice as sendfile;

/// Bytes of a segment read per write on a TLS connection: a few TLS records.
const TLS_CHUNK_BYTES: usize = 256 << 10;

/// The error of a write the client's socket took nothing of for the stall timeout.
pub(crate) fn stalled() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "the client read nothing for client_timeout_ms")
}

/// Sends `slice`'s bytes to `stream`: by `sendfile` on a plaintext connection, read and
/// written through TLS otherwise. Fails with [`stalled`] when the socket takes no bytes for
/// `stall`.
pub(crate) async fn send_slice(
    stream: &mut ServerStream,
    slice: &FileSlice,
    metrics: &Metrics,
    stall: std::time::Duration,
) -> io::Result<()> {
    let tls = match stream {
        MaybeTls::Plain(stream) => return sendfile(stream, slice, metrics, stall).await,
        MaybeTls::Tls(tls) => tls,
    };
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
        tokio::time::timeout(stall, tls.write_all(&buf[..read]))
            .await
            .unwrap_or_else(|_| Err(stalled()))?;
        metrics.tls_fetch_bytes.inc_by(read as u64);
        position += read as u64;
    }
    Ok(())
}
