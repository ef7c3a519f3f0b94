//! The JSON API, and the views of the ledger the dashboard renders too:
//!
//! - `GET /api/summary`: readiness, verdict totals and the hops holding events back (what a
//!   launcher or a check reads);
//! - `GET /api/topics`: per topic, its windows' verdicts;
//! - `GET /api/windows?topic=T[&from=MS&to=MS]`: per window, counts per tier and the verdict;
//! - `GET /api/window?topic=T&start=MS`: one window with every host's count, short hosts first.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use events::audit::Tier;
use serde::{Deserialize, Serialize};

use crate::ledger::{Clock, Held, HostCount, Ledger, Silent, Verdict, WindowReport};
use crate::state::{Shared, lock};

#[derive(Debug, thiserror::Error)]
pub(crate) enum ApiError {
    #[error("{0}")]
    BadQuery(String),
    #[error("no counts for topic {0:?}")]
    UnknownTopic(String),
    #[error("no counts for topic {topic:?} in the window starting at {start}")]
    UnknownWindow { topic: String, start: i64 },
}

impl ApiError {
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadQuery(_) => StatusCode::BAD_REQUEST,
            ApiError::UnknownTopic(_) | ApiError::UnknownWindow { .. } => StatusCode::NOT_FOUND,
        }
    }
}

impl From<QueryRejection> for ApiError {
    fn from(rejection: QueryRejection) -> ApiError {
        ApiError::BadQuery(rejection.body_text())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status(), Json(serde_json::json!({ "error": self.to_string() }))).into_response()
    }
}

/// Verdict totals over every window in the history.
#[derive(Debug, Serialize)]
pub(crate) struct Summary {
    /// False while `_audit` and the live clusters are still read to the end they had on start;
    /// every window is `open` until then.
    pub caught_up: bool,
    pub window_ms: i64,
    pub grace_ms: i64,
    pub loader_grace_ms: i64,
    /// The tier every other is compared with (`accepted` when agents report).
    pub reference_tier: Option<&'static str>,
    /// Tiers that report, in pipeline order.
    pub tiers: Vec<&'static str>,
    pub topics: usize,
    pub windows: BTreeMap<&'static str, u64>,
    pub missing_events: BTreeMap<&'static str, i64>,
    pub duplicate_events: BTreeMap<&'static str, i64>,
    /// `held_ms`: a tier holding events longer than this is flagged in `held`.
    pub held_ms: i64,
    /// Every tier of every window without a verdict that has held events back for longer
    /// than `held_ms` (the loader tier: `loader_grace_ms`), longest first.
    pub held: Vec<HeldBack>,
    /// Agents not heard from for longer than `held_ms` (they publish every few seconds even
    /// with nothing to count): one whose brokers it cannot reach, or that is down.
    pub silent_agents: Vec<Silent>,
}

/// A tier that holds back events the tier before it counted, in one window of one topic.
#[derive(Debug, Serialize)]
pub(crate) struct HeldBack {
    pub topic: String,
    pub window_start: i64,
    pub tier: &'static str,
    #[serde(flatten)]
    pub held: Held,
}

/// Whether `tier` has held events back for longer than its limit: `held_ms`, or for the
/// loader, a batch job, its grace.
fn past_limit(shared: &Shared, clock: Clock, tier: &str, held: &Held) -> bool {
    let limit_ms =
        if tier == Tier::Loader.as_str() { clock.loader_grace_ms } else { shared.config.held_ms };
    held.held_ms > limit_ms
}

#[derive(Debug, Serialize)]
pub(crate) struct TopicSummary {
    pub topic: String,
    pub windows: u64,
    pub complete: u64,
    pub loss: u64,
    pub duplication: u64,
    pub open: u64,
    /// Events missing / duplicated, summed over decided windows: per window the most any one
    /// tier lacks (has too many), so a loss seen again downstream is not counted twice.
    pub missing_events: i64,
    pub duplicate_events: i64,
    /// The newest window's start.
    pub latest_window_start: Option<i64>,
}

#[derive(Debug, Serialize)]
pub(crate) struct WindowDetail {
    pub topic: String,
    #[serde(flatten)]
    pub report: WindowReport,
    /// The tiers that take part, in pipeline order.
    #[serde(skip)]
    pub order: Vec<&'static str>,
    /// Every tier's hosts, those short of their usual share first.
    pub hosts: BTreeMap<&'static str, Vec<HostCount>>,
}

pub(crate) fn topic_summary(ledger: &Ledger, topic: &str, clock: Clock) -> TopicSummary {
    let reports = ledger.windows(topic, i64::MIN, i64::MAX, clock);
    let mut summary = TopicSummary {
        topic: topic.to_owned(),
        windows: reports.len() as u64,
        complete: 0,
        loss: 0,
        duplication: 0,
        open: 0,
        missing_events: 0,
        duplicate_events: 0,
        latest_window_start: reports.last().map(|r| r.window_start),
    };
    for report in &reports {
        match report.verdict {
            Verdict::Complete => summary.complete += 1,
            Verdict::Loss => summary.loss += 1,
            Verdict::Duplication => summary.duplication += 1,
            Verdict::Open => summary.open += 1,
        }
        summary.missing_events += report.missing.values().max().copied().unwrap_or(0);
        summary.duplicate_events += report.duplicate.values().max().copied().unwrap_or(0);
    }
    summary
}

pub(crate) fn summary(shared: &Shared) -> Summary {
    let clock = shared.clock();
    let ledger = lock(&shared.ledger);
    let mut summary = Summary {
        caught_up: clock.caught_up,
        window_ms: ledger.window_ms(),
        grace_ms: clock.grace_ms,
        loader_grace_ms: clock.loader_grace_ms,
        reference_tier: ledger.reference_tier().map(Tier::as_str),
        tiers: ledger.active_tiers().into_iter().map(Tier::as_str).collect(),
        topics: 0,
        windows: Verdict::ALL.iter().map(|v| (v.as_str(), 0)).collect(),
        missing_events: BTreeMap::new(),
        duplicate_events: BTreeMap::new(),
        held_ms: shared.config.held_ms,
        held: Vec::new(),
        silent_agents: ledger.silent_agents(clock, shared.config.held_ms),
    };
    for topic in ledger.topics() {
        summary.topics += 1;
        for report in ledger.windows(topic, i64::MIN, i64::MAX, clock) {
            *summary.windows.entry(report.verdict.as_str()).or_default() += 1;
            for (tier, held) in report.held {
                if past_limit(shared, clock, tier, &held) {
                    let window_start = report.window_start;
                    let topic = topic.to_owned();
                    summary.held.push(HeldBack { topic, window_start, tier, held });
                }
            }
            for (tier, n) in report.missing {
                *summary.missing_events.entry(tier).or_default() += n;
            }
            for (tier, n) in report.duplicate {
                *summary.duplicate_events.entry(tier).or_default() += n;
            }
        }
    }
    summary.held.sort_by_key(|h| std::cmp::Reverse(h.held.held_ms));
    summary
}

pub(crate) fn window_detail(
    shared: &Shared,
    topic: &str,
    start: i64,
) -> Result<WindowDetail, ApiError> {
    let clock = shared.clock();
    let ledger = lock(&shared.ledger);
    let report = ledger
        .window(topic, start, clock)
        .ok_or_else(|| ApiError::UnknownWindow { topic: topic.to_owned(), start })?;
    let tiers: Vec<Tier> = ledger
        .active_tiers()
        .into_iter()
        .filter(|t| report.tiers.contains_key(t.as_str()))
        .collect();
    let hosts =
        tiers.iter().map(|tier| (tier.as_str(), ledger.hosts(topic, start, *tier))).collect();
    Ok(WindowDetail {
        topic: topic.to_owned(),
        report,
        order: tiers.into_iter().map(Tier::as_str).collect(),
        hosts,
    })
}

pub(crate) async fn get_summary(State(shared): State<Arc<Shared>>) -> Json<Summary> {
    Json(summary(&shared))
}

pub(crate) async fn get_topics(State(shared): State<Arc<Shared>>) -> Json<Vec<TopicSummary>> {
    let clock = shared.clock();
    let ledger = lock(&shared.ledger);
    Json(ledger.topics().map(|topic| topic_summary(&ledger, topic, clock)).collect())
}

#[derive(Debug, Deserialize)]
pub(crate) struct WindowsQuery {
    topic: String,
    from: Option<i64>,
    to: Option<i64>,
}

pub(crate) async fn get_windows(
    State(shared): State<Arc<Shared>>,
    query: Result<Query<WindowsQuery>, QueryRejection>,
) -> Result<Json<Vec<WindowReport>>, ApiError> {
    let Query(query) = query?;
    let clock = shared.clock();
    let ledger = lock(&shared.ledger);
    if !ledger.has_topic(&query.topic) {
        return Err(ApiError::UnknownTopic(query.topic));
    }
    let (from, to) = (query.from.unwrap_or(i64::MIN), query.to.unwrap_or(i64::MAX));
    Ok(Json(ledger.windows(&query.topic, from, to, clock)))
}

#[derive(Debug, Deserialize)]
pub(crate) struct WindowQuery {
    topic: String,
    start: i64,
}

pub(crate) async fn get_window(
    State(shared): State<Arc<Shared>>,
    query: Result<Query<WindowQuery>, QueryRejection>,
) -> Result<Json<WindowDetail>, ApiError> {
    let Query(query) = query?;
    Ok(Json(window_detail(&shared, &query.topic, query.start)?))
}
