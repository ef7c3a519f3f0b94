//! The one shutdown shape: a [`CancellationToken`] that SIGINT or SIGTERM cancels. Servers
//! take the token (or `token.cancelled_owned()` as a future) and stop when it fires.

use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

/// The handlers could not be installed: the process could only be stopped by SIGKILL.
#[derive(Debug, thiserror::Error)]
#[error("cannot install the {signal} handler: {source}")]
pub struct SignalError {
    signal: &'static str,
    source: std::io::Error,
}

/// Installs SIGINT and SIGTERM handlers and returns a token they cancel. Call it inside the
/// runtime, before the process announces that it is ready, so that a signal sent as soon as
/// it is ready stops it cleanly.
pub fn on_signal() -> Result<CancellationToken, SignalError> {
    let mut term = signal(SignalKind::terminate())
        .map_err(|source| SignalError { signal: "SIGTERM", source })?;
    let mut int = signal(SignalKind::interrupt())
        .map_err(|source| SignalError { signal: "SIGINT", source })?;
    let token = CancellationToken::new();
    let cancel = token.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
            _ = int.recv() => tracing::info!("SIGINT: shutting down"),
        }
        cancel.cancel();
    });
    Ok(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn sigterm_cancels_the_token() {
        let token = on_signal().unwrap();
        assert!(!token.is_cancelled());
        nix::sys::signal::raise(nix::sys::signal::Signal::SIGTERM).unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(5), token.cancelled())
            .await
            .expect("SIGTERM cancels the token");
    }
}
