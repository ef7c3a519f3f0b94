//! Distinct event ids counted in bounded memory: each id goes to one of [`BUCKETS`] files on
//! disk by a hash of it, and [`DistinctIds::count`] sorts and deduplicates one bucket at a
//! time. Memory is the write buffers plus the largest bucket (about `ids × 16 / BUCKETS`
//! bytes for random ids), where a set of every id in memory took ~100 bytes per id (the demo
//! at 9 M events peaked at 1.4 GiB).

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::PathBuf;

/// Bytes of an event id (`header.id`, Avro `fixed(16)`).
pub const ID_BYTES: usize = 16;
/// Bucket files the ids are spread over.
const BUCKETS: usize = 256;
/// Write buffer per bucket.
const BUFFER_BYTES: usize = 8 << 10;

/// Counts distinct 16-byte ids added one by one.
pub struct DistinctIds {
    dir: tempfile::TempDir,
    buckets: Vec<BufWriter<File>>,
    added: u64,
}

impl DistinctIds {
    /// Spill files go in a new temporary directory under `parent`, removed on drop.
    pub fn new_in(parent: impl Into<PathBuf>) -> io::Result<DistinctIds> {
        let parent = parent.into();
        std::fs::create_dir_all(&parent)?;
        let dir = tempfile::Builder::new().prefix("distinct-ids").tempdir_in(parent)?;
        let buckets = (0..BUCKETS)
            .map(|b| {
                let file = File::create(dir.path().join(format!("{b:03}")))?;
                Ok(BufWriter::with_capacity(BUFFER_BYTES, file))
            })
            .collect::<io::Result<Vec<_>>>()?;
        Ok(DistinctIds { dir, buckets, added: 0 })
    }

    /// Adds one id.
    pub fn add(&mut self, id: &[u8; ID_BYTES]) -> io::Result<()> {
        self.added += 1;
        self.buckets[bucket(id)].write_all(id)
    }

    /// A failure of the spill files as the loader's error.
    pub fn spill_error(&self, source: io::Error) -> crate::LoadError {
        crate::LoadError::Spill { path: self.dir.path().display().to_string(), source }
    }

    /// Ids added, duplicates included.
    pub fn added(&self) -> u64 {
        self.added
    }

    /// How many distinct ids were added.
    pub fn count(mut self) -> io::Result<u64> {
        for writer in &mut self.buckets {
            writer.flush()?;
        }
        self.buckets.clear();
        let mut distinct = 0;
        for b in 0..BUCKETS {
            let path = self.dir.path().join(format!("{b:03}"));
            let mut bytes = Vec::new();
            BufReader::new(File::open(&path)?).read_to_end(&mut bytes)?;
            std::fs::remove_file(&path)?;
            let mut ids: Vec<[u8; ID_BYTES]> = bytes
                .chunks_exact(ID_BYTES)
                .map(|chunk| {
                    let mut id = [0; ID_BYTES];
                    id.copy_from_slice(chunk);
                    id
                })
                .collect();
            drop(bytes);
            ids.sort_unstable();
            ids.dedup();
            distinct += ids.len() as u64;
        }
        Ok(distinct)
    }
}

/// FNV-1a of the id: spreads ids that share a prefix (an application's own ids) too.
fn bucket(id: &[u8; ID_BYTES]) -> usize {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in id {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (hash % BUCKETS as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_each_id_once_across_buckets() {
        let parent = tempfile::tempdir().unwrap();
        let mut ids = DistinctIds::new_in(parent.path()).unwrap();
        for n in 0u32..10_000 {
            let mut id = [0; ID_BYTES];
            id[..4].copy_from_slice(&(n % 7_000).to_be_bytes());
            ids.add(&id).unwrap();
        }
        assert_eq!(ids.added(), 10_000);
        assert_eq!(ids.count().unwrap(), 7_000);
        assert_eq!(std::fs::read_dir(parent.path()).unwrap().count(), 0, "spill files removed");
    }
}
