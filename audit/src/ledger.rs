//! The books the audit service balances (docs/design.md, "Audit record" and "Reconciliation"):
//! per topic and window, every host's cumulative count at every tier, and each window's verdict.
//!
//! Counts arrive from two places. Records read from `_audit` are cumulative, so the ledger
//! keeps the **largest** count seen per `(tier, host, topic, window_start)`: a re-sent, duplicated
//! or reordered record never lowers a count, and a late record raises it. The live tier is
//! counted by the service itself ([`Ledger::add_live`]), one event at a time.
//!
//! Every downstream tier is reconciled against the **reference tier**: `agent`, or — in a
//! deployment without agents — the first tier of the pipeline that reports at all. A tier that
//! has never reported anything (say, no loader is deployed) is not expected and takes no part.

use std::collections::BTreeMap;

use events::audit::{AuditRecord, Tier};
use serde::Serialize;

/// What the books say about one window of one topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Every tier counted exactly what the reference tier did.
    Complete,
    /// A tier counted fewer, and the window closed more than the grace period ago.
    Loss,
    /// A tier counted more (and none fewer).
    Duplication,
    /// The window is still open, or closed less than the grace period ago, or the service is
    /// still replaying its sources: no verdict yet.
    Open,
}

impl Verdict {
    pub const ALL: [Verdict; 4] =
        [Verdict::Complete, Verdict::Loss, Verdict::Duplication, Verdict::Open];

    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Complete => "complete",
            Verdict::Loss => "loss",
            Verdict::Duplication => "duplication",
            Verdict::Open => "open",
        }
    }
}

/// Why a record was not taken into the books.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Rejected {
    #[error("its window_ms differs from the service's --window-ms")]
    WindowMs,
    #[error("its window_start is not aligned to window_ms")]
    Unaligned,
    #[error("its count is negative")]
    NegativeCount,
    #[error("its topic or host is empty")]
    EmptyName,
}

impl Rejected {
    pub fn as_str(self) -> &'static str {
        match self {
            Rejected::WindowMs => "window_ms",
            Rejected::Unaligned => "unaligned",
            Rejected::NegativeCount => "negative_count",
            Rejected::EmptyName => "empty_name",
        }
    }
}

/// When verdicts are given.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    /// Wall-clock time, ms since the epoch.
    pub now_ms: i64,
    pub grace_ms: i64,
    /// Grace of the `loader` tier (at least `grace_ms`): a shortfall there is loss only after it.
    pub loader_grace_ms: i64,
    /// False while the service still replays `_audit` and recounts the live clusters: every
    /// window is [`Verdict::Open`] until then, so a half-read source never flags a loss.
    pub caught_up: bool,
}

fn tier_index(tier: Tier) -> usize {
    match tier {
        Tier::Agent => 0,
        Tier::Live => 1,
        Tier::Mirror => 2,
        Tier::Loader => 3,
    }
}

/// Every host's count at every tier for one window of one topic.
#[derive(Debug, Clone, Default)]
struct Window {
    hosts: [BTreeMap<String, i64>; 4],
}

impl Window {
    fn total(&self, tier: Tier) -> i64 {
        self.hosts[tier_index(tier)].values().sum()
    }
}

/// The report of one window: the JSON of `GET /api/windows`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WindowReport {
    pub window_start: i64,
    pub window_ms: i64,
    pub verdict: Verdict,
    /// The tier the others are compared with: `agent`, or for a topic no agent counts (one
    /// produced straight into a live cluster) the first tier that counts it.
    pub reference_tier: Option<&'static str>,
    /// Count per tier that takes part (has ever reported, from the reference tier on).
    pub tiers: BTreeMap<&'static str, i64>,
    /// Per downstream tier with a verdict: how many events it lacks (loss) ...
    pub missing: BTreeMap<&'static str, i64>,
    /// ... or has too many (duplication).
    pub duplicate: BTreeMap<&'static str, i64>,
    /// Each downstream tier's own verdict.
    pub tier_verdicts: BTreeMap<&'static str, Verdict>,
    /// The most upstream tier in loss: where the events went missing (the tiers after it
    /// inherit the shortfall).
    pub loss_at: Option<&'static str>,
}

impl WindowReport {
    pub fn count(&self, tier: Tier) -> Option<i64> {
        self.tiers.get(tier.as_str()).copied()
    }
}

/// One host's count in a window, and for a tier in loss, what its usual share would be.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HostCount {
    pub host: String,
    pub count: i64,
    /// The host's usual share of the reference count: its share of the tier's counts in the
    /// nearest other windows of the topic (an equal split when there are none).
    pub expected: i64,
    /// `expected - count` when positive: this host falls short.
    pub short_by: i64,
}

/// The cumulative counts of every tier, host, topic and window.
#[derive(Debug)]
pub struct Ledger {
    window_ms: i64,
    topics: BTreeMap<String, BTreeMap<i64, Window>>,
    /// Tiers that have reported at least one count.
    active: [bool; 4],
}

/// Windows of the same topic that [`Ledger::hosts`] learns each host's usual share from.
const REFERENCE_WINDOWS: usize = 6;

impl Ledger {
    pub fn new(window_ms: i64) -> Ledger {
        assert!(window_ms > 0, "window_ms is validated by the config");
        Ledger { window_ms, topics: BTreeMap::new(), active: [false; 4] }
    }

    pub fn window_ms(&self) -> i64 {
        self.window_ms
    }

    /// Takes a cumulative record into the books; the larger count wins.
    pub fn apply(&mut self, record: &AuditRecord) -> Result<(), Rejected> {
        if record.window_ms != self.window_ms {
            return Err(Rejected::WindowMs);
        }
        if record.window_start.rem_euclid(self.window_ms) != 0 {
            return Err(Rejected::Unaligned);
        }
        if record.count < 0 {
            return Err(Rejected::NegativeCount);
        }
        if record.topic.is_empty() || record.host.is_empty() {
            return Err(Rejected::EmptyName);
        }
        let hosts = self.hosts_mut(record.tier, &record.topic, record.window_start);
        match hosts.get_mut(record.host.as_str()) {
            Some(count) => *count = (*count).max(record.count),
            None => {
                hosts.insert(record.host.clone(), record.count);
            }
        }
        Ok(())
    }

    /// Counts `events` more events of `topic` with `header.time` = `time_ms`, present in the
    /// live cluster `cluster`.
    pub fn add_live(&mut self, cluster: &str, topic: &str, time_ms: i64, events: i64) {
        let window_start = events::audit::window_start(time_ms, self.window_ms);
        let hosts = self.hosts_mut(Tier::Live, topic, window_start);
        match hosts.get_mut(cluster) {
            Some(count) => *count += events,
            None => {
                hosts.insert(cluster.to_owned(), events);
            }
        }
    }

    fn hosts_mut(
        &mut self,
        tier: Tier,
        topic: &str,
        window_start: i64,
    ) -> &mut BTreeMap<String, i64> {
        self.active[tier_index(tier)] = true;
        if !self.topics.contains_key(topic) {
            self.topics.insert(topic.to_owned(), BTreeMap::new());
        }
        let windows = self.topics.get_mut(topic).expect("inserted above");
        &mut windows.entry(window_start).or_default().hosts[tier_index(tier)]
    }

    /// Forgets windows that ended before `before_ms`, bounding memory (`history_ms`).
    pub fn forget_before(&mut self, before_ms: i64) {
        let window_ms = self.window_ms;
        for windows in self.topics.values_mut() {
            windows.retain(|start, _| start.saturating_add(window_ms) > before_ms);
        }
        self.topics.retain(|_, windows| !windows.is_empty());
    }

    /// Tiers that take part, in pipeline order.
    pub fn active_tiers(&self) -> Vec<Tier> {
        Tier::ALL.into_iter().filter(|t| self.active[tier_index(*t)]).collect()
    }

    /// The tier every other is compared with.
    pub fn reference_tier(&self) -> Option<Tier> {
        self.active_tiers().first().copied()
    }

    pub fn topics(&self) -> impl Iterator<Item = &str> {
        self.topics.keys().map(String::as_str)
    }

    pub fn has_topic(&self, topic: &str) -> bool {
        self.topics.contains_key(topic)
    }

    /// Reports of the windows of `topic` that start in `[from_ms, to_ms]`, oldest first.
    pub fn windows(
        &self,
        topic: &str,
        from_ms: i64,
        to_ms: i64,
        clock: Clock,
    ) -> Vec<WindowReport> {
        let Some(windows) = self.topics.get(topic) else { return Vec::new() };
        if from_ms > to_ms {
            return Vec::new();
        }
        let tiers = self.topic_tiers(windows);
        windows
            .range(from_ms..=to_ms)
            .map(|(start, window)| self.report(&tiers, *start, window, clock))
            .collect()
    }

    /// The report of one window, if anything was counted in it.
    pub fn window(&self, topic: &str, window_start: i64, clock: Clock) -> Option<WindowReport> {
        let windows = self.topics.get(topic)?;
        let window = windows.get(&window_start)?;
        Some(self.report(&self.topic_tiers(windows), window_start, window, clock))
    }

    /// The tiers a topic's windows are checked at: the active tiers from the first, in pipeline
    /// order, that counted any event of the topic. A topic produced straight into a live
    /// cluster (by Kafka's own clients, through a broker's Kafka listener) has no agent counts,
    /// so it is checked from `live` on rather than reported duplicated everywhere.
    fn topic_tiers(&self, windows: &BTreeMap<i64, Window>) -> Vec<Tier> {
        let active = self.active_tiers();
        let counted =
            |tier: &Tier| windows.values().any(|w| !w.hosts[tier_index(*tier)].is_empty());
        match active.iter().position(counted) {
            Some(first) => active[first..].to_vec(),
            None => active,
        }
    }

    /// The `last` most recent window starts of any topic, oldest first.
    pub fn recent_window_starts(&self, last: usize) -> Vec<i64> {
        let mut starts: Vec<i64> =
            self.topics.values().flat_map(|windows| windows.keys().copied()).collect();
        starts.sort_unstable();
        starts.dedup();
        let skip = starts.len().saturating_sub(last);
        starts.split_off(skip)
    }

    fn report(
        &self,
        active: &[Tier],
        window_start: i64,
        window: &Window,
        clock: Clock,
    ) -> WindowReport {
        let tiers = active.iter().map(|t| (t.as_str(), window.total(*t))).collect();
        let window_end = window_start.saturating_add(self.window_ms);
        let past = |grace_ms: i64| clock.caught_up && clock.now_ms >= window_end + grace_ms;
        let decided = past(clock.grace_ms);
        let mut report = WindowReport {
            window_start,
            window_ms: self.window_ms,
            verdict: Verdict::Open,
            reference_tier: active.first().map(|t| t.as_str()),
            tiers,
            missing: BTreeMap::new(),
            duplicate: BTreeMap::new(),
            tier_verdicts: BTreeMap::new(),
            loss_at: None,
        };
        let Some((reference, downstream)) = active.split_first() else { return report };
        let expected = window.total(*reference);
        let mut verdict = Verdict::Complete;
        for tier in downstream {
            let difference = window.total(*tier) - expected;
            // A batch tier's shortfall may still be made good by its next run.
            let shortfall_decided =
                if *tier == Tier::Loader { past(clock.loader_grace_ms) } else { decided };
            let tier_verdict = match (decided, difference) {
                (false, _) => Verdict::Open,
                (true, d) if d < 0 && !shortfall_decided => Verdict::Open,
                (true, d) if d < 0 => {
                    report.missing.insert(tier.as_str(), -d);
                    report.loss_at.get_or_insert(tier.as_str());
                    Verdict::Loss
                }
                (true, d) if d > 0 => {
                    report.duplicate.insert(tier.as_str(), d);
                    Verdict::Duplication
                }
                (true, _) => Verdict::Complete,
            };
            report.tier_verdicts.insert(tier.as_str(), tier_verdict);
            // Loss outranks open, open duplication, and duplication complete.
            verdict = match (verdict, tier_verdict) {
                (Verdict::Loss, _) | (_, Verdict::Loss) => Verdict::Loss,
                (Verdict::Open, _) | (_, Verdict::Open) => Verdict::Open,
                (Verdict::Duplication, _) | (_, Verdict::Duplication) => Verdict::Duplication,
                _ => Verdict::Complete,
            };
        }
        report.verdict = if decided { verdict } else { Verdict::Open };
        report
    }

    /// Every host's count at `tier` in the window, with its usual share of the reference
    /// tier's count; those that fall short have `short_by > 0`. Most short first.
    pub fn hosts(&self, topic: &str, window_start: i64, tier: Tier) -> Vec<HostCount> {
        let Some(windows) = self.topics.get(topic) else { return Vec::new() };
        let Some(window) = windows.get(&window_start) else { return Vec::new() };
        let reference = self.topic_tiers(windows).first().map_or(0, |r| window.total(*r));
        let index = tier_index(tier);

        // The nearest other windows where this tier reported, by distance in time.
        let mut others: Vec<(&i64, &Window)> = windows
            .iter()
            .filter(|(start, w)| **start != window_start && !w.hosts[index].is_empty())
            .collect();
        others.sort_by_key(|(start, _)| (**start - window_start).abs());
        others.truncate(REFERENCE_WINDOWS);
        let mut usual: BTreeMap<&str, i64> = BTreeMap::new();
        for (_, w) in &others {
            for (host, count) in &w.hosts[index] {
                *usual.entry(host.as_str()).or_default() += count;
            }
        }
        if usual.is_empty() {
            // Nothing to learn from: an equal split among the hosts that reported.
            usual = window.hosts[index].keys().map(|h| (h.as_str(), 1)).collect();
        }
        let usual_total: i64 = usual.values().sum();

        let mut hosts: BTreeMap<&str, i64> =
            window.hosts[index].iter().map(|(h, c)| (h.as_str(), *c)).collect();
        for host in usual.keys() {
            hosts.entry(host).or_insert(0);
        }
        let mut counts: Vec<HostCount> = hosts
            .into_iter()
            .map(|(host, count)| {
                let share = usual.get(host).copied().unwrap_or(0);
                let expected = if usual_total == 0 {
                    0
                } else {
                    // i128: a product of two counts cannot overflow it.
                    (i128::from(reference) * i128::from(share) / i128::from(usual_total)) as i64
                };
                HostCount {
                    host: host.to_owned(),
                    count,
                    expected,
                    short_by: (expected - count).max(0),
                }
            })
            .collect();
        counts.sort_by(|a, b| b.short_by.cmp(&a.short_by).then_with(|| a.host.cmp(&b.host)));
        counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: i64 = 1_000;

    fn record(tier: Tier, host: &str, topic: &str, window_start: i64, count: i64) -> AuditRecord {
        AuditRecord {
            tier,
            host: host.into(),
            topic: topic.into(),
            window_start,
            window_ms: W,
            count,
        }
    }

    fn closed() -> Clock {
        Clock { now_ms: 1_000_000, grace_ms: 100, loader_grace_ms: 100, caught_up: true }
    }

    fn ledger(records: &[AuditRecord]) -> Ledger {
        let mut ledger = Ledger::new(W);
        for r in records {
            ledger.apply(r).unwrap();
        }
        ledger
    }

    #[test]
    fn equal_counts_at_every_tier_are_complete() {
        let ledger = ledger(&[
            record(Tier::Agent, "web-1", "t", 0, 6),
            record(Tier::Agent, "web-2", "t", 0, 4),
            record(Tier::Mirror, "m", "t", 0, 10),
            record(Tier::Loader, "l", "t", 0, 10),
        ]);
        let report = ledger.window("t", 0, closed()).unwrap();
        assert_eq!(report.verdict, Verdict::Complete);
        assert_eq!(report.count(Tier::Agent), Some(10));
        assert_eq!(report.count(Tier::Live), None, "no live tier reported: not expected");
        assert!(report.missing.is_empty() && report.duplicate.is_empty());
    }

    #[test]
    fn fewer_downstream_is_loss_only_after_the_window_and_grace() {
        let ledger = ledger(&[
            record(Tier::Agent, "web-1", "t", 5_000, 10),
            record(Tier::Mirror, "m", "t", 5_000, 7),
        ]);
        let at = |now_ms| Clock { now_ms, grace_ms: 500, loader_grace_ms: 500, caught_up: true };
        assert_eq!(ledger.window("t", 5_000, at(5_999)).unwrap().verdict, Verdict::Open);
        assert_eq!(ledger.window("t", 5_000, at(6_499)).unwrap().verdict, Verdict::Open, "grace");
        let report = ledger.window("t", 5_000, at(6_500)).unwrap();
        assert_eq!(report.verdict, Verdict::Loss);
        assert_eq!(report.missing.get("mirror"), Some(&3));
        assert_eq!(report.tier_verdicts.get("mirror"), Some(&Verdict::Loss));
    }

    #[test]
    fn a_loader_shortfall_waits_for_the_loaders_own_grace() {
        let ledger = ledger(&[
            record(Tier::Agent, "web-1", "t", 5_000, 10),
            record(Tier::Mirror, "m", "t", 5_000, 10),
            record(Tier::Loader, "l", "t", 5_000, 4),
        ]);
        let at = |now_ms| Clock { now_ms, grace_ms: 500, loader_grace_ms: 60_000, caught_up: true };
        let report = ledger.window("t", 5_000, at(7_000)).unwrap();
        assert_eq!(report.verdict, Verdict::Open, "the loader's next run may still load it");
        assert_eq!(report.tier_verdicts.get("mirror"), Some(&Verdict::Complete));
        assert_eq!(report.tier_verdicts.get("loader"), Some(&Verdict::Open));
        let report = ledger.window("t", 5_000, at(66_000)).unwrap();
        assert_eq!(report.verdict, Verdict::Loss);
        assert_eq!(report.missing.get("loader"), Some(&6));
        // A loaded window is complete after the ordinary grace, not the loader's.
        let loaded = ledger_with_loader(10);
        assert_eq!(loaded.window("t", 5_000, at(7_000)).unwrap().verdict, Verdict::Complete);
    }

    fn ledger_with_loader(loaded: i64) -> Ledger {
        ledger(&[
            record(Tier::Agent, "web-1", "t", 5_000, 10),
            record(Tier::Mirror, "m", "t", 5_000, 10),
            record(Tier::Loader, "l", "t", 5_000, loaded),
        ])
    }

    #[test]
    fn more_downstream_is_duplication_and_loss_outranks_it() {
        let ledger = ledger(&[
            record(Tier::Agent, "a", "t", 0, 10),
            record(Tier::Mirror, "m", "t", 0, 12),
            record(Tier::Loader, "l", "t", 0, 12),
            record(Tier::Agent, "a", "t", W, 10),
            record(Tier::Mirror, "m", "t", W, 12),
            record(Tier::Loader, "l", "t", W, 9),
        ]);
        let first = ledger.window("t", 0, closed()).unwrap();
        assert_eq!(first.verdict, Verdict::Duplication);
        assert_eq!(first.duplicate.get("mirror"), Some(&2));
        let second = ledger.window("t", W, closed()).unwrap();
        assert_eq!(second.verdict, Verdict::Loss);
        assert_eq!(second.missing.get("loader"), Some(&1));
        assert_eq!(second.loss_at, Some("loader"));
        assert_eq!(second.tier_verdicts.get("mirror"), Some(&Verdict::Duplication));
    }

    #[test]
    fn resent_and_reordered_cumulative_records_keep_the_largest_count() {
        let mut ledger = ledger(&[
            record(Tier::Agent, "a", "t", 0, 10),
            record(Tier::Mirror, "m", "t", 0, 4),
            record(Tier::Mirror, "m", "t", 0, 10),
            record(Tier::Mirror, "m", "t", 0, 10),
        ]);
        ledger.apply(&record(Tier::Mirror, "m", "t", 0, 4)).unwrap(); // an old one, late
        assert_eq!(ledger.window("t", 0, closed()).unwrap().verdict, Verdict::Complete);
    }

    #[test]
    fn a_late_record_turns_loss_into_complete() {
        let mut ledger =
            ledger(&[record(Tier::Agent, "a", "t", 0, 10), record(Tier::Loader, "l", "t", 0, 6)]);
        assert_eq!(ledger.window("t", 0, closed()).unwrap().verdict, Verdict::Loss);
        ledger.apply(&record(Tier::Loader, "l", "t", 0, 10)).unwrap();
        assert_eq!(ledger.window("t", 0, closed()).unwrap().verdict, Verdict::Complete);
    }

    #[test]
    fn nothing_is_decided_before_the_sources_are_read() {
        let ledger =
            ledger(&[record(Tier::Agent, "a", "t", 0, 10), record(Tier::Mirror, "m", "t", 0, 1)]);
        let replaying = Clock { caught_up: false, ..closed() };
        let report = ledger.window("t", 0, replaying).unwrap();
        assert_eq!(report.verdict, Verdict::Open);
        assert!(report.missing.is_empty());
    }

    #[test]
    fn a_tier_missing_a_whole_window_counts_as_zero() {
        let ledger = ledger(&[
            record(Tier::Agent, "a", "t", 0, 5),
            record(Tier::Mirror, "m", "t", 0, 5),
            record(Tier::Agent, "a", "t", W, 8),
        ]);
        let report = ledger.window("t", W, closed()).unwrap();
        assert_eq!(report.verdict, Verdict::Loss);
        assert_eq!(report.missing.get("mirror"), Some(&8));
        assert_eq!(report.loss_at, Some("mirror"));
    }

    #[test]
    fn a_loss_is_placed_at_the_most_upstream_short_tier() {
        let ledger = ledger(&[
            record(Tier::Agent, "a", "t", 0, 10),
            record(Tier::Live, "dc-a", "t", 0, 10),
            record(Tier::Mirror, "m", "t", 0, 8),
            record(Tier::Loader, "l", "t", 0, 8),
        ]);
        let report = ledger.window("t", 0, closed()).unwrap();
        assert_eq!(report.missing.len(), 2, "the loader inherits the mirror's shortfall");
        assert_eq!(report.loss_at, Some("mirror"));
    }

    #[test]
    fn live_counts_add_up_per_cluster() {
        let mut ledger = ledger(&[record(Tier::Agent, "a", "t", 0, 3)]);
        ledger.add_live("dc-a", "t", 10, 1);
        ledger.add_live("dc-a", "t", 999, 1);
        ledger.add_live("dc-b", "t", 500, 1);
        ledger.add_live("dc-b", "t", 1_000, 1);
        let report = ledger.window("t", 0, closed()).unwrap();
        assert_eq!(report.count(Tier::Live), Some(3));
        assert_eq!(report.verdict, Verdict::Complete);
    }

    #[test]
    fn records_that_cannot_be_reconciled_are_rejected() {
        let mut ledger = Ledger::new(W);
        let mut other_window = record(Tier::Agent, "a", "t", 0, 1);
        other_window.window_ms = 2 * W;
        assert_eq!(ledger.apply(&other_window), Err(Rejected::WindowMs));
        assert_eq!(ledger.apply(&record(Tier::Agent, "a", "t", 10, 1)), Err(Rejected::Unaligned));
        assert_eq!(
            ledger.apply(&record(Tier::Agent, "a", "t", 0, -1)),
            Err(Rejected::NegativeCount)
        );
        assert_eq!(ledger.apply(&record(Tier::Agent, "", "t", 0, 1)), Err(Rejected::EmptyName));
        assert!(ledger.active_tiers().is_empty(), "nothing rejected takes part");
    }

    #[test]
    fn without_agents_the_first_reporting_tier_is_the_reference() {
        let mut ledger = Ledger::new(W);
        ledger.add_live("dc-a", "t", 0, 4);
        ledger.apply(&record(Tier::Mirror, "m", "t", 0, 3)).unwrap();
        assert_eq!(ledger.reference_tier(), Some(Tier::Live));
        let report = ledger.window("t", 0, closed()).unwrap();
        assert_eq!(report.missing.get("mirror"), Some(&1));
    }

    #[test]
    fn a_topic_no_agent_counts_is_checked_from_the_live_tier_on() {
        // Page views come through agents; `kafka-clicks` straight into a live cluster.
        let mut ledger = ledger(&[
            record(Tier::Agent, "web", "page-view", 0, 5),
            record(Tier::Mirror, "m", "page-view", 0, 5),
            record(Tier::Mirror, "m", "kafka-clicks", 0, 7),
            record(Tier::Loader, "l", "kafka-clicks", 0, 6),
        ]);
        ledger.add_live("dc-a", "page-view", 0, 5);
        ledger.add_live("dc-a", "kafka-clicks", 0, 7);
        let clicks = ledger.window("kafka-clicks", 0, closed()).unwrap();
        assert_eq!(clicks.count(Tier::Agent), None, "no agent tier for this topic");
        assert_eq!(clicks.count(Tier::Live), Some(7));
        assert_eq!(clicks.missing.get("loader"), Some(&1), "{clicks:?}");
        assert_eq!(clicks.verdict, Verdict::Loss);
        ledger.apply(&record(Tier::Loader, "l", "kafka-clicks", 0, 7)).unwrap();
        let clicks = ledger.window("kafka-clicks", 0, closed()).unwrap();
        assert_eq!(clicks.verdict, Verdict::Complete);
        // The other topic is still checked against its agents.
        let views = ledger.window("page-view", 0, closed()).unwrap();
        assert_eq!(views.count(Tier::Agent), Some(5));
        assert_eq!(views.tier_verdicts.get("loader"), Some(&Verdict::Loss));
    }

    #[test]
    fn the_host_below_its_usual_share_is_named_short() {
        let mut records = Vec::new();
        for window in 0..4 {
            records.push(record(Tier::Agent, "web", "t", window * W, 100));
            records.push(record(Tier::Mirror, "m-1", "t", window * W, 50));
            records.push(record(Tier::Mirror, "m-2", "t", window * W, 50));
        }
        records.push(record(Tier::Agent, "web", "t", 4 * W, 100));
        records.push(record(Tier::Mirror, "m-1", "t", 4 * W, 50));
        records.push(record(Tier::Mirror, "m-2", "t", 4 * W, 20));
        let ledger = ledger(&records);
        let hosts = ledger.hosts("t", 4 * W, Tier::Mirror);
        assert_eq!(
            hosts[0],
            HostCount { host: "m-2".into(), count: 20, expected: 50, short_by: 30 }
        );
        assert_eq!(hosts[1].short_by, 0, "m-1 carried its share");
    }

    #[test]
    fn a_host_silent_in_the_window_is_short_by_its_whole_share() {
        let ledger = ledger(&[
            record(Tier::Agent, "web", "t", 0, 10),
            record(Tier::Mirror, "m-1", "t", 0, 5),
            record(Tier::Mirror, "m-2", "t", 0, 5),
            record(Tier::Agent, "web", "t", W, 10),
            record(Tier::Mirror, "m-1", "t", W, 5),
        ]);
        let hosts = ledger.hosts("t", W, Tier::Mirror);
        assert_eq!(hosts[0].host, "m-2");
        assert_eq!((hosts[0].count, hosts[0].short_by), (0, 5));
    }

    #[test]
    fn forgetting_drops_only_windows_that_ended_before() {
        let mut ledger =
            ledger(&[record(Tier::Agent, "a", "t", 0, 1), record(Tier::Agent, "a", "t", W, 1)]);
        ledger.forget_before(W + 1);
        assert!(ledger.window("t", 0, closed()).is_none());
        assert!(ledger.window("t", W, closed()).is_some());
        ledger.forget_before(10 * W);
        assert!(!ledger.has_topic("t"));
    }
}
