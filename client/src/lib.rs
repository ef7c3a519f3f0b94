//! Clients of a Tributary broker. This layer is the pipelined [`Connection`]: every request
//! type of `DESIGN.md` over one TCP connection, many in flight at once, responses matched to
//! requests by order (the protocol has no correlation ids).

mod connection;
mod error;

pub use connection::{Connection, ConnectionConfig};
pub use error::ClientError;
