//! Frontend agent (in progress).
