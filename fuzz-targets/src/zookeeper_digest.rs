//! Any text as a `zookeeper_auth_file`'s credentials: accepted only as `user:password` with
//! both parts non-empty, never a panic.

/// One input.
pub fn check(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let accepted = cluster::Digest::new(text).is_ok();
    let well_formed = text.split_once(':').is_some_and(|(u, p)| !u.is_empty() && !p.is_empty());
    assert_eq!(accepted, well_formed, "{text:?}");
    if let (Ok(digest), Some((user, _))) = (cluster::Digest::new(text), text.split_once(':')) {
        assert_eq!(format!("{digest:?}"), format!("Digest({user}:…)"), "no password shown");
    }
}
