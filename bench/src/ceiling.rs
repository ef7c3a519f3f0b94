//! The machine's own ceilings, measured in the same run: how fast one core copies memory and
//! how fast bytes cross a loopback TCP connection. A consumer that sends file bytes to a socket
//! cannot beat the second.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Instant;

use crate::peer::BenchResult;

#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub struct Ceilings {
    /// Single-core memcpy, MB/s.
    pub memcpy_mb_per_s: f64,
    /// One loopback TCP connection, MB/s.
    pub loopback_tcp_mb_per_s: f64,
}

/// Measures both ceilings, moving `bytes` through each.
pub fn measure(bytes: usize) -> BenchResult<Ceilings> {
    Ok(Ceilings { memcpy_mb_per_s: memcpy(bytes), loopback_tcp_mb_per_s: loopback(bytes)? })
}

fn memcpy(bytes: usize) -> f64 {
    const CHUNK: usize = 64 << 20;
    let source = vec![7u8; CHUNK];
    let mut target = vec![0u8; CHUNK];
    let rounds = bytes.div_ceil(CHUNK).max(1);
    target.copy_from_slice(&source); // fault the pages in before timing
    let started = Instant::now();
    for _ in 0..rounds {
        target.copy_from_slice(std::hint::black_box(&source));
        std::hint::black_box(&mut target);
    }
    (rounds * CHUNK) as f64 / started.elapsed().as_secs_f64() / 1e6
}

fn loopback(bytes: usize) -> BenchResult<f64> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let reader = std::thread::spawn(move || -> std::io::Result<u64> {
        let (mut stream, _) = listener.accept()?;
        let mut buf = vec![0u8; 1 << 20];
        let mut total = 0u64;
        loop {
            match stream.read(&mut buf)? {
                0 => return Ok(total),
                n => total += n as u64,
            }
        }
    });
    let mut stream = TcpStream::connect(addr)?;
    let chunk = vec![1u8; 1 << 20];
    let started = Instant::now();
    let mut sent = 0;
    while sent < bytes {
        stream.write_all(&chunk)?;
        sent += chunk.len();
    }
    drop(stream);
    let received = reader.join().map_err(|_| anyhow::anyhow!("reader thread panicked"))??;
    Ok(received as f64 / started.elapsed().as_secs_f64() / 1e6)
}
