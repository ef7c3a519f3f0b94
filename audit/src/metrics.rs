//! `GET /metrics` in the Prometheus text format: per topic and tier the events missing and
//! duplicated over decided windows (`audit_missing_events`, `audit_duplicate_events`), windows
//! per verdict, and the service's own counters.

use std::fmt::Write;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;

use crate::ledger::Verdict;
use crate::state::{Shared, lock};

/// A label value with `\`, `"` and newlines escaped, as the text format requires.
fn label(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

pub(crate) fn render(shared: &Shared) -> String {
    let clock = shared.clock();
    let mut missing = String::new();
    let mut duplicate = String::new();
    let mut windows = String::new();
    {
        let ledger = lock(&shared.ledger);
        let tiers = ledger.active_tiers();
        let downstream = tiers.get(1..).unwrap_or_default();
        for topic in ledger.topics() {
            let reports = ledger.windows(topic, i64::MIN, i64::MAX, clock);
            let topic_label = label(topic);
            for tier in downstream {
                let tier = tier.as_str();
                let lost: i64 = reports.iter().filter_map(|r| r.missing.get(tier)).sum();
                let extra: i64 = reports.iter().filter_map(|r| r.duplicate.get(tier)).sum();
                let _ = writeln!(
                    missing,
                    "audit_missing_events{{topic=\"{topic_label}\",tier=\"{tier}\"}} {lost}"
                );
                let _ = writeln!(
                    duplicate,
                    "audit_duplicate_events{{topic=\"{topic_label}\",tier=\"{tier}\"}} {extra}"
                );
            }
            for verdict in Verdict::ALL {
                let n = reports.iter().filter(|r| r.verdict == verdict).count();
                let verdict = verdict.as_str();
                let _ = writeln!(
                    windows,
                    "audit_windows{{topic=\"{topic_label}\",verdict=\"{verdict}\"}} {n}"
                );
            }
        }
    }
    let mut out = String::new();
    family(
        &mut out,
        "audit_missing_events",
        "gauge",
        "Events a tier lacks against the reference tier (agent), summed over decided windows.",
    );
    out.push_str(&missing);
    family(
        &mut out,
        "audit_duplicate_events",
        "gauge",
        "Events a tier has beyond the reference tier (agent), summed over decided windows.",
    );
    out.push_str(&duplicate);
    family(&mut out, "audit_windows", "gauge", "Windows per topic and verdict.");
    out.push_str(&windows);

    let stats = &shared.stats;
    family(
        &mut out,
        "audit_caught_up",
        "gauge",
        "1 once _audit and the live clusters were read to the end they had on start.",
    );
    let _ = writeln!(out, "audit_caught_up {}", u8::from(clock.caught_up));
    family(
        &mut out,
        "audit_records_applied_total",
        "counter",
        "_audit records taken into the ledger.",
    );
    let _ = writeln!(
        out,
        "audit_records_applied_total {}",
        stats.records_applied.load(Ordering::Relaxed)
    );
    family(
        &mut out,
        "audit_records_rejected_total",
        "counter",
        "_audit records not taken, by reason.",
    );
    for (reason, n) in lock(&stats.records_rejected).iter() {
        let _ = writeln!(out, "audit_records_rejected_total{{reason=\"{reason}\"}} {n}");
    }
    family(
        &mut out,
        "audit_live_events_total",
        "counter",
        "Events counted in each live cluster since start.",
    );
    for (cluster, n) in lock(&stats.live_events).iter() {
        let _ = writeln!(out, "audit_live_events_total{{cluster=\"{}\"}} {n}", label(cluster));
    }
    family(
        &mut out,
        "audit_live_unreadable_total",
        "counter",
        "Live messages without a readable event header.",
    );
    for (cluster, n) in lock(&stats.live_unreadable).iter() {
        let _ = writeln!(out, "audit_live_unreadable_total{{cluster=\"{}\"}} {n}", label(cluster));
    }
    family(
        &mut out,
        "audit_read_errors_total",
        "counter",
        "Failed fetches, registry reads and cluster scans (each retried).",
    );
    let _ = writeln!(out, "audit_read_errors_total {}", stats.read_errors.load(Ordering::Relaxed));
    out
}

pub(crate) async fn get_metrics(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], render(&shared))
}
