//! The remote manifest of one partition: an object per uploaded segment under
//! `{topic}/{partition}/manifest/`, written after the segment's data and index are uploaded
//! and verified — the entry is what makes a segment count. Listing the directory reads the
//! manifest; deleting an entry (before its data) takes the segment out.

use std::collections::BTreeMap;

use object_store::path::Path;
use serde::{Deserialize, Serialize};

/// One uploaded segment, as its manifest entry holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteSegment {
    /// Byte offset of its first message, and of the next segment's.
    pub base: u64,
    pub end: u64,
    /// The number of its first record, and of the next segment's first.
    pub first_record: u64,
    pub end_record: u64,
    /// The largest record timestamp in it (−1 if none has one).
    pub max_time: i64,
    /// When its local file was last written (ms since the epoch): what retention ages it by.
    pub modified_ms: i64,
    /// Bytes and CRC-32 of the segment file, and bytes of its index.
    pub size: u64,
    pub crc: u32,
    pub index_size: u64,
    /// The leader epoch of the broker that uploaded it, and the epochs that wrote it.
    pub leader_epoch: i32,
    pub epochs: Vec<(i32, u64)>,
    /// Makes every upload's objects its own.
    pub id: String,
    /// Bytes of the snapshot of the partition's idempotent producers at the segment's end,
    /// uploaded beside it if the leader had one: what a replica that starts its log there
    /// learns its producers from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub producers_size: Option<u64>,
}

impl RemoteSegment {
    /// `{base:020}-{leader_epoch}-{id}`: the name its objects share.
    pub fn stem(&self) -> String {
        format!("{:020}-{}-{}", self.base, self.leader_epoch, self.id)
    }

    pub fn data_path(&self, dir: &str) -> Path {
        Path::from(format!("{dir}/{}.log", self.stem()))
    }

    pub fn index_path(&self, dir: &str) -> Path {
        Path::from(format!("{dir}/{}.index", self.stem()))
    }

    pub fn producers_path(&self, dir: &str) -> Path {
        Path::from(format!("{dir}/{}.producers", self.stem()))
    }

    /// Its data, index and producer snapshot (if it has one).
    pub fn object_paths(&self, dir: &str) -> Vec<Path> {
        let mut paths = vec![self.data_path(dir), self.index_path(dir)];
        if self.producers_size.is_some() {
            paths.push(self.producers_path(dir));
        }
        paths
    }

    pub fn entry_path(&self, dir: &str) -> Path {
        Path::from(format!("{dir}/manifest/{}.json", self.stem()))
    }
}

/// `{topic}/{partition}`: where a partition's objects go.
pub fn partition_dir(topic: &str, partition: u32) -> String {
    format!("{topic}/{partition}")
}

/// The stem of a manifest entry's name (`…/manifest/{stem}.json`), if it is one.
pub fn entry_stem(path: &Path) -> Option<&str> {
    path.filename()?.strip_suffix(".json")
}

/// The stem of a segment's data, index or producer snapshot object (`…/{stem}.log`, `.index`
/// or `.producers`), if it is one.
pub fn object_stem(path: &Path) -> Option<&str> {
    let name = path.filename()?;
    [".log", ".index", ".producers"].iter().find_map(|suffix| name.strip_suffix(suffix))
}

/// A partition's uploaded segments, as this broker last read or wrote them, by base offset.
#[derive(Debug, Default, Clone)]
pub struct Manifest {
    segments: BTreeMap<u64, RemoteSegment>,
}

impl Manifest {
    /// Takes `entry` in, unless a segment with its base is in already: the first entry of a
    /// base (by stem) wins, so that every broker reads the same manifest. Returns the entry
    /// that lost, if one did.
    pub fn insert(&mut self, entry: RemoteSegment) -> Option<RemoteSegment> {
        match self.segments.get(&entry.base) {
            Some(kept) if kept.stem() <= entry.stem() => Some(entry),
            _ => self.segments.insert(entry.base, entry),
        }
    }

    pub fn remove(&mut self, base: u64) -> Option<RemoteSegment> {
        self.segments.remove(&base)
    }

    pub fn segments(&self) -> impl Iterator<Item = &RemoteSegment> {
        self.segments.values()
    }

    pub fn contains_stem(&self, stem: &str) -> bool {
        self.segments.values().any(|s| s.stem() == stem)
    }

    /// The run of segments that reaches `local_start` (each ending where the next begins, the
    /// last ending at or past it), its first byte and record and its end: what readers may read
    /// from the store. Segments before a gap cannot be read, since the log between them is
    /// nowhere. `None` when no run reaches it.
    pub fn run_reaching(&self, local_start: u64) -> Option<Run> {
        let mut run: Option<Run> = None;
        for s in self.segments.values() {
            match run {
                Some(r) if s.base <= r.end => run = Some(Run { end: r.end.max(s.end), ..r }),
                _ => {
                    if run.is_some_and(|r| r.end >= local_start) {
                        break;
                    }
                    run = Some(Run { start: s.base, start_record: s.first_record, end: s.end });
                }
            }
        }
        run.filter(|r| r.start <= local_start && r.end >= local_start)
    }

    /// The segment holding byte `offset`, within [`Manifest::run_reaching`].
    pub fn holding_byte(&self, offset: u64) -> Option<&RemoteSegment> {
        self.segments.range(..=offset).next_back().map(|(_, s)| s).filter(|s| offset < s.end)
    }

    /// The segment holding record `record`.
    pub fn holding_record(&self, record: u64) -> Option<&RemoteSegment> {
        self.segments.values().find(|s| s.first_record <= record && record < s.end_record)
    }

    /// Bytes of the segments wholly before `before`.
    pub fn bytes_before(&self, before: u64) -> u64 {
        self.segments.values().filter(|s| s.end <= before).map(|s| s.size).sum()
    }
}

/// A contiguous run of uploaded segments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    pub start: u64,
    pub start_record: u64,
    pub end: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment(base: u64, end: u64, id: &str) -> RemoteSegment {
        RemoteSegment {
            base,
            end,
            first_record: base / 10,
            end_record: end / 10,
            max_time: -1,
            modified_ms: 0,
            size: end - base,
            crc: 0,
            index_size: 32,
            leader_epoch: 1,
            epochs: vec![(1, base)],
            id: id.into(),
            producers_size: None,
        }
    }

    #[test]
    fn the_run_reaching_the_local_log_is_what_readers_see() {
        let mut m = Manifest::default();
        for (base, end) in [(0, 100), (100, 200), (300, 400), (400, 500)] {
            assert_eq!(m.insert(segment(base, end, "a")), None);
        }
        // 200..300 is nowhere: the run before the gap is not readable from 400.
        assert_eq!(m.run_reaching(450), Some(Run { start: 300, start_record: 30, end: 500 }));
        assert_eq!(m.run_reaching(500), Some(Run { start: 300, start_record: 30, end: 500 }));
        assert_eq!(m.run_reaching(200), Some(Run { start: 0, start_record: 0, end: 200 }));
        assert_eq!(m.run_reaching(600), None);
        assert_eq!(m.holding_byte(350).map(|s| s.base), Some(300));
        assert_eq!(m.holding_byte(250), None);
        assert_eq!(m.holding_record(45).map(|s| s.base), Some(400));
        assert_eq!(m.bytes_before(300), 200);
    }

    #[test]
    fn of_two_entries_for_one_base_every_broker_keeps_the_same() {
        let mut m = Manifest::default();
        assert_eq!(m.insert(segment(0, 100, "b")), None);
        assert_eq!(m.insert(segment(0, 100, "c")).map(|s| s.id), Some("c".into()));
        assert_eq!(m.insert(segment(0, 100, "a")).map(|s| s.id), Some("b".into()));
        assert!(m.contains_stem(&segment(0, 100, "a").stem()));
    }

    #[test]
    fn names_parse_back() {
        let s = segment(7, 9, "ff");
        let dir = partition_dir("t", 3);
        assert_eq!(entry_stem(&s.entry_path(&dir)), Some(s.stem().as_str()));
        assert_eq!(object_stem(&s.data_path(&dir)), Some(s.stem().as_str()));
        assert_eq!(object_stem(&s.index_path(&dir)), Some(s.stem().as_str()));
        assert_eq!(object_stem(&s.producers_path(&dir)), Some(s.stem().as_str()));
        // An entry written before producer snapshots were uploaded reads as one without.
        let mut old = serde_json::to_value(&s).unwrap();
        assert!(old.get("producers_size").is_none());
        old.as_object_mut().unwrap().remove("producers_size");
        assert_eq!(serde_json::from_value::<RemoteSegment>(old).unwrap(), s);
        assert_eq!(s.entry_path(&dir).as_ref(), "t/3/manifest/00000000000000000007-1-ff.json");
    }
}
