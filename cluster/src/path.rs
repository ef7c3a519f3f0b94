//! Node paths: `/`-separated, absolute, without empty, `.` or `..` segments.

use crate::CoordError;

/// Checks a node path. The root `/` is a valid path.
pub fn validate_path(path: &str) -> Result<(), CoordError> {
    let invalid = |reason| Err(CoordError::InvalidPath { path: path.to_owned(), reason });
    if !path.starts_with('/') {
        return invalid("must start with '/'");
    }
    if path == "/" {
        return Ok(());
    }
    if path.ends_with('/') {
        return invalid("must not end with '/'");
    }
    for segment in path[1..].split('/') {
        if segment.is_empty() || segment == "." || segment == ".." {
            return invalid("empty, '.' or '..' segment");
        }
        if segment.chars().any(|c| c.is_control()) {
            return invalid("control character");
        }
    }
    Ok(())
}

/// `parent` + `/` + `child`.
pub fn join(parent: &str, child: &str) -> String {
    if parent == "/" { format!("/{child}") } else { format!("{parent}/{child}") }
}

/// The parent of a non-root path.
pub(crate) fn parent(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &path[..i],
    }
}

/// Every proper ancestor of `path` except the root, outermost first.
pub(crate) fn ancestors(path: &str) -> impl Iterator<Item = &str> {
    path.match_indices('/').skip(1).map(move |(i, _)| &path[..i])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        assert!(validate_path("/").is_ok());
        assert!(validate_path("/brokers/ids/0").is_ok());
        for bad in ["", "brokers", "/a/", "//a", "/a//b", "/a/./b", "/a/../b", "/a\n"] {
            assert!(validate_path(bad).is_err(), "{bad:?}");
        }
        assert_eq!(join("/", "a"), "/a");
        assert_eq!(join("/a", "b"), "/a/b");
        assert_eq!(parent("/a/b"), "/a");
        assert_eq!(parent("/a"), "/");
        assert_eq!(ancestors("/a/b/c").collect::<Vec<_>>(), ["/a", "/a/b"]);
    }
}
