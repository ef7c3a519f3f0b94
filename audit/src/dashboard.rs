//! The dashboard: server-rendered HTML with inline SVG, no script.
//!
//! - `/`: the hops holding events back (a stuck agent shows there within seconds, long before
//!   its window has a verdict), then every topic × its recent windows, one row per tier, each
//!   cell coloured by that tier's verdict and showing how many events it lacks or has too many;
//! - `/topics/{topic}`: the counts of every tier over time as a chart, and the windows as a table;
//! - `/topics/{topic}/windows/{start}`: one window, each tier against the reference, and the
//!   hosts whose counts fall short of their usual share.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};

use crate::api::{self, ApiError, HeldBack, TopicSummary};
use crate::chart::{chart, chart_legend};
use crate::html::{self, Status, chip, escape, number, page};
use crate::ledger::{Clock, Silent, Verdict, WindowReport};
use crate::state::{Shared, lock};
use events::audit::Tier;

/// Windows drawn in a topic's chart at most.
const CHART_WINDOWS_MAX: usize = 48;

fn status(shared: &Shared, clock: Clock) -> Status {
    Status {
        caught_up: clock.caught_up,
        window_ms: shared.config.audit_window_ms,
        grace_ms: clock.grace_ms,
        now_ms: clock.now_ms,
    }
}

/// Windows shorter than a minute are labelled to the second.
fn seconds(shared: &Shared) -> bool {
    shared.config.audit_window_ms % 60_000 != 0
}

fn error_page(shared: &Shared, error: ApiError) -> Response {
    let clock = shared.clock();
    let body = format!(
        r#"<p class="crumbs"><a href="/">All topics</a></p><h2>Not found</h2><p class="note">{}</p>"#,
        escape(&error.to_string())
    );
    let html = page("not found", shared.config.refresh_s, &status(shared, clock), &body);
    (error.status(), Html(html)).into_response()
}

/// Events missing and duplicated, each as a total and, where it is known, per tier.
struct EventCounts<'a> {
    missing: i64,
    duplicate: i64,
    by_tier: Option<(&'a TierCounts, &'a TierCounts)>,
}

type TierCounts = BTreeMap<&'static str, i64>;

/// `live 3 · loader 12`: the tiers with a count, in pipeline order; empty when none has.
fn per_tier(counts: &TierCounts, tiers: &[Tier]) -> String {
    let parts: Vec<String> = tiers
        .iter()
        .filter_map(|tier| {
            let n = counts.get(tier.as_str()).copied().filter(|&n| n > 0)?;
            Some(format!(
                r#"<span data-tier="{}">{} {}</span>"#,
                tier.as_str(),
                tier.as_str(),
                number(n)
            ))
        })
        .collect();
    match parts.is_empty() {
        true => String::new(),
        false => format!(r#"<div class="l by-tier">{}</div>"#, parts.join(" · ")),
    }
}

fn cards(counts: [(Verdict, u64); 4], events: EventCounts, tiers: &[Tier]) -> String {
    let mut out = String::from(r#"<div class="cards">"#);
    for (verdict, n) in counts {
        let _ = write!(
            out,
            r#"<div class="card {v}" data-card="{v}"><div class="n">{n}</div><div class="l">{s} {v} windows</div></div>"#,
            v = verdict.as_str(),
            s = html::symbol(verdict),
            n = number(n as i64)
        );
    }
    let (missing_by_tier, duplicate_by_tier) = match events.by_tier {
        Some((missing, duplicate)) => (per_tier(missing, tiers), per_tier(duplicate, tiers)),
        None => (String::new(), String::new()),
    };
    let _ = write!(
        out,
        r#"<div class="card" data-card="missing"><div class="n">{}</div><div class="l">events missing</div>{missing_by_tier}</div><div class="card" data-card="duplicated"><div class="n">{}</div><div class="l">events duplicated</div>{duplicate_by_tier}</div></div>"#,
        number(events.missing),
        number(events.duplicate)
    );
    out
}

fn topic_cards(summary: &TopicSummary) -> String {
    cards(
        [
            (Verdict::Complete, summary.complete),
            (Verdict::Loss, summary.loss),
            (Verdict::Duplication, summary.duplication),
            (Verdict::Open, summary.open),
        ],
        EventCounts {
            missing: summary.missing_events,
            duplicate: summary.duplicate_events,
            by_tier: None,
        },
        &[],
    )
}

/// The panel of tiers holding events back, if any: per tier and window, how many events for
/// how long, and for the agent tier which agents hold them.
fn held_panel(held: &[HeldBack], silent: &[Silent], secs: bool) -> String {
    if held.is_empty() && silent.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        r#"<div class="panel" id="held"><h3>Held back</h3><table class="list"><thead><tr><th style="text-align:left">Topic</th><th>Window</th><th>Tier</th><th>Events</th><th>For</th><th class="host">Held by</th></tr></thead><tbody>"#,
    );
    for h in held {
        let hosts: Vec<String> = h
            .held
            .hosts
            .iter()
            .map(|(host, n)| {
                format!(
                    r#"<span data-host="{}">{} ({})</span>"#,
                    escape(host),
                    escape(host),
                    number(*n)
                )
            })
            .collect();
        let _ = write!(
            out,
            r#"<tr class="flag" data-topic="{t}" data-tier="{tier}" data-window="{start}"><td style="text-align:left"><a href="{href}">{t}</a></td><td>{from}</td><td>{tier}</td><td>{events}</td><td>{seconds} s</td><td class="host">{hosts}</td></tr>"#,
            t = escape(&h.topic),
            tier = h.tier,
            start = h.window_start,
            href = window_href(&h.topic, h.window_start),
            from = html::utc(h.window_start, secs),
            events = number(h.held.events),
            seconds = number(h.held.held_ms / 1_000),
            hosts = hosts.join(", "),
        );
    }
    for agent in silent {
        let _ = write!(
            out,
            r#"<tr class="flag" data-silent="{h}"><td style="text-align:left">every topic</td><td>{since}</td><td>agent</td><td>≥ {events}</td><td>{seconds} s</td><td class="host"><span data-host="{h}">{h}</span> (not heard from)</td></tr>"#,
            h = escape(&agent.host),
            since = html::utc(agent.last_heard_ms, true),
            events = number(agent.held_events),
            seconds = number(agent.silent_ms / 1_000),
        );
    }
    out.push_str(r#"</tbody></table><p class="note">Each tier has not counted these events, which the tier before it counted that long ago: a hop that holds events back. For the agent tier, events accepted and not yet acknowledged by a broker, per agent; an agent not heard from (its counts cannot reach the audit) holds at least what it last reported.</p></div>"#);
    out
}

fn topic_href(topic: &str) -> String {
    format!("/topics/{}", escape(topic))
}

fn window_href(topic: &str, start: i64) -> String {
    format!("/topics/{}/windows/{start}", escape(topic))
}

/// The text of one tier's cell: what it lacks or has too many, or the verdict's symbol.
fn cell_text(report: &WindowReport, tier: &str, verdict: Verdict) -> String {
    match verdict {
        Verdict::Loss => format!("−{}", number(report.missing.get(tier).copied().unwrap_or(0))),
        Verdict::Duplication => {
            format!("+{}", number(report.duplicate.get(tier).copied().unwrap_or(0)))
        }
        other => html::symbol(other).to_owned(),
    }
}

pub(crate) async fn overview(State(shared): State<Arc<Shared>>) -> Html<String> {
    let clock = shared.clock();
    let summary = api::summary(&shared);
    let ledger = lock(&shared.ledger);
    let tiers = ledger.active_tiers();
    let starts = ledger.recent_window_starts(shared.config.dashboard_windows);
    let secs = seconds(&shared);
    let topics: Vec<TopicSummary> =
        ledger.topics().map(|topic| api::topic_summary(&ledger, topic, clock)).collect();

    let mut body = cards(
        [
            (Verdict::Complete, summary.windows.get("complete").copied().unwrap_or(0)),
            (Verdict::Loss, summary.windows.get("loss").copied().unwrap_or(0)),
            (Verdict::Duplication, summary.windows.get("duplication").copied().unwrap_or(0)),
            (Verdict::Open, summary.windows.get("open").copied().unwrap_or(0)),
        ],
        EventCounts {
            missing: topics.iter().map(|t| t.missing_events).sum(),
            duplicate: topics.iter().map(|t| t.duplicate_events).sum(),
            by_tier: Some((&summary.missing_events, &summary.duplicate_events)),
        },
        &tiers,
    );
    body.push_str(&held_panel(&summary.held, &summary.silent_agents, secs));
    body.push_str(&html::legend());
    if starts.is_empty() {
        body.push_str(r#"<div class="panel"><p class="note">No counts yet: nothing has been read from <code>_audit</code> or the live clusters.</p></div>"#);
        drop(ledger);
        return Html(page("overview", shared.config.refresh_s, &status(&shared, clock), &body));
    }

    body.push_str(r#"<div class="panel"><table class="grid" id="overview"><thead><tr><th style="text-align:left">Topic</th><th style="text-align:left">Tier</th>"#);
    let mut last_date = String::new();
    for start in &starts {
        let (date, time) = html::utc_parts(*start, secs);
        let date_label = if date != last_date { date[5..].to_owned() } else { String::new() };
        last_date = date;
        let _ = write!(body, "<th>{time}<small>{date_label}&nbsp;</small></th>");
    }
    body.push_str("</tr></thead><tbody>");

    for topic_summary in &topics {
        let topic = topic_summary.topic.as_str();
        let reports: Vec<Option<WindowReport>> =
            starts.iter().map(|start| ledger.window(topic, *start, clock)).collect();
        let flagged = topic_summary.loss + topic_summary.duplication;
        let sub = if flagged > 0 {
            format!("{} flagged", number(flagged as i64))
        } else {
            format!("{} windows", number(topic_summary.windows as i64))
        };
        for (row, tier) in tiers.iter().enumerate() {
            let tier_name = tier.as_str();
            body.push_str(if row == 0 { r#"<tr class="first">"# } else { "<tr>" });
            if row == 0 {
                let _ = write!(
                    body,
                    r#"<td class="topic" rowspan="{}" data-topic="{t}"><a href="{href}">{t}</a><span class="sub">{sub}</span></td>"#,
                    tiers.len(),
                    t = escape(topic),
                    href = topic_href(topic),
                );
            }
            let label =
                if row == 0 { format!("{tier_name} (reference)") } else { tier_name.to_owned() };
            let _ = write!(body, r#"<td class="tier">{label}</td>"#);
            for (start, report) in starts.iter().zip(&reports) {
                let Some(report) = report else {
                    body.push_str(r#"<td class="none">·</td>"#);
                    continue;
                };
                let count = report.tiers.get(tier_name).copied().unwrap_or(0);
                if row == 0 {
                    let _ = write!(body, r#"<td class="ref">{}</td>"#, number(count));
                    continue;
                }
                let verdict = report.tier_verdicts.get(tier_name).copied().unwrap_or(Verdict::Open);
                let reference = report.reference_tier.and_then(|t| report.tiers.get(t));
                let reference = reference.copied().unwrap_or(0);
                let _ = write!(
                    body,
                    r#"<td><a class="cell {v}" href="{href}" data-topic="{t}" data-tier="{tier_name}" data-window="{start}" data-verdict="{v}" title="{tier_name}: {c} of {r} — {v}">{text}</a></td>"#,
                    v = verdict.as_str(),
                    href = window_href(topic, *start),
                    t = escape(topic),
                    c = number(count),
                    r = number(reference),
                    text = cell_text(report, tier_name, verdict),
                );
            }
            body.push_str("</tr>");
        }
    }
    body.push_str("</tbody></table></div>");
    let _ = write!(
        body,
        r#"<p class="note">Each tier is compared with the {} tier. Click a topic for its chart, a cell for the window's hosts.</p>"#,
        summary.reference_tier.unwrap_or("accepted")
    );
    drop(ledger);
    Html(page("overview", shared.config.refresh_s, &status(&shared, clock), &body))
}

pub(crate) async fn topic_page(
    State(shared): State<Arc<Shared>>,
    Path(topic): Path<String>,
) -> Response {
    let clock = shared.clock();
    let secs = seconds(&shared);
    let ledger = lock(&shared.ledger);
    if !ledger.has_topic(&topic) {
        drop(ledger);
        return error_page(&shared, ApiError::UnknownTopic(topic));
    }
    let all = ledger.windows(&topic, i64::MIN, i64::MAX, clock);
    let shown = &all[all.len().saturating_sub(CHART_WINDOWS_MAX)..];
    let tiers = ledger.active_tiers();
    let summary = api::topic_summary(&ledger, &topic, clock);

    let mut body = format!(
        r#"<p class="crumbs"><a href="/">All topics</a> / {t}</p><h2>{t}</h2>"#,
        t = escape(&topic)
    );
    body.push_str(&topic_cards(&summary));
    let _ = write!(
        body,
        r#"<h2>Events per window and tier</h2><div class="panel">{}"#,
        chart_legend(&tiers)
    );
    body.push_str(&chart(&ledger, &topic, shown, secs));
    body.push_str("</div>");

    body.push_str(r#"<h2>Windows</h2><table class="list" id="windows"><thead><tr><th>Window (UTC)</th><th>Verdict</th>"#);
    for tier in &tiers {
        let _ = write!(body, "<th>{}</th>", tier.as_str());
    }
    body.push_str(r#"<th title="the most any tier lacks">Missing</th><th title="the most any tier has too many">Duplicated</th><th></th></tr></thead><tbody>"#);
    for report in shown.iter().rev() {
        let flagged = matches!(report.verdict, Verdict::Loss | Verdict::Duplication);
        let _ = write!(
            body,
            r#"<tr{} data-window="{}" data-verdict="{}"><td>{}</td><td>{}</td>"#,
            if flagged { r#" class="flag""# } else { "" },
            report.window_start,
            report.verdict.as_str(),
            html::utc(report.window_start, secs),
            chip(report.verdict)
        );
        for tier in &tiers {
            let count = report.tiers.get(tier.as_str()).copied().unwrap_or(0);
            let short = report.missing.contains_key(tier.as_str());
            let _ = write!(
                body,
                "<td{}>{}</td>",
                if short { r#" class="short""# } else { "" },
                number(count)
            );
        }
        let _ = write!(
            body,
            r#"<td>{}</td><td>{}</td><td><a href="{}">hosts →</a></td></tr>"#,
            number(report.missing.values().max().copied().unwrap_or(0)),
            number(report.duplicate.values().max().copied().unwrap_or(0)),
            window_href(&topic, report.window_start)
        );
    }
    body.push_str("</tbody></table>");
    drop(ledger);
    Html(page(&topic, shared.config.refresh_s, &status(&shared, clock), &body)).into_response()
}

pub(crate) async fn window_page(
    State(shared): State<Arc<Shared>>,
    Path((topic, start)): Path<(String, i64)>,
) -> Response {
    let clock = shared.clock();
    let secs = seconds(&shared);
    let detail = match api::window_detail(&shared, &topic, start) {
        Ok(detail) => detail,
        Err(e) => return error_page(&shared, e),
    };
    let report = &detail.report;
    let reference = detail.report.reference_tier;
    let reference_count = reference.and_then(|t| report.tiers.get(t)).copied().unwrap_or(0);
    let t = escape(&topic);
    let mut body = format!(
        r#"<p class="crumbs"><a href="/">All topics</a> / <a href="{href}">{t}</a> / window</p><h2>{t} · {from} – {to} UTC &nbsp;{chip}</h2>"#,
        href = topic_href(&topic),
        from = html::utc(start, secs),
        to = html::utc_parts(start + report.window_ms, secs).1,
        chip = chip(report.verdict),
    );

    body.push_str(r#"<table class="list" id="tiers"><thead><tr><th>Tier</th><th>Events</th><th>Against the reference</th><th>Verdict</th></tr></thead><tbody>"#);
    for tier in &detail.order {
        let count = &report.tiers.get(tier).copied().unwrap_or(0);
        let verdict = report.tier_verdicts.get(tier).copied();
        let difference = count - reference_count;
        let against = match (Some(*tier) == reference, difference) {
            (true, _) => "reference".to_owned(),
            (false, 0) => "equal".to_owned(),
            (false, d) if d < 0 => format!("{} missing", number(-d)),
            (false, d) => format!("{} extra", number(d)),
        };
        let _ = write!(
            body,
            r#"<tr{} data-tier="{tier}"><td>{tier}</td><td>{}</td><td>{against}</td><td>{}</td></tr>"#,
            if verdict == Some(Verdict::Loss) { r#" class="flag""# } else { "" },
            number(*count),
            verdict.map(chip).unwrap_or_default(),
        );
    }
    body.push_str("</tbody></table>");

    for (tier, held) in &report.held {
        let _ = write!(
            body,
            r#"<p class="note" data-held="{tier}">The <b>{tier}</b> tier has not yet counted {} events that the tier before it counted {} s ago.</p>"#,
            number(held.events),
            number(held.held_ms / 1_000),
        );
    }
    if let Some(tier) = report.loss_at {
        let _ = write!(
            body,
            r#"<p class="note" id="loss-at">The events went missing at the <b>{tier}</b> tier; the tiers after it inherit the shortfall.</p>"#
        );
    }
    body.push_str(r#"<h2>Hosts that fall short</h2>"#);
    let short_tiers: Vec<&str> =
        detail.order.iter().copied().filter(|t| report.missing.contains_key(t)).collect();
    if short_tiers.is_empty() {
        body.push_str(r#"<p class="note">No tier lacks events in this window.</p>"#);
    } else {
        body.push_str(r#"<table class="list" id="short-hosts"><thead><tr><th>Tier</th><th class="host">Host</th><th>Events</th><th>Usual share</th><th>Short by</th></tr></thead><tbody>"#);
        let mut any = false;
        for tier in &short_tiers {
            for host in detail.hosts.get(tier).into_iter().flatten().filter(|h| h.short_by > 0) {
                any = true;
                let _ = write!(
                    body,
                    r#"<tr class="flag" data-tier="{tier}" data-host="{h}"><td>{tier}</td><td class="host">{h}</td><td>{}</td><td>{}</td><td class="short">{}</td></tr>"#,
                    number(host.count),
                    number(host.expected),
                    number(host.short_by),
                    h = escape(&host.host),
                );
            }
            if detail.hosts.get(tier).is_none_or(Vec::is_empty) {
                any = true;
                let _ = write!(
                    body,
                    r#"<tr class="flag" data-tier="{tier}"><td>{tier}</td><td colspan="3">no host of this tier reported this window</td><td class="short">{}</td></tr>"#,
                    number(report.missing.get(tier).copied().unwrap_or(0))
                );
            }
        }
        if !any {
            body.push_str(r#"<tr><td colspan="5">Every host carried its usual share; the shortfall is spread thin.</td></tr>"#);
        }
        body.push_str("</tbody></table>");
    }

    body.push_str("<h2>Every host</h2>");
    for tier in &detail.order {
        let hosts = detail.hosts.get(tier).map(Vec::as_slice).unwrap_or_default();
        let _ = write!(
            body,
            r#"<h3 class="note">{tier}</h3><table class="list" data-hosts="{tier}"><thead><tr><th>Host</th><th>Events</th><th>Usual share</th></tr></thead><tbody>"#
        );
        for host in hosts {
            let _ = write!(
                body,
                "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
                escape(&host.host),
                number(host.count),
                number(host.expected)
            );
        }
        body.push_str("</tbody></table>");
    }
    Html(page(&topic, shared.config.refresh_s, &status(&shared, clock), &body)).into_response()
}

pub(crate) async fn not_found(State(shared): State<Arc<Shared>>) -> Response {
    let mut response = error_page(&shared, ApiError::BadQuery("no such page".into()));
    *response.status_mut() = StatusCode::NOT_FOUND;
    response
}
