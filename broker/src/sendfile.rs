//! Fetch data goes from the segment file to the socket with `sendfile(2)`: the bytes never
//! pass through this process's memory (paper §3.1, "Efficient transfer").

use std::io;

use tokio::io::Interest;
use tokio::net::TcpStream;

use crate::log::FileSlice;
use crate::metrics::Metrics;

/// Sends `slice` to `stream`, waiting for the socket whenever its buffer is full — at most
/// `stall` each time.
pub(crate) async fn send_slice(
    stream: &TcpStream,
    slice: &FileSlice,
    metrics: &Metrics,
    stall: std::time::Duration,
) -> io::Result<()> {
    let end = slice.position + slice.len;
    let mut position = slice.position as nix::libc::off_t;
    while (position as u64) < end {
        let count = (end - position as u64) as usize;
        tokio::time::timeout(stall, stream.writable())
            .await
            .unwrap_or_else(|_| Err(crate::stream::stalled()))?;
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
