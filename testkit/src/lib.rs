//! Test fixtures shared by every Tributary crate: each starts a real service on a
//! loopback port chosen by the OS and stops it when dropped.

pub mod registry;
