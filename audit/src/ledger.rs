//! The books the audit service balances (docs/design.md, "Audit record" and "Reconciliation"):
//! per topic and window, every host's cumulative count at every tier, and each window's verdict.
//!
//! Counts arrive from two places. Records read from `_audit` are cumulative, so the ledger
//! keeps the **largest** count seen per `(tier, host, topic, window_start)`: a re-sent, duplicated
//! or reordered record never lowers a count, and a late record raises it. The live tier is
//! counted by the service itself ([`Ledger::add_live`]), one event at a time.
//!
//! Every downstream tier is reconciled against the **reference tier**: `accepted` (what the
//! agents took in), or — in a deployment without agents — the first tier of the pipeline that
//! reports at all. A tier that has never reported anything (say, no loader is deployed) is not
//! expected and takes no part.
//!
//! Verdicts wait for a window's grace; what a hop holds back is seen sooner. The ledger notes
//! when each tier's counts rose, as the service saw them, so that a tier behind the tier
//! before it can say since when: [`Held`]. For the `agent` tier it is told per agent host,
//! since each agent publishes both its `accepted` and its `agent` counts.

use std::collections::{BTreeMap, VecDeque};

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

const TIERS: usize = Tier::ALL.len();

fn tier_index(tier: Tier) -> usize {
    tier.index()
}

/// Rises closer together than this are one (the later count, at the earlier time).
const RISE_GRAIN_MS: i64 = 1_000;
/// Rises kept per tier (and per agent host) and window at most; past it the newest is
/// replaced, so a long stall is still timed from its start.
const RISES_MAX: usize = 64;

/// `(observed_ms, count)`: when a count rose to what, oldest first.
type Rises = VecDeque<(i64, i64)>;

/// Notes that a count rose to `count` at `now_ms`; returns whether that took a new entry.
fn rise(rises: &mut Rises, now_ms: i64, count: i64) -> bool {
    match rises.back_mut() {
        Some(last) if now_ms - last.0 < RISE_GRAIN_MS => {
            last.1 = last.1.max(count);
            false
        }
        _ => {
            if rises.len() >= RISES_MAX {
                rises.pop_back();
            }
            rises.push_back((now_ms, count));
            true
        }
    }
}

/// When the count first rose above `count`, if that rise is still known.
fn rose_above(rises: &Rises, count: i64) -> Option<i64> {
    rises.iter().find(|(_, c)| *c > count).map(|(at, _)| *at)
}

/// Every host's count at every tier for one window of one topic.
#[derive(Debug, Clone, Default)]
struct Window {
    hosts: [BTreeMap<String, i64>; TIERS],
    /// When each tier's total rose, only the rises some later tier has not reached yet.
    rises: [Rises; TIERS],
    /// The same for each agent host's `accepted` count, against its own `agent` count.
    accepted_rises: BTreeMap<String, Rises>,
}

impl Window {
    fn total(&self, tier: Tier) -> i64 {
        self.hosts[tier_index(tier)].values().sum()
    }

    fn count(&self, tier: Tier, host: &str) -> i64 {
        self.hosts[tier_index(tier)].get(host).copied().unwrap_or(0)
    }

    /// `host`'s count at `tier` rose (as seen at `now_ms`).
    fn rose(&mut self, tier: Tier, host: &str, now_ms: i64) {
        let index = tier_index(tier);
        let total = self.total(tier);
        let mut new = rise(&mut self.rises[index], now_ms, total);
        if tier == Tier::Accepted {
            let count = self.count(tier, host);
            if !self.accepted_rises.contains_key(host) {
                self.accepted_rises.insert(host.to_owned(), Rises::new());
            }
            let rises = self.accepted_rises.get_mut(host).expect("inserted above");
            new |= rise(rises, now_ms, count);
        }
        // Once per grain at most: the live tier rises with every event it counts.
        if new {
            self.prune_rises();
        }
    }

    /// Forgets the rises every later tier that counts in the window has reached.
    fn prune_rises(&mut self) {
        for index in 0..TIERS {
            let reached = (index + 1..TIERS)
                .filter(|later| !self.hosts[*later].is_empty())
                .map(|later| self.hosts[later].values().sum::<i64>())
                .min();
            if let Some(reached) = reached {
                let rises = &mut self.rises[index];
                while rises.front().is_some_and(|(_, count)| *count <= reached) {
                    rises.pop_front();
                }
            }
        }
        let agent = &self.hosts[tier_index(Tier::Agent)];
        for (host, rises) in &mut self.accepted_rises {
            let reached = agent.get(host).copied().unwrap_or(0);
            while rises.front().is_some_and(|(_, count)| *count <= reached) {
                rises.pop_front();
            }
        }
        self.accepted_rises.retain(|_, rises| !rises.is_empty());
    }

    /// How much `tier` holds back of what `upstream` (the tier before it) counted, and since
    /// when; `None` if nothing.
    fn held(&self, upstream: Tier, tier: Tier, now_ms: i64) -> Option<Held> {
        let (counted, behind) = (self.total(upstream), self.total(tier));
        if upstream == Tier::Accepted {
            // Agent by agent: one agent's backlog is not hidden by another's progress.
            let mut held = Held { events: 0, since_ms: now_ms, held_ms: 0, hosts: BTreeMap::new() };
            for (host, accepted) in &self.hosts[tier_index(Tier::Accepted)] {
                let acknowledged = self.count(Tier::Agent, host);
                if *accepted <= acknowledged {
                    continue;
                }
                let since = self.accepted_rises.get(host).and_then(|r| rose_above(r, acknowledged));
                held.events += accepted - acknowledged;
                held.since_ms = held.since_ms.min(since.unwrap_or(now_ms));
                held.hosts.insert(host.clone(), accepted - acknowledged);
            }
            held.held_ms = now_ms - held.since_ms;
            return (held.events > 0).then_some(held);
        }
        if counted <= behind {
            return None;
        }
        let since_ms = rose_above(&self.rises[tier_index(upstream)], behind).unwrap_or(now_ms);
        Some(Held {
            events: counted - behind,
            since_ms,
            held_ms: now_ms - since_ms,
            hosts: BTreeMap::new(),
        })
    }
}

/// Events a tier has not counted yet that the tier before it has: what that hop holds back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Held {
    pub events: i64,
    /// When the tier before counted the oldest of them, as the audit saw it (ms since the
    /// epoch): the time its count first rose above this tier's count.
    pub since_ms: i64,
    /// How long: now − `since_ms`.
    pub held_ms: i64,
    /// For the `agent` tier, each agent host's events accepted and not yet acknowledged.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub hosts: BTreeMap<String, i64>,
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
    /// Per downstream tier without a verdict yet: what it holds back of what the tier before
    /// it counted, and since when.
    pub held: BTreeMap<&'static str, Held>,
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
    active: [bool; TIERS],
    /// When the counts taken now are seen (ms since the epoch): [`Ledger::observe_at`].
    now_ms: i64,
    /// Each agent host: when a record of it was last seen, and the newest window it counted.
    /// Agents publish their newest counts at every publication (a heartbeat), so an agent
    /// long unheard is one whose counts cannot reach the audit.
    heard: BTreeMap<String, Heard>,
}

#[derive(Debug, Clone, Copy)]
struct Heard {
    last_ms: i64,
    newest_window_start: i64,
}

/// An agent unheard for longer than this (and its windows' grace) is no longer reported.
pub const GONE_AFTER_MS: i64 = 3_600_000;

/// An agent the audit has not heard from for a while, and what it was known to hold then.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Silent {
    pub host: String,
    /// When its last record was seen (ms since the epoch).
    pub last_heard_ms: i64,
    /// now − `last_heard_ms`.
    pub silent_ms: i64,
    /// Events it had accepted and not yet had acknowledged, as its last records said.
    pub held_events: i64,
}

/// Windows of the same topic that [`Ledger::hosts`] learns each host's usual share from.
const REFERENCE_WINDOWS: usize = 6;

impl Ledger {
    pub fn new(window_ms: i64) -> Ledger {
        assert!(window_ms > 0, "window_ms is validated by the config");
        Ledger {
            window_ms,
            topics: BTreeMap::new(),
            active: [false; TIERS],
            now_ms: 0,
            heard: BTreeMap::new(),
        }
    }

    /// The counts taken from now on are seen at `now_ms` (the time [`Held`] is measured by).
    pub fn observe_at(&mut self, now_ms: i64) {
        self.now_ms = now_ms;
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
        let now_ms = self.now_ms;
        // An agent is heard by its records of recent windows: replaying `_audit` after a
        // restart reads every record again, and one of an agent gone for days is no news of it.
        let recent = record.window_start.saturating_add(self.window_ms + GONE_AFTER_MS) > now_ms;
        if matches!(record.tier, Tier::Accepted | Tier::Agent) && recent {
            if let Some(heard) = self.heard.get_mut(&record.host) {
                heard.last_ms = heard.last_ms.max(now_ms);
                heard.newest_window_start = heard.newest_window_start.max(record.window_start);
            } else {
                let heard = Heard { last_ms: now_ms, newest_window_start: record.window_start };
                self.heard.insert(record.host.clone(), heard);
            }
        }
        let window = self.window_mut(record.tier, &record.topic, record.window_start);
        let hosts = &mut window.hosts[tier_index(record.tier)];
        let rose = match hosts.get_mut(record.host.as_str()) {
            Some(count) if *count >= record.count => false,
            Some(count) => {
                *count = record.count;
                true
            }
            None => {
                hosts.insert(record.host.clone(), record.count);
                true
            }
        };
        if rose {
            window.rose(record.tier, &record.host, now_ms);
        }
        Ok(())
    }

    /// Counts `events` more events of `topic` with `header.time` = `time_ms`, present in the
    /// live cluster `cluster`.
    pub fn add_live(&mut self, cluster: &str, topic: &str, time_ms: i64, events: i64) {
        self.add_present(Tier::Live, cluster, topic, time_ms, events)
    }

    /// Counts `events` more events of `topic` with `header.time` = `time_ms`, present in
    /// `cluster`, at `tier`: `live` for a live cluster, `mirror` for the analytics cluster.
    pub fn add_present(
        &mut self,
        tier: Tier,
        cluster: &str,
        topic: &str,
        time_ms: i64,
        events: i64,
    ) {
        let window_start = events::audit::window_start(time_ms, self.window_ms);
        let now_ms = self.now_ms;
        let window = self.window_mut(tier, topic, window_start);
        let hosts = &mut window.hosts[tier_index(tier)];
        match hosts.get_mut(cluster) {
            Some(count) => *count += events,
            None => {
                hosts.insert(cluster.to_owned(), events);
            }
        }
        window.rose(tier, cluster, now_ms);
    }

    fn window_mut(&mut self, tier: Tier, topic: &str, window_start: i64) -> &mut Window {
        self.active[tier_index(tier)] = true;
        if !self.topics.contains_key(topic) {
            self.topics.insert(topic.to_owned(), BTreeMap::new());
        }
        let windows = self.topics.get_mut(topic).expect("inserted above");
        windows.entry(window_start).or_default()
    }

    /// Forgets windows that ended before `before_ms`, bounding memory (`history_ms`).
    pub fn forget_before(&mut self, before_ms: i64) {
        let window_ms = self.window_ms;
        for windows in self.topics.values_mut() {
            windows.retain(|start, _| start.saturating_add(window_ms) > before_ms);
        }
        self.topics.retain(|_, windows| !windows.is_empty());
        self.heard
            .retain(|_, heard| heard.newest_window_start.saturating_add(window_ms) > before_ms);
    }

    /// Agents not heard from for longer than `silent_after_ms`, longest silent first; one
    /// unheard for longer than [`GONE_AFTER_MS`] (and its windows' grace) is taken to be gone.
    pub fn silent_agents(&self, clock: Clock, silent_after_ms: i64) -> Vec<Silent> {
        if !clock.caught_up {
            return Vec::new();
        }
        let mut silent: Vec<Silent> = self
            .heard
            .iter()
            .filter(|(_, heard)| {
                clock.now_ms - heard.last_ms > silent_after_ms && !self.gone(heard, clock)
            })
            .map(|(host, heard)| Silent {
                host: host.clone(),
                last_heard_ms: heard.last_ms,
                silent_ms: clock.now_ms - heard.last_ms,
                held_events: self.agent_backlog(host),
            })
            .collect();
        silent.sort_by(|a, b| b.silent_ms.cmp(&a.silent_ms).then_with(|| a.host.cmp(&b.host)));
        silent
    }

    /// How long each agent host not taken to be gone has not been heard from.
    pub fn agents_heard(&self, clock: Clock) -> Vec<(String, i64)> {
        self.heard
            .iter()
            .filter(|(_, heard)| !self.gone(heard, clock))
            .map(|(host, heard)| (host.clone(), (clock.now_ms - heard.last_ms).max(0)))
            .collect()
    }

    /// An agent unheard for an hour, and past its windows' grace, was stopped for good.
    fn gone(&self, heard: &Heard, clock: Clock) -> bool {
        clock.now_ms - heard.last_ms > GONE_AFTER_MS.max(self.window_ms + clock.grace_ms)
    }

    /// Events `host` accepted and had not had acknowledged, over every window, as its records say.
    fn agent_backlog(&self, host: &str) -> i64 {
        self.topics
            .values()
            .flat_map(|windows| windows.values())
            .map(|w| (w.count(Tier::Accepted, host) - w.count(Tier::Agent, host)).max(0))
            .sum()
    }

    /// Forgets when the counts of windows that ended before `before_ms` rose: a window past
    /// its grace has a verdict, and [`Held`] is told only of windows without one.
    pub fn forget_rises_before(&mut self, before_ms: i64) {
        let window_ms = self.window_ms;
        for windows in self.topics.values_mut() {
            for (_, window) in windows.range_mut(..before_ms.saturating_sub(window_ms)) {
                window.rises = Default::default();
                window.accepted_rises.clear();
            }
        }
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
        // A window an agent counted before agents counted `accepted` (an older agent) is
        // checked from `agent` on.
        let active = match active {
            [Tier::Accepted, rest @ ..]
                if window.hosts[tier_index(Tier::Accepted)].is_empty()
                    && !window.hosts[tier_index(Tier::Agent)].is_empty() =>
            {
                rest
            }
            _ => active,
        };
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
            held: BTreeMap::new(),
        };
        let Some((reference, downstream)) = active.split_first() else { return report };
        let expected = window.total(*reference);
        let mut verdict = Verdict::Complete;
        // Each downstream tier, with the tier before it.
        for (upstream, tier) in active.iter().zip(downstream) {
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
            if tier_verdict == Verdict::Open
                && clock.caught_up
                && let Some(held) = window.held(*upstream, *tier, clock.now_ms)
            {
                report.held.insert(tier.as_str(), held);
            }
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

    #[test]
    fn accepted_is_the_reference_and_an_unacknowledged_event_is_loss() {
        let ledger = ledger(&[
            record(Tier::Accepted, "web", "t", 0, 10),
            record(Tier::Agent, "web", "t", 0, 9),
            record(Tier::Mirror, "m", "t", 0, 9),
        ]);
        let report = ledger.window("t", 0, closed()).unwrap();
        assert_eq!(report.reference_tier, Some("accepted"));
        assert_eq!(report.verdict, Verdict::Loss);
        assert_eq!(report.loss_at, Some("agent"), "accepted, never acknowledged");
    }

    #[test]
    fn a_window_an_older_agent_counted_without_accepted_is_checked_from_agent() {
        let ledger = ledger(&[
            record(Tier::Agent, "old-web", "t", 0, 10),
            record(Tier::Mirror, "m", "t", 0, 10),
            record(Tier::Accepted, "web", "t", W, 4),
            record(Tier::Agent, "web", "t", W, 4),
            record(Tier::Mirror, "m", "t", W, 4),
        ]);
        let old = ledger.window("t", 0, closed()).unwrap();
        assert_eq!((old.reference_tier, old.verdict), (Some("agent"), Verdict::Complete));
        let new = ledger.window("t", W, closed()).unwrap();
        assert_eq!((new.reference_tier, new.verdict), (Some("accepted"), Verdict::Complete));
    }

    /// The ledger seeing `records` at `now_ms`.
    fn seen(ledger: &mut Ledger, now_ms: i64, records: &[AuditRecord]) {
        ledger.observe_at(now_ms);
        for r in records {
            ledger.apply(r).unwrap();
        }
    }

    fn open_at(now_ms: i64) -> Clock {
        Clock { now_ms, grace_ms: 1_000_000, loader_grace_ms: 1_000_000, caught_up: true }
    }

    #[test]
    fn a_stuck_agent_holds_its_accepted_events_from_the_first_it_did_not_ship() {
        let mut ledger = Ledger::new(W);
        // Two agents publish every 5 s; each acknowledges by the next publication what it had
        // accepted by the one before, but web-2 stops acknowledging after 10 s.
        seen(
            &mut ledger,
            5_000,
            &[
                record(Tier::Accepted, "web-1", "t", 0, 100),
                record(Tier::Agent, "web-1", "t", 0, 90),
                record(Tier::Accepted, "web-2", "t", 0, 100),
                record(Tier::Agent, "web-2", "t", 0, 95),
            ],
        );
        seen(
            &mut ledger,
            10_000,
            &[
                record(Tier::Accepted, "web-1", "t", 0, 200),
                record(Tier::Agent, "web-1", "t", 0, 190),
                record(Tier::Accepted, "web-2", "t", 0, 200),
                record(Tier::Agent, "web-2", "t", 0, 150),
            ],
        );
        let healthy = ledger.window("t", 0, open_at(12_000)).unwrap();
        let held = &healthy.held["agent"];
        assert_eq!(held.hosts, BTreeMap::from([("web-1".into(), 10), ("web-2".into(), 50)]));
        // Each has acknowledged all it had accepted by 5 s: what it holds rose at 10 s.
        assert_eq!((held.since_ms, held.held_ms), (10_000, 2_000));
        for at in [15_000, 20_000, 25_000] {
            let n = at / 50;
            seen(
                &mut ledger,
                at,
                &[
                    record(Tier::Accepted, "web-1", "t", 0, n),
                    record(Tier::Agent, "web-1", "t", 0, n - 10),
                    record(Tier::Accepted, "web-2", "t", 0, n),
                ],
            );
        }
        let stuck = ledger.window("t", 0, open_at(60_000)).unwrap();
        let held = &stuck.held["agent"];
        assert_eq!(held.hosts["web-2"], 500 - 150);
        assert_eq!(
            held.since_ms, 10_000,
            "the first accepted count above web-2's 150 was seen at 10 s"
        );
        assert_eq!(held.held_ms, 50_000);
        // web-1's own backlog is the last few events of its latest publication only.
        assert_eq!(held.hosts["web-1"], 10);
        // Decided windows hold nothing: their verdict says it.
        let decided = ledger.window("t", 0, Clock { grace_ms: 0, ..open_at(60_000) }).unwrap();
        assert_eq!(decided.verdict, Verdict::Loss);
        assert!(decided.held.is_empty());
    }

    #[test]
    fn a_tier_behind_the_one_before_it_is_timed_from_when_that_one_rose_past_it() {
        let mut ledger = Ledger::new(W);
        seen(&mut ledger, 1_000, &[record(Tier::Agent, "web", "t", 0, 10)]);
        ledger.add_live("dc-a", "t", 0, 10);
        seen(&mut ledger, 1_000, &[record(Tier::Mirror, "m", "t", 0, 10)]);
        assert!(ledger.window("t", 0, open_at(9_000)).unwrap().held.is_empty(), "all caught up");
        seen(&mut ledger, 3_000, &[record(Tier::Agent, "web", "t", 0, 30)]);
        ledger.observe_at(3_500);
        ledger.add_live("dc-a", "t", 0, 20);
        seen(&mut ledger, 8_000, &[record(Tier::Mirror, "m", "t", 0, 25)]);
        let report = ledger.window("t", 0, open_at(9_000)).unwrap();
        assert!(!report.held.contains_key("live"));
        let mirror = &report.held["mirror"];
        assert_eq!((mirror.events, mirror.since_ms, mirror.held_ms), (5, 3_500, 5_500));
        // While the sources are read again, nothing is said to be held.
        let replaying = ledger.window("t", 0, Clock { caught_up: false, ..open_at(9_000) });
        assert!(replaying.unwrap().held.is_empty());
        // Once no window needs them, the rises go; what is held is then timed from now.
        ledger.forget_rises_before(10 * W);
        let report = ledger.window("t", 0, open_at(9_000)).unwrap();
        assert_eq!(report.held["mirror"].held_ms, 0);
    }

    #[test]
    fn an_agent_unheard_for_longer_than_the_limit_is_silent_with_what_it_last_held() {
        let mut ledger = Ledger::new(W);
        seen(
            &mut ledger,
            1_000,
            &[
                record(Tier::Accepted, "web-1", "t", 0, 10),
                record(Tier::Agent, "web-1", "t", 0, 7),
                record(Tier::Accepted, "web-2", "t", 0, 5),
                record(Tier::Agent, "web-2", "t", 0, 5),
            ],
        );
        // web-2 keeps publishing its newest counts (the heartbeat); web-1 is cut off.
        seen(&mut ledger, 40_000, &[record(Tier::Agent, "web-2", "t", 0, 5)]);
        let silent = ledger.silent_agents(open_at(41_000), 30_000);
        assert_eq!(
            silent,
            [Silent {
                host: "web-1".into(),
                last_heard_ms: 1_000,
                silent_ms: 40_000,
                held_events: 3
            }]
        );
        assert!(ledger.silent_agents(open_at(41_000), 60_000).is_empty(), "under the limit");
        assert!(
            ledger.silent_agents(Clock { caught_up: false, ..open_at(41_000) }, 30_000).is_empty()
        );
        // After an hour unheard, and its windows' grace, it is taken to be gone.
        let gone = Clock { grace_ms: 0, ..open_at(40_000 + GONE_AFTER_MS + 1) };
        assert!(ledger.silent_agents(gone, 30_000).is_empty());
        let still = Clock { grace_ms: 2 * GONE_AFTER_MS, ..open_at(40_000 + GONE_AFTER_MS + 1) };
        assert_eq!(ledger.silent_agents(still, 30_000).len(), 2, "within the grace");
        let heard: BTreeMap<String, i64> =
            ledger.agents_heard(open_at(41_000)).into_iter().collect();
        assert_eq!(heard, BTreeMap::from([("web-1".into(), 40_000), ("web-2".into(), 1_000)]));
    }
}
