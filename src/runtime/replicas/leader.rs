//! Leader election with a `coordination.k8s.io/v1` Lease, so two replicas never both write.
//!
//! The algorithm is client-go's: whoever holds an unexpired lease keeps it by renewing it; an
//! expired or released lease goes to the first replica whose update lands (updates carry the
//! resourceVersion they read, so two takers cannot both win). On top of it, fencing by time: a
//! leader may write only until its last successful renewal *was sent* plus the lease duration
//! minus a margin, measured on its own monotonic clock, so a leader cut off from the API stops
//! writing before any other replica can take the lease (as long as clocks do not drift apart by
//! more than the margin within one lease duration). A released lease is seen by a standby at
//! its next poll (twice a second), which bounds a handover on SIGTERM.

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use parking_lot::Mutex;
use prometheus_client::metrics::gauge::Gauge;
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// Where the lease lives and who this replica is.
#[derive(Clone, Debug)]
pub struct LeaseConfig {
    pub namespace: String,
    pub name: String,
    /// Unique among the replicas (the pod name, plus something unique to the process).
    pub identity: String,
    /// How long a lease is valid after its last renewal.
    pub duration: Duration,
}

impl LeaseConfig {
    /// The leader renews this often: three chances before the lease runs out.
    fn renew_every(&self) -> Duration {
        self.duration / 3
    }

    /// How long before the lease would expire (for others) the leader stops writing.
    fn margin(&self) -> Duration {
        (self.duration / 5).max(Duration::from_secs(1))
    }

    /// How often a standby looks at the lease: a released lease is taken within this (a GET
    /// of a small object twice a second is cheap).
    fn poll_every(&self) -> Duration {
        (self.duration / 4).min(Duration::from_millis(500))
    }
}

/// Whether this replica may write now. Without election, it always may.
pub struct Leadership {
    /// Writes are allowed until then; `None`: not the leader.
    fence: Mutex<Option<Instant>>,
    changes: watch::Sender<bool>,
    gauge: Gauge,
}

impl Leadership {
    /// A replica that runs alone: the leader for good.
    pub(crate) fn always(gauge: Gauge) -> Leadership {
        gauge.set(1);
        Leadership {
            fence: Mutex::new(Some(
                Instant::now() + Duration::from_secs(100 * 365 * 24 * 3600),
            )),
            changes: watch::Sender::new(true),
            gauge,
        }
    }

    /// A replica that must win an election before it writes.
    pub(crate) fn standby(gauge: Gauge) -> Leadership {
        gauge.set(0);
        Leadership {
            fence: Mutex::new(None),
            changes: watch::Sender::new(false),
            gauge,
        }
    }

    pub(crate) fn is_leader(&self) -> bool {
        self.fence
            .lock()
            .is_some_and(|until| Instant::now() < until)
    }

    /// Changes of leadership, as they are noticed (a lapsed fence stops writes at once, even
    /// before it is noticed here). `true` comes again after any lapse, noticed or not: work
    /// was skipped meanwhile.
    pub(crate) fn subscribe(&self) -> watch::Receiver<bool> {
        self.changes.subscribe()
    }

    fn lead_until(&self, until: Instant) {
        let resumed = {
            let mut fence = self.fence.lock();
            let lapsed = fence.is_none_or(|fence| Instant::now() >= fence);
            *fence = Some(until);
            lapsed
        };
        self.gauge.set(1);
        if resumed {
            // Work skipped while the fence was down must be redone even when the lapse was never
            // noticed (the renewal that ends it was already in flight): subscribers are told
            // again, whatever they last saw.
            self.changes.send_replace(true);
        }
    }

    fn step_down(&self) {
        *self.fence.lock() = None;
        self.noticed(false);
    }

    /// Reports a lapsed fence.
    fn check(&self) {
        if !self.is_leader() {
            self.step_down();
        }
    }

    fn noticed(&self, leading: bool) {
        self.gauge.set(i64::from(leading));
        self.changes.send_if_modified(|current| {
            let changed = *current != leading;
            *current = leading;
            changed
        });
    }
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum ElectionError {
    #[error("lease {namespace}/{name}: {source}")]
    Api {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("lease {namespace}/{name}: no answer within {timeout:?}")]
    Timeout {
        namespace: String,
        name: String,
        timeout: Duration,
    },
}

/// What a look at the lease decided.
#[derive(Debug, PartialEq, Eq)]
enum Decision {
    /// Ours: renew it.
    Renew,
    /// Free, released or expired: take it.
    Take,
    /// Someone else's until then (in wall-clock time).
    Wait(jiff::Timestamp),
}

fn decide(spec: &LeaseSpec, identity: &str, now: jiff::Timestamp) -> Decision {
    let holder = spec.holder_identity.as_deref().filter(|h| !h.is_empty());
    match holder {
        Some(holder) if holder == identity => Decision::Renew,
        None => Decision::Take,
        Some(_) => {
            let expiry = spec
                .renew_time
                .as_ref()
                .zip(spec.lease_duration_seconds)
                .map(|(renewed, seconds)| {
                    renewed.0 + jiff::SignedDuration::from_secs(seconds.into())
                });
            match expiry {
                Some(expiry) if expiry > now => Decision::Wait(expiry),
                _ => Decision::Take,
            }
        }
    }
}

/// One replica's part in the election.
pub(crate) struct Elector {
    api: Api<Lease>,
    config: LeaseConfig,
}

impl Elector {
    pub(crate) fn new(client: kube::Client, config: LeaseConfig) -> Elector {
        Elector {
            api: Api::namespaced(client, &config.namespace),
            config,
        }
    }

    /// Takes part until dropped: renews while leading, takes the lease when it is free, and
    /// keeps `leadership` current.
    pub(crate) async fn run(&self, leadership: &Leadership) {
        loop {
            let sent = Instant::now();
            let pause = match self.acquire_or_renew().await {
                Ok(None) => {
                    leadership.lead_until(sent + self.config.duration - self.config.margin());
                    self.config.renew_every()
                }
                Ok(Some(holder)) => {
                    if leadership.is_leader() {
                        tracing::warn!(lease = %self.config.name, %holder, "the lease went to another replica; writes stop");
                    }
                    leadership.step_down();
                    self.config.poll_every()
                }
                Err(error) => {
                    tracing::warn!(%error, "leader election: cannot read or renew the lease");
                    self.config.poll_every()
                }
            };
            leadership.check();
            // Wake up for the fence too, so a lapse is reported (and logged) when it happens.
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = sleep_past_fence(leadership) => {
                    tracing::warn!(lease = %self.config.name, "the lease could not be renewed in time; writes stop");
                    leadership.check();
                }
            }
        }
    }

    /// Renews or takes the lease: `None` when this replica holds it now, else who does.
    async fn acquire_or_renew(&self) -> Result<Option<String>, ElectionError> {
        let timeout = self.config.renew_every();
        tokio::time::timeout(timeout, self.try_acquire_or_renew())
            .await
            .unwrap_or_else(|_| {
                Err(ElectionError::Timeout {
                    namespace: self.config.namespace.clone(),
                    name: self.config.name.clone(),
                    timeout,
                })
            })
    }

    async fn try_acquire_or_renew(&self) -> Result<Option<String>, ElectionError> {
        let now = jiff::Timestamp::now();
        let Some(lease) = self
            .api
            .get_opt(&self.config.name)
            .await
            .map_err(|e| self.error(e))?
        else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.config.name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(self.held_spec(&LeaseSpec::default(), now, true)),
            };
            return match self.api.create(&self.params(), &lease).await {
                Ok(_) => Ok(None),
                // Another replica created it first.
                Err(kube::Error::Api(status)) if status.code == 409 => Ok(Some(String::new())),
                Err(error) => Err(self.error(error)),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let taking = match decide(&spec, &self.config.identity, now) {
            Decision::Wait(_) => return Ok(spec.holder_identity),
            Decision::Take => true,
            Decision::Renew => false,
        };
        let updated = Lease {
            metadata: lease.metadata.clone(),
            spec: Some(self.held_spec(&spec, now, taking)),
        };
        match self
            .api
            .replace(&self.config.name, &self.params(), &updated)
            .await
        {
            Ok(_) => {
                if taking {
                    tracing::info!(lease = %self.config.name, identity = %self.config.identity, "became the leader");
                }
                Ok(None)
            }
            // The lease changed since it was read: someone else renewed or took it.
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(spec.holder_identity),
            Err(error) => Err(self.error(error)),
        }
    }

    fn held_spec(&self, current: &LeaseSpec, now: jiff::Timestamp, taking: bool) -> LeaseSpec {
        let seconds = i32::try_from(self.config.duration.as_secs()).unwrap_or(i32::MAX);
        LeaseSpec {
            holder_identity: Some(self.config.identity.clone()),
            lease_duration_seconds: Some(seconds),
            renew_time: Some(MicroTime(now)),
            acquire_time: if taking {
                Some(MicroTime(now))
            } else {
                current.acquire_time.clone()
            },
            lease_transitions: Some(current.lease_transitions.unwrap_or(0) + i32::from(taking)),
            ..current.clone()
        }
    }

    /// Gives the lease up (on shutdown, after the last write), so a standby takes over at its
    /// next poll instead of after the lease expires.
    pub(crate) async fn release(&self, leadership: &Leadership) -> Result<(), ElectionError> {
        leadership.step_down();
        let Some(lease) = self
            .api
            .get_opt(&self.config.name)
            .await
            .map_err(|e| self.error(e))?
        else {
            return Ok(());
        };
        let spec = lease.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
            return Ok(());
        }
        let released = Lease {
            metadata: lease.metadata.clone(),
            spec: Some(LeaseSpec {
                holder_identity: None,
                renew_time: None,
                acquire_time: None,
                ..spec
            }),
        };
        self.api
            .replace(&self.config.name, &self.params(), &released)
            .await
            .map(drop)
            .map_err(|e| self.error(e))?;
        tracing::info!(lease = %self.config.name, "released the lease");
        Ok(())
    }

    fn params(&self) -> PostParams {
        PostParams {
            field_manager: Some("metascript.dev/leader-election".into()),
            ..PostParams::default()
        }
    }

    fn error(&self, source: kube::Error) -> ElectionError {
        ElectionError::Api {
            namespace: self.config.namespace.clone(),
            name: self.config.name.clone(),
            source,
        }
    }
}

/// Sleeps until the current fence has passed (forever when there is none).
async fn sleep_past_fence(leadership: &Leadership) {
    let fence = *leadership.fence.lock();
    match fence {
        Some(until) => tokio::time::sleep_until(until).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: Option<&str>, renewed: &str, seconds: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: holder.map(str::to_string),
            renew_time: Some(MicroTime(renewed.parse().unwrap())),
            lease_duration_seconds: Some(seconds),
            ..LeaseSpec::default()
        }
    }

    #[test]
    fn a_lease_is_renewed_by_its_holder_taken_when_free_or_expired_else_waited_for() {
        let now: jiff::Timestamp = "2026-01-01T00:00:10Z".parse().unwrap();
        let mine = lease(Some("me"), "2026-01-01T00:00:00Z", 15);
        assert_eq!(decide(&mine, "me", now), Decision::Renew);
        let theirs = lease(Some("other"), "2026-01-01T00:00:00Z", 15);
        assert_eq!(
            decide(&theirs, "me", now),
            Decision::Wait("2026-01-01T00:00:15Z".parse().unwrap())
        );
        let expired = lease(Some("other"), "2026-01-01T00:00:00Z", 5);
        assert_eq!(decide(&expired, "me", now), Decision::Take);
        let released = lease(None, "2026-01-01T00:00:09Z", 15);
        assert_eq!(decide(&released, "me", now), Decision::Take);
        let emptied = lease(Some(""), "2026-01-01T00:00:09Z", 15);
        assert_eq!(decide(&emptied, "me", now), Decision::Take);
        assert_eq!(decide(&LeaseSpec::default(), "me", now), Decision::Take);
    }

    #[tokio::test(start_paused = true)]
    async fn a_leader_stops_writing_when_its_fence_passes() {
        let leadership = Leadership::standby(Gauge::default());
        let mut changes = leadership.subscribe();
        assert!(!leadership.is_leader());
        leadership.lead_until(Instant::now() + Duration::from_secs(12));
        assert!(leadership.is_leader());
        assert!(changes.has_changed().unwrap());
        assert!(*changes.borrow_and_update());
        assert_eq!(leadership.gauge.get(), 1);

        tokio::time::advance(Duration::from_secs(11)).await;
        assert!(leadership.is_leader());
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(!leadership.is_leader(), "the fence has passed");
        leadership.check();
        assert!(!*changes.borrow_and_update());
        assert_eq!(leadership.gauge.get(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_renewal_after_an_unnoticed_lapse_is_announced_as_leading_again() {
        let leadership = Leadership::standby(Gauge::default());
        let mut changes = leadership.subscribe();
        leadership.lead_until(Instant::now() + Duration::from_secs(12));
        assert!(*changes.borrow_and_update());

        leadership.lead_until(Instant::now() + Duration::from_secs(12));
        assert!(
            !changes.has_changed().unwrap(),
            "a renewal in time is no news"
        );

        tokio::time::advance(Duration::from_secs(13)).await;
        assert!(!leadership.is_leader(), "work is skipped from here");
        // The renewal in flight lands before anything called `check`.
        leadership.lead_until(Instant::now() + Duration::from_secs(12));
        assert!(leadership.is_leader());
        assert!(
            changes.has_changed().unwrap(),
            "what was skipped while the fence was down is redone"
        );
        assert!(*changes.borrow_and_update());
    }

    #[test]
    fn timings_leave_room_for_renewals_before_the_fence() {
        let config = LeaseConfig {
            namespace: "ns".into(),
            name: "metascript".into(),
            identity: "me".into(),
            duration: Duration::from_secs(15),
        };
        assert_eq!(config.renew_every(), Duration::from_secs(5));
        assert_eq!(config.margin(), Duration::from_secs(3));
        assert!(config.renew_every() * 2 < config.duration - config.margin());
        assert_eq!(config.poll_every(), Duration::from_millis(500));
    }
}
