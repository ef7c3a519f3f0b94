//! What both protocols' connections stand on: one accept loop for the broker's listeners
//! (`listener`: the connection limit, accept backoff, TLS handshake and principal), the
//! memory and waiting slots a connection must hold (`admission`), and sending a segment's
//! bytes to a socket (`send`: `sendfile`, or a read through TLS).

pub mod admission;
pub mod listener;
pub mod send;
