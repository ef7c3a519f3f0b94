//! Tributary's own protocol (`docs/design.md`, "Requests"): one connection's frames in and
//! answers out, in request order (`connection`), and what each request does — produces
//! (`produce`), fetches and long polls (`fetch`), what followers ask of a leader
//! (`replica`), and who may ask what (`authorize`). Requests reach the log through
//! [`crate::node::Node`].

mod authorize;
mod connection;
mod fetch;
mod produce;
mod replica;

pub(crate) use connection::Connection;
