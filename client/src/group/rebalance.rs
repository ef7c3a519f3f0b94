//! Rebalancing (paper §3.3, Algorithm 1), run by every consumer when brokers, topics or group
//! members change: commit and release what it owns, compute the assignment every member
//! computes, claim its share with ephemeral owner nodes, and start fetching. A claim that
//! finds another owner means that consumer has not released yet: release everything, back
//! off, try again — a bounded number of times, then a typed error.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use cluster::{Claim, SessionEvent, Watch};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::assignment::{StreamId, assign};
use super::config::CommitPolicy;
use super::error::GroupError;
use super::fetcher;
use super::owned::{OFFSET_UNKNOWN, Owned};
use super::state::Inner;
use super::stream::Chunk;

/// Rebalances now and after every change of the registries, until `stop`. `first` hears
/// when the first rebalance has run.
pub(crate) async fn follow_changes(
    inner: Arc<Inner>,
    stop: CancellationToken,
    first: oneshot::Sender<()>,
) {
    let mut first = Some(first);
    let mut session = inner.registry.coordinator().session_events();
    let mut backoff = service::Backoff::from_ms(
        inner.config.rebalance_backoff_ms,
        inner.config.rebalance_backoff_max_ms,
    );
    loop {
        // Watches are set before the rebalance reads, so no change goes unseen.
        let watches = match watches(&inner).await {
            Ok(watches) => watches,
            Err(e) => {
                tracing::warn!(error = %e, "cannot watch the registries; retrying");
                if !backoff.wait(&stop).await {
                    return;
                }
                continue;
            }
        };
        backoff.reset();
        let settled = match rebalance(&inner).await {
            Ok(()) => true,
            Err(e) => {
                tracing::error!(group = %inner.config.group, error = %e, "rebalance failed; retrying");
                deliver_error(&inner, &e);
                false
            }
        };
        if let Some(first) = first.take() {
            let _ = first.send(());
        }
        // A failed rebalance is tried again after a pause even if nothing changes.
        let retry = async {
            if settled {
                std::future::pending::<()>().await
            } else {
                tokio::time::sleep(Duration::from_millis(inner.config.rebalance_backoff_max_ms))
                    .await
            }
        };
        tokio::pin!(retry);
        let mut changed = futures::future::select_all(watches);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = &mut changed => break,
                _ = &mut retry => break,
                event = session.recv() => {
                    if matches!(event, Ok(SessionEvent::Expired)) {
                        tracing::warn!(group = %inner.config.group, "session expired; rebalancing");
                        break;
                    }
                    // A connection blip: nodes and watches are intact; keep waiting.
                    continue;
                }
            }
        }
    }
}

/// Watches on everything a rebalance depends on.
async fn watches(inner: &Inner) -> Result<Vec<Watch>, GroupError> {
    let registry = &inner.registry;
    let (_, brokers) = registry.brokers_and_watch().await?;
    let (_, consumers) = registry.consumers_and_watch(&inner.config.group).await?;
    let mut watches = vec![brokers, consumers];
    let (subscription, _) = inner.subscription.get().expect("subscribed before following changes");
    for topic in subscription.keys() {
        watches.push(registry.topic_assignment_and_watch(topic).await?.1);
    }
    Ok(watches)
}

/// Tells every stream that the group could not settle, so that no caller waits in silence.
fn deliver_error(inner: &Inner, error: &GroupError) {
    let Some((_, senders)) = inner.subscription.get() else { return };
    for sender in senders.values().flatten() {
        let chunk = Chunk {
            owned: Arc::new(Owned::new(
                String::new(),
                -1,
                String::new(),
                0,
                OFFSET_UNKNOWN,
                CancellationToken::new(),
            )),
            messages: Vec::new().into_iter(),
            error: Some(GroupError::Rebalance(error.to_string())),
        };
        let _ = sender.try_send(chunk);
    }
}

/// One rebalance, with bounded retries on ownership conflicts.
pub(crate) async fn rebalance(inner: &Arc<Inner>) -> Result<(), GroupError> {
    drain_marks(inner).await;
    let mut owned = inner.owned.lock().await;
    let retries = inner.config.rebalance_retries;
    // Jittered, so that members that collided do not collide again in step.
    let mut backoff = service::Backoff::from_ms(
        inner.config.rebalance_backoff_ms,
        inner.config.rebalance_backoff_max_ms,
    );
    for attempt in 1..=retries {
        release_all(inner, &mut owned).await?;
        match claim_share(inner, &mut owned).await {
            Ok(()) => {
                let share: Vec<String> =
                    owned.iter().map(|o| format!("{}:{}", o.topic, o.partition)).collect();
                tracing::info!(group = %inner.config.group, consumer = %inner.consumer_id, attempt, ?share, "rebalanced");
                return Ok(());
            }
            Err(Conflict { topic, partition, owner }) => {
                release_all(inner, &mut owned).await?;
                if attempt == retries {
                    return Err(GroupError::RebalanceFailed {
                        group: inner.config.group.clone(),
                        attempts: retries,
                        topic,
                        partition,
                        owner,
                    });
                }
                tracing::debug!(%topic, %partition, %owner, "partition still owned; backing off");
                backoff.sleep().await;
            }
        }
    }
    unreachable!("the last attempt returns")
}

/// With [`CommitPolicy::Marked`], before partitions are given up: ends their deliveries and
/// waits, up to `rebalance_drain_ms`, until the caller has marked done everything handed out,
/// so that the commit covers it and whoever owns the partition next (this consumer again,
/// often) does not receive it a second time. The owned list is not held meanwhile, so marks
/// go on landing.
async fn drain_marks(inner: &Inner) {
    if inner.config.commit != CommitPolicy::Marked {
        return;
    }
    let handed_out: Vec<(Arc<Owned>, i64)> = {
        let owned = inner.owned.lock().await;
        owned.iter().map(|o| (Arc::clone(o), o.end_deliveries())).collect()
    };
    let marked = || handed_out.iter().all(|(o, end)| o.consumed.load(Ordering::Acquire) >= *end);
    let deadline = Instant::now() + Duration::from_millis(inner.config.rebalance_drain_ms);
    while !marked() {
        if Instant::now() >= deadline {
            tracing::warn!(group = %inner.config.group, drain_ms = inner.config.rebalance_drain_ms, "messages handed out were not all marked done in time; they will be delivered again");
            return;
        }
        tokio::time::sleep(Duration::from_millis(DRAIN_POLL_MS)).await;
    }
}

/// How often a drain looks whether the caller has marked everything.
const DRAIN_POLL_MS: u64 = 5;

/// A partition another consumer still owns.
struct Conflict {
    topic: String,
    partition: i32,
    owner: String,
}

impl From<GroupError> for Conflict {
    fn from(e: GroupError) -> Conflict {
        // Registry failures surface as a conflict with no owner, retried like one.
        Conflict { topic: String::new(), partition: -1, owner: format!("(registry error: {e})") }
    }
}

/// Computes this consumer's share of every subscribed topic and claims it.
async fn claim_share(inner: &Arc<Inner>, owned: &mut Vec<Arc<Owned>>) -> Result<(), Conflict> {
    let registry = &inner.registry;
    let group = &inner.config.group;
    let (subscription, senders) = inner.subscription.get().expect("subscribed before rebalancing");
    let members = registry.consumers(group).await.map_err(GroupError::from)?;
    for topic in subscription.keys() {
        let streams: Vec<StreamId> = members
            .iter()
            .filter_map(|(consumer, sub)| sub.get(topic).map(|&n| (consumer, n)))
            .flat_map(|(consumer, n)| {
                (0..n).map(move |stream| StreamId { consumer: consumer.clone(), stream })
            })
            .collect();
        let partitions = registry.partitions(topic).await.map_err(GroupError::from)?;
        let assignment = assign(&partitions, &streams);
        for (stream, share) in
            assignment.into_iter().filter(|(s, _)| s.consumer == inner.consumer_id)
        {
            let owner = stream.to_string();
            for partition in share {
                match registry
                    .claim(group, topic, partition, &owner)
                    .await
                    .map_err(GroupError::from)?
                {
                    Claim::Claimed => {}
                    Claim::OwnedBy(other) => {
                        return Err(Conflict { topic: topic.clone(), partition, owner: other });
                    }
                }
                let committed =
                    registry.offset(group, topic, partition).await.map_err(GroupError::from)?;
                let start = committed.unwrap_or(OFFSET_UNKNOWN);
                let claimed = Arc::new(Owned::new(
                    topic.clone(),
                    partition,
                    owner.clone(),
                    stream.stream,
                    start,
                    inner.stop.child_token(),
                ));
                owned.push(Arc::clone(&claimed));
                let queue = senders[topic][stream.stream as usize].clone();
                inner.fetchers.spawn(fetcher::fetch_partition(Arc::clone(inner), claimed, queue));
            }
        }
    }
    Ok(())
}

/// Stops the fetchers, commits, and releases every owned partition.
pub(crate) async fn release_all(
    inner: &Inner,
    owned: &mut Vec<Arc<Owned>>,
) -> Result<(), GroupError> {
    for partition in owned.iter() {
        partition.end_deliveries();
    }
    let committed = inner.commit(owned).await;
    for partition in owned.drain(..) {
        inner
            .registry
            .release(&inner.config.group, &partition.topic, partition.partition, &partition.owner)
            .await?;
    }
    committed
}
