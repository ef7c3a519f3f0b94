//! `tributary`: see the crate docs.

fn main() {}
