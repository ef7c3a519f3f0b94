//! The demo's schema registry: the real service on a loopback port, with the pipeline's
//! schemas (`events::schemas`, compiled into this binary so it runs from anywhere) registered
//! over its HTTP API.

use std::path::Path;

use schema_registry::RegistryClient;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::error::DemoError;

pub struct Registry {
    pub url: String,
    /// The clients' TLS (the operator's certificate), with `--tls`.
    tls: Option<std::sync::Arc<rustls::ClientConfig>>,
    stop: CancellationToken,
    task: JoinHandle<Result<(), schema_registry::RunError>>,
}

impl Registry {
    /// Serves a registry with its log in `data_dir` and registers the shipped schemas (a no-op
    /// for schemas a previous run registered).
    pub async fn start(data_dir: &Path) -> Result<Registry, DemoError> {
        Registry::start_with(data_dir, None).await
    }

    /// [`Registry::start`], over HTTPS with client certificates if `tls` is given.
    pub async fn start_with(
        data_dir: &Path,
        tls: Option<&super::tls::DemoTls>,
    ) -> Result<Registry, DemoError> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|source| DemoError::Bind { what: "schema registry".into(), source })?;
        let addr = listener
            .local_addr()
            .map_err(|source| DemoError::Bind { what: "schema registry".into(), source })?;
        let mut config =
            schema_registry::Config { data_dir: data_dir.to_owned(), ..Default::default() };
        if let Some(tls) = tls {
            config.tls = tls.service("schema-registry").server_args();
        }
        let stop = CancellationToken::new();
        let task = tokio::spawn(schema_registry::run(listener, config, stop.clone()));
        let scheme = if tls.is_some() { "https" } else { "http" };
        let url = format!("{scheme}://{addr}");
        let registry = Registry { url, tls: tls.map(|t| t.operator()), stop, task };
        events::schemas::register(&registry.client()?).await.map_err(DemoError::Registry)?;
        Ok(registry)
    }

    pub fn client(&self) -> Result<RegistryClient, DemoError> {
        RegistryClient::with_tls(&self.url, self.tls.clone()).map_err(DemoError::Registry)
    }

    pub async fn stop(self) {
        self.stop.cancel();
        match self.task.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::error!(error = %e, "schema registry failed"),
            Err(e) => tracing::error!(error = %e, "schema registry task failed"),
        }
    }
}
