//! A client's connection to the broker: plaintext, whose fetches go from the segment file to
//! the socket by `sendfile` (zero copy), or TLS, whose fetches are read from the file and
//! encrypted on their way (kernel TLS would let `sendfile` through; this kernel has none, so a
//! TLS fetch costs a copy, measured in the benchmark).

use std::io;
use std::os::unix::fs::FileExt;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

use crate::log::FileSlice;
use crate::metrics::Metrics;
use crate::sendfile::send_slice;

/// Bytes of a segment read per write on a TLS connection: a few TLS records.
const TLS_CHUNK_BYTES: usize = 256 << 10;

pub(crate) enum Stream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
}

impl Stream {
    /// Sends `slice`'s bytes: by `sendfile` on a plaintext connection, read and written
    /// through TLS otherwise.
    pub(crate) async fn send_slice(
        &mut self,
        slice: &FileSlice,
        metrics: &Metrics,
    ) -> io::Result<()> {
        let tls = match self {
            Stream::Plain(stream) => return send_slice(stream, slice, metrics).await,
            Stream::Tls(tls) => tls,
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
            tls.write_all(&buf[..read]).await?;
            metrics.tls_fetch_bytes.inc_by(read as u64);
            position += read as u64;
        }
        Ok(())
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
