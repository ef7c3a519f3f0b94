//! Flushes: what calls for one (`flush_messages`, `flush_ms`, a waiting producer), and the
//! fsyncs that make appended data durable and, under `visible_after = "flush"`, visible.

use std::sync::Arc;
use std::time::Instant;

use super::{Partition, lock};
use crate::log::error::{LogError, io_error, sync_dir};

impl Partition {
    /// Asks the flusher for a flush now and waits until the log is on disk up to `end`.
    pub async fn wait_flushed(&self, end: u64) {
        let mut flushed = self.flushed.subscribe();
        if *flushed.borrow() >= end {
            return;
        }
        self.state().flush_requested = true;
        self.flush_wanted.notify_one();
        // The sender lives as long as `self`, so `wait_for` cannot fail while we borrow it.
        let _ = flushed.wait_for(|&flushed| flushed >= end).await;
    }

    /// Waits until a flush may be due: the flusher task's sleep.
    pub async fn flush_wanted(&self) {
        self.flush_wanted.notified().await
    }

    /// When the next flush is due by `flush_ms`, if there is unflushed data.
    pub fn flush_deadline(&self) -> Option<Instant> {
        self.state().flush_deadline()
    }

    /// Whether `flush_messages`, `flush_ms` or a waiting producer calls for a flush now.
    pub fn flush_due(&self, now: Instant) -> bool {
        let state = self.state();
        state.flush_requested
            || state.dir_unsynced
            || state.unflushed_messages >= state.config.flush_messages
            || state.flush_deadline().is_some_and(|deadline| now >= deadline)
    }

    /// Fsyncs everything appended so far and makes it visible (if it was not already). Blocking. The lock is held only
    /// to take a snapshot, so appends continue while the disk works.
    pub fn flush(&self) -> Result<(), LogError> {
        let _flushing = lock(&self.flushing);
        let (target, mut files, dir_unsynced) = {
            let mut state = self.state();
            let clean = !state.dir_unsynced && state.unsynced.is_empty();
            if clean && state.end == self.flushed_end() {
                state.flush_requested = false;
                return Ok(());
            }
            let mut files = std::mem::take(&mut state.unsynced);
            files.push(Arc::clone(state.active()));
            // The active index is written, never fsynced: recovery rebuilds what it lacks.
            if let Err(e) = state.active_index_mut().write_new() {
                tracing::warn!(topic = %self.topic, partition = self.index, error = %e, "cannot write the segment's index");
            }
            state.unflushed_messages = 0;
            state.dirty_since = None;
            state.flush_requested = false;
            (state.end, files, std::mem::take(&mut state.dir_unsynced))
        };
        let started = Instant::now();
        let synced =
            files.iter().try_for_each(|s| s.file.sync_data().map_err(io_error("syncing", &s.path)));
        let synced = synced.and_then(|()| if dir_unsynced { sync_dir(&self.dir) } else { Ok(()) });
        if let Err(e) = synced {
            // Keep the data unflushed (under `flush`, invisible) and try again on the next tick.
            let mut state = self.state();
            state.unsynced.append(&mut files);
            state.dirty_since.get_or_insert_with(Instant::now);
            state.dir_unsynced |= dir_unsynced;
            return Err(e);
        }
        {
            let mut state = self.state();
            state.sync_time = (state.sync_time * 7 + started.elapsed()) / 8;
        }
        // Visible first: a producer woken by the flushed end (`acks` 2) finds its data visible.
        self.advance_visible(target);
        self.flushed.send_if_modified(|flushed| {
            let advanced = target > *flushed;
            *flushed = (*flushed).max(target);
            advanced
        });
        // Again, for a high watermark raised between the first try and the flushed end.
        self.advance_visible(target);
        Ok(())
    }
}
