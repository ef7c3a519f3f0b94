//! The spool's checkpoint, `{dir}/acked`: the acknowledged floor, the acknowledged seqs above
//! it and the audit counts they produced, and the `accepted` counts of every seq below
//! `accepted_end`, taken under one lock so that they agree. (Events from `accepted_end` on are
//! counted again from the segments on open.) Written as
//! `crc32 (8 hex digits) \n json` to a staged file, fsynced, renamed over the old one, and the
//! directory fsynced.

use std::collections::BTreeSet;
use std::path::Path;

use events::audit::AuditCounts;
use serde::{Deserialize, Serialize};

use super::error::SpoolError;
use super::state::Shared;

const FILE: &str = "acked";

#[derive(Debug, Default, Serialize, Deserialize)]
pub(super) struct Checkpoint {
    pub floor: u64,
    pub acked_above: BTreeSet<u64>,
    pub window_ms: i64,
    /// `(topic, window_start, cumulative count)`.
    pub audit: Vec<(String, i64, i64)>,
    /// The `accepted` counts, as `audit`.
    #[serde(default)]
    pub accepted: Vec<(String, i64, i64)>,
    /// Every seq below is in `accepted`; `None` in a checkpoint written before the spool
    /// counted accepted events.
    #[serde(default)]
    pub accepted_end: Option<u64>,
}

/// What a new spool starts from: nothing acknowledged, nothing counted.
fn empty() -> Checkpoint {
    Checkpoint { accepted_end: Some(0), ..Checkpoint::default() }
}

/// The last checkpoint, or an empty one for a new spool. A damaged file is logged and
/// ignored: everything in the spool is then shipped again (duplicates, never loss).
pub(super) fn read(dir: &Path) -> Result<Checkpoint, SpoolError> {
    let path = dir.join(FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(empty()),
        Err(e) => return Err(SpoolError::io("read", &path)(e)),
    };
    let parsed = text.split_once('\n').and_then(|(crc, json)| {
        let crc = u32::from_str_radix(crc, 16).ok()?;
        (crc32fast::hash(json.as_bytes()) == crc).then_some(json)?;
        serde_json::from_str::<Checkpoint>(json).ok()
    });
    Ok(parsed.unwrap_or_else(|| {
        tracing::error!(path = %path.display(), "the spool checkpoint is damaged: shipping the whole spool again");
        empty()
    }))
}

/// Writes a checkpoint of the current state if it changed, then deletes the segments wholly
/// below its floor (never the one being written).
pub(super) fn write_and_clean(shared: &Shared) -> Result<(), SpoolError> {
    let checkpoint = {
        let mut state = shared.lock();
        if !state.dirty {
            return Ok(());
        }
        state.dirty = false;
        Checkpoint {
            floor: state.floor,
            acked_above: state.acked_above.clone(),
            window_ms: state.audit.window_ms(),
            audit: rows(&state.audit),
            accepted: rows(&state.accepted),
            accepted_end: Some(state.accepted_end),
        }
    };
    if let Err(e) = write(&shared.options.dir, &checkpoint) {
        shared.lock().dirty = true;
        return Err(e);
    }
    // Chunks are acknowledged whole: one whose first event is durably acknowledged is done.
    let done = |first: u64| first < checkpoint.floor || checkpoint.acked_above.contains(&first);
    shared.sends.lock().unwrap_or_else(std::sync::PoisonError::into_inner).forget(done)?;
    let mut state = shared.lock();
    while state.segments.len() > 1
        && state.segments.front().is_some_and(|s| s.end <= checkpoint.floor)
    {
        let segment = state.segments.pop_front().expect("front exists");
        state.total_bytes -= segment.bytes;
        let path = shared.segment_path(segment.base);
        if let Err(e) = std::fs::remove_file(&path) {
            tracing::error!(path = %path.display(), error = %e, "cannot delete an acknowledged spool segment");
        }
    }
    shared.metrics.spool_bytes.set(state.total_bytes as i64);
    Ok(())
}

fn rows(counts: &AuditCounts) -> Vec<(String, i64, i64)> {
    counts.all().into_iter().map(|r| (r.topic, r.window_start, r.count)).collect()
}

fn write(dir: &Path, checkpoint: &Checkpoint) -> Result<(), SpoolError> {
    let json = serde_json::to_string(checkpoint).expect("a checkpoint serializes");
    let path = dir.join(FILE);
    let text = format!("{:08x}\n{json}", crc32fast::hash(json.as_bytes()));
    service::durable::write(&path, text.as_bytes()).map_err(SpoolError::io("write", &path))
}
