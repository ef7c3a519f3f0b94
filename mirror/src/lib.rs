//! Mirror (in progress).
