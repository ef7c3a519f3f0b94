//! `GET /metrics` of the registry: HTTP requests by route and status with their latency, and
//! the schemas and subjects it holds, read at scrape time.

use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::gauge::ConstGauge;
use service::metrics::{HttpMetrics, Registry as MetricsRegistry};

use crate::registry::Registry;

/// The registry's metrics, and the layer that counts its requests.
pub(crate) fn register(registry: Arc<Registry>) -> (Arc<MetricsRegistry>, HttpMetrics) {
    let mut metrics = MetricsRegistry::with_prefix("tributary_registry");
    let http = HttpMetrics::register(&mut metrics);
    metrics.register_collector(Box::new(Sizes(registry)));
    (Arc::new(metrics), http)
}

struct Sizes(Arc<Registry>);

impl std::fmt::Debug for Sizes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sizes")
    }
}

impl Collector for Sizes {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let (schemas, subjects) = self.0.sizes();
        for (name, help, value) in [
            ("schemas", "Schemas kept (referred to by a live or soft-deleted version).", schemas),
            ("subjects", "Subjects with a live version.", subjects),
        ] {
            let gauge = ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX));
            gauge.encode(encoder.encode_descriptor(name, help, None, MetricType::Gauge)?)?;
        }
        Ok(())
    }
}
