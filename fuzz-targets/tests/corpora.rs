//! Every committed input of every fuzz target (`fuzz/corpus/NAME/`, minimized by the campaigns
//! of `scripts/fuzz.sh`) through the target's check, in the workspace's test build: a decoder
//! that panics or breaks a promise on a known input fails here, without a nightly build.

use std::path::{Path, PathBuf};

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz")
}

/// The names of the entries of `dir` (file stems for `.rs` files), sorted.
fn names(dir: &Path, strip: &str) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").file_name().to_string_lossy().into_owned())
        .filter_map(|name| name.strip_suffix(strip).map(str::to_owned))
        .collect();
    names.sort();
    names
}

#[test]
fn every_fuzz_target_has_a_check_and_a_corpus() {
    let listed: Vec<&str> = fuzz_targets::TARGETS.iter().map(|(name, _)| *name).collect();
    assert_eq!(names(&fuzz_dir().join("fuzz_targets"), ".rs"), listed);
    assert_eq!(names(&fuzz_dir().join("corpus"), ""), listed);
}

#[test]
fn every_committed_input_passes_its_targets_check() {
    let mut inputs = 0;
    for (name, check) in fuzz_targets::TARGETS {
        let corpus = fuzz_dir().join("corpus").join(name);
        let mut files: Vec<PathBuf> = std::fs::read_dir(&corpus)
            .unwrap_or_else(|e| panic!("{}: {e}", corpus.display()))
            .map(|entry| entry.expect("a directory entry").path())
            .collect();
        files.sort();
        assert!(!files.is_empty(), "{name}: an empty corpus");
        for file in files {
            let data = std::fs::read(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            let outcome = std::panic::catch_unwind(|| check(&data));
            assert!(outcome.is_ok(), "{name}: {} fails its check", file.display());
            inputs += 1;
        }
    }
    eprintln!("{inputs} inputs of {} targets", fuzz_targets::TARGETS.len());
}
