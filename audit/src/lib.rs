//! Audit (in progress).
