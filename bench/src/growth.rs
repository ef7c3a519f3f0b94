//! The paper's claim that a log-structured broker does not slow down as data accumulates:
//! grow one partition to each size in turn and, at each, time a window of batch produces and a
//! consumer reading the whole log from the start.

use std::path::Path;

use crate::peer::{BenchResult, Launcher};
use crate::progress::Progress;
use crate::report::GrowthPoint;
use crate::workload;

/// Disk left free beside a log of the given size: four times the log, at least 256 MiB and at
/// most 4 GiB (a quick run's small logs must not be skipped on a machine with a few GiB free).
fn disk_margin(size: u64) -> u64 {
    (size.saturating_mul(4)).clamp(256 << 20, 4 << 30)
}

pub async fn measure(
    launcher: &dyn Launcher,
    dir: &Path,
    sizes: &[u64],
    window_messages: u64,
    message_bytes: usize,
    batch: usize,
) -> BenchResult<Vec<GrowthPoint>> {
    std::fs::create_dir_all(dir)?;
    let free = free_bytes(dir)?;
    let running = launcher.start(dir).await?;
    let per_message = (message_bytes + protocol::PLAIN_MESSAGE_OVERHEAD_BYTES) as u64;
    let mut produced = 0u64;
    let mut points = Vec::new();
    for &size in sizes {
        if size + disk_margin(size) > free {
            eprintln!(
                "bench: skipping the {size}-byte log: {free} bytes free on {}",
                dir.display()
            );
            continue;
        }
        let target = (size / per_message).max(produced + window_messages);
        let filler = target - window_messages - produced;
        if filler > 0 {
            let p = Progress::new(format!(
                "growth: filling the log to {:.2} GiB",
                size as f64 / (1u64 << 30) as f64
            ));
            workload::produce(running.as_ref(), "growth", filler, message_bytes, batch, &p).await?;
        }
        let p = Progress::new("growth: timed produce window");
        let produce = workload::produce(
            running.as_ref(),
            "growth",
            window_messages,
            message_bytes,
            batch,
            &p,
        )
        .await?;
        produced = target;
        let p = Progress::new("growth: consume the whole log");
        let consume =
            workload::consume(running.as_ref(), "growth", produced, message_bytes, &p).await?;
        points.push(GrowthPoint { log_bytes: produced * per_message, produce, consume });
    }
    running.stop().await?;
    Ok(points)
}

fn free_bytes(dir: &Path) -> BenchResult<u64> {
    let stat = nix::sys::statvfs::statvfs(dir)?;
    Ok(stat.blocks_available() as u64 * stat.fragment_size() as u64)
}
