//! Membership for sharding: each replica holds a `coordination.k8s.io/v1` Lease of its own,
//! labelled with its group, renews it, and lists the group's Leases to see who is live. What
//! follows from a renewal or a list (who owns what, who may write) is [`crate::runtime::replicas::shard`]'s.
//!
//! A Lease counts as live until it has been seen unchanged for its duration, timed by this
//! replica from when it first saw that renewal: the holder's clock is never compared with
//! ours. A Lease abandoned for many durations (a replica killed without a word) is deleted,
//! so dead replicas leave nothing behind.

use crate::runtime::replicas::shard::{Report, ShardConfig, Shards};
use crate::runtime::report::usage::UsageReport;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Api;
use kube::api::{DeleteParams, ListParams, ObjectMeta, PostParams, Preconditions};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// The annotation a replica's counts travel in (see [`Report`]).
pub(crate) const REPORT_ANNOTATION: &str = "metascript.dev/shard-report";

/// The most of its report a replica puts in its Lease. The API server refuses an object whose
/// annotations pass 256 KiB, and a refused renewal would cost the replica its share of the
/// work: a report that would not fit is cut down ([`fitted`]) rather than sent.
const MAX_REPORT_BYTES: usize = 192 * 1024;

/// A Lease seen unchanged for this many of its durations is deleted.
const ABANDONED_AFTER: u32 = 5;

#[derive(Debug, thiserror::Error)]
pub(crate) enum MembershipError {
    #[error("shard lease {namespace}/{name}: {source}")]
    Api {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("shard leases in {namespace}: no answer within {timeout:?}")]
    Timeout {
        namespace: String,
        timeout: Duration,
    },
}

/// One replica's part in the membership.
pub(crate) struct Membership {
    api: Api<Lease>,
    shards: Arc<Shards>,
    sightings: Mutex<Sightings>,
    /// What the last report left out to fit its Lease ([`Cut`]): a change is said in the log.
    report_cut: std::sync::atomic::AtomicU8,
}

impl Membership {
    pub(crate) fn new(client: kube::Client, shards: Arc<Shards>) -> Membership {
        Membership {
            api: Api::namespaced(client, &shards.config().namespace),
            shards,
            sightings: Mutex::default(),
            report_cut: Default::default(),
        }
    }

    fn config(&self) -> &ShardConfig {
        self.shards.config()
    }

    /// Takes part until dropped: renews this replica's Lease and lists everyone's.
    pub(crate) async fn run(&self) {
        tokio::join!(self.renew_loop(), self.list_loop());
    }

    async fn renew_loop(&self) {
        let every = self.config().renew_every();
        loop {
            let sent = Instant::now();
            match self.timed(every, self.renew()).await {
                Ok(()) => self.shards.renewed(sent, Instant::now()),
                Err(error) => {
                    tracing::warn!(%error, "cannot renew this replica's shard lease");
                }
            }
            tokio::time::sleep_until(sent + every).await;
        }
    }

    async fn list_loop(&self) {
        let every = self.config().list_every();
        let selector = format!("{}={}", ShardConfig::GROUP_LABEL, self.config().group);
        let params = ListParams::default().labels(&selector);
        loop {
            let sent = Instant::now();
            match self
                .timed(self.config().fresh_for(), self.list(&params))
                .await
            {
                Ok(leases) => {
                    let (live, abandoned) =
                        self.sightings.lock().look(&leases, sent, Instant::now());
                    self.shards.listed(sent, live);
                    for lease in abandoned {
                        self.delete_abandoned(&lease).await;
                    }
                }
                Err(error) => tracing::warn!(%error, "cannot list the shard leases"),
            }
            self.shards.refresh_metrics();
            tokio::time::sleep_until(sent + every).await;
        }
    }

    async fn timed<T>(
        &self,
        timeout: Duration,
        request: impl Future<Output = Result<T, MembershipError>>,
    ) -> Result<T, MembershipError> {
        tokio::time::timeout(timeout, request)
            .await
            .unwrap_or_else(|_| {
                Err(MembershipError::Timeout {
                    namespace: self.config().namespace.clone(),
                    timeout,
                })
            })
    }

    async fn list(&self, params: &ListParams) -> Result<Vec<Lease>, MembershipError> {
        let listed = self.api.list(params).await.map_err(|e| self.error(e))?;
        Ok(listed.items)
    }

    /// Renews this replica's Lease, creating it when it is missing (the first time, or after
    /// someone deleted it: then writes stop at once, and it joins again).
    async fn renew(&self) -> Result<(), MembershipError> {
        let name = self.config().lease_name();
        let now = jiff::Timestamp::now();
        let report = self.report_annotation();
        let current = self.api.get_opt(&name).await.map_err(|e| self.error(e))?;
        let ours = current.as_ref().is_some_and(|lease| {
            lease
                .spec
                .as_ref()
                .and_then(|s| s.holder_identity.as_deref())
                == Some(self.config().identity.as_str())
        });
        match current {
            Some(mut lease) if ours => {
                let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
                spec.renew_time = Some(MicroTime(now));
                spec.lease_duration_seconds = Some(self.seconds());
                lease
                    .metadata
                    .annotations
                    .get_or_insert_with(BTreeMap::new)
                    .insert(REPORT_ANNOTATION.into(), report);
                self.api
                    .replace(&name, &self.params(), &lease)
                    .await
                    .map_err(|e| self.error(e))?;
            }
            current => {
                self.shards.lost();
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(name.clone()),
                        labels: Some(BTreeMap::from([(
                            ShardConfig::GROUP_LABEL.into(),
                            self.config().group.clone(),
                        )])),
                        annotations: Some(BTreeMap::from([(REPORT_ANNOTATION.into(), report)])),
                        resource_version: current.and_then(|l| l.metadata.resource_version),
                        ..ObjectMeta::default()
                    },
                    spec: Some(LeaseSpec {
                        holder_identity: Some(self.config().identity.clone()),
                        lease_duration_seconds: Some(self.seconds()),
                        acquire_time: Some(MicroTime(now)),
                        renew_time: Some(MicroTime(now)),
                        ..LeaseSpec::default()
                    }),
                };
                // A Lease of this name held by someone else (a stale copy, an edit by hand) is
                // replaced, carrying the version read, so a concurrent change fails instead.
                let written = if lease.metadata.resource_version.is_some() {
                    self.api.replace(&name, &self.params(), &lease).await
                } else {
                    self.api.create(&self.params(), &lease).await
                };
                written.map_err(|e| self.error(e))?;
            }
        }
        Ok(())
    }

    /// Leaves the group (on shutdown, after the last write): writes stop, and the Lease is
    /// deleted, so the others take this replica's items at their next list instead of after
    /// it expires.
    pub(crate) async fn leave(&self) -> Result<(), MembershipError> {
        self.shards.stop();
        let name = self.config().lease_name();
        match self.api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {
                tracing::info!(lease = %name, "left the shards");
                Ok(())
            }
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(error) => Err(self.error(error)),
        }
    }

    /// Deletes a Lease nobody has renewed for long, unless it changed since it was read.
    async fn delete_abandoned(&self, lease: &Lease) {
        let name = lease.metadata.name.clone().unwrap_or_default();
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                resource_version: lease.metadata.resource_version.clone(),
                uid: lease.metadata.uid.clone(),
            }),
            ..DeleteParams::default()
        };
        match self.api.delete(&name, &params).await {
            Ok(_) => tracing::info!(lease = %name, "deleted an abandoned shard lease"),
            Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {}
            Err(error) => {
                tracing::warn!(lease = %name, %error, "cannot delete an abandoned shard lease")
            }
        }
    }

    fn report_annotation(&self) -> String {
        let (text, cut) = fitted(self.shards.report(), MAX_REPORT_BYTES);
        let before = self
            .report_cut
            .swap(cut as u8, std::sync::atomic::Ordering::Relaxed);
        if before != cut as u8 {
            let bytes = text.len();
            match cut {
                Cut::Nothing => tracing::info!(bytes, "this replica's report fits its Lease again"),
                Cut::UsageTotals => tracing::warn!(
                    bytes,
                    "this replica's report is too large for its Lease: it leaves out usage \
                     totals, which controllers' status.usage.total then lacks"
                ),
                Cut::Usage => tracing::warn!(
                    bytes,
                    "this replica's report is too large for its Lease: it leaves out its usage, \
                     which controllers' status.usage then lacks"
                ),
                Cut::Controllers => tracing::error!(
                    bytes,
                    "this replica's report is too large for its Lease even without usage: it \
                     leaves out the controllers with the fewest targets, whose status then \
                     lacks this replica's counts"
                ),
            }
        }
        text
    }

    fn seconds(&self) -> i32 {
        i32::try_from(self.config().duration.as_secs()).unwrap_or(i32::MAX)
    }

    fn params(&self) -> PostParams {
        PostParams {
            field_manager: Some("metascript.dev/shards".into()),
            ..PostParams::default()
        }
    }

    fn error(&self, source: kube::Error) -> MembershipError {
        MembershipError::Api {
            namespace: self.config().namespace.clone(),
            name: self.config().lease_name(),
            source,
        }
    }
}

/// What this replica has seen of each Lease: its last renewal, and when that was first seen.
#[derive(Debug, Default)]
struct Sightings {
    seen: HashMap<String, Sighting>,
}

#[derive(Debug)]
struct Sighting {
    /// The holder and renewal time as written: a change of either is a renewal.
    renewal: (String, Option<jiff::Timestamp>),
    /// The answer of the first list that showed it.
    first: Instant,
}

impl Sightings {
    /// The live members as of a list sent at `sent` and answered at `answered`, with their
    /// reports; and the Leases abandoned for long. A renewal first seen in this list counts
    /// from its answer (later than it happened: the safe side); expiry is judged at the
    /// sending (earlier than the list was served: the safe side again).
    fn look(
        &mut self,
        leases: &[Lease],
        sent: Instant,
        answered: Instant,
    ) -> (Vec<(String, Report)>, Vec<Lease>) {
        let mut live = Vec::new();
        let mut abandoned = Vec::new();
        let mut seen = HashMap::with_capacity(leases.len());
        for lease in leases {
            let Some(name) = lease.metadata.name.clone() else {
                continue;
            };
            let spec = lease.spec.clone().unwrap_or_default();
            let holder = spec.holder_identity.clone().unwrap_or_default();
            let renewal = (holder.clone(), spec.renew_time.as_ref().map(|t| t.0));
            let first = match self.seen.remove(&name) {
                Some(sighting) if sighting.renewal == renewal => sighting.first,
                _ => answered,
            };
            let duration = Duration::from_secs(
                spec.lease_duration_seconds
                    .and_then(|s| u64::try_from(s).ok())
                    .unwrap_or(0),
            );
            if !holder.is_empty() && sent < first + duration {
                live.push((holder, report_of(lease)));
            } else if sent >= first + duration * ABANDONED_AFTER {
                abandoned.push(lease.clone());
            }
            seen.insert(name, Sighting { renewal, first });
        }
        self.seen = seen;
        (live, abandoned)
    }
}

/// What a replica left out of its report to fit it in its Lease, from the least to the most.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
enum Cut {
    Nothing,
    /// The usage totals since load (recent usage stays).
    UsageTotals,
    /// Every usage figure (a budget's wait stays: the `Throttled` condition is built from it).
    Usage,
    /// The usage, and whole controllers: those with the fewest targets first.
    Controllers,
}

/// A report as JSON within `limit` bytes, and what was left out to fit: first the usage totals
/// since load, then every usage figure but a budget's wait, and last, if even the target counts
/// do not fit (some 1,000 controllers or more), the controllers with the fewest targets.
fn fitted(mut report: Report, limit: usize) -> (String, Cut) {
    let text = |report: &Report| serde_json::to_string(report).expect("counts serialize");
    let whole = text(&report);
    if whole.len() <= limit {
        return (whole, Cut::Nothing);
    }
    for counts in report.values_mut() {
        counts.usage.total = Default::default();
    }
    let recent = text(&report);
    if recent.len() <= limit {
        return (recent, Cut::UsageTotals);
    }
    for counts in report.values_mut() {
        counts.usage = UsageReport {
            paced: counts.usage.paced.take(),
            ..UsageReport::default()
        };
    }
    let counted = text(&report);
    if counted.len() <= limit {
        return (counted, Cut::Usage);
    }
    // Each entry's size once; what removing it saves is at least that less its braces.
    let mut sizes: Vec<(u64, String, usize)> = report
        .iter()
        .map(|(controller, counts)| {
            let size = text(&Report::from([(controller.clone(), counts.clone())])).len();
            (counts.targets, controller.clone(), size)
        })
        .collect();
    sizes.sort();
    let mut size = counted.len();
    for (_, controller, entry) in sizes {
        if size <= limit {
            break;
        }
        report.remove(&controller);
        size = size.saturating_sub(entry - 2);
    }
    (text(&report), Cut::Controllers)
}

/// A member's report; unreadable (another version's, say) counts as empty.
fn report_of(lease: &Lease) -> Report {
    lease
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(REPORT_ANNOTATION))
        .and_then(|text| serde_json::from_str(text).ok())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(name: &str, holder: Option<&str>, renewed: &str, seconds: i32) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some(name.into()),
                annotations: Some(BTreeMap::from([(
                    REPORT_ANNOTATION.into(),
                    r#"{"decorator/spp":{"targets":3,"synced":3,"failing":0}}"#.into(),
                )])),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_string),
                renew_time: Some(MicroTime(renewed.parse().unwrap())),
                lease_duration_seconds: Some(seconds),
                ..LeaseSpec::default()
            }),
        }
    }

    /// A report too large for a Lease loses the usage totals, then all usage but a budget's
    /// wait, then the controllers with the fewest targets: it always fits.
    #[test]
    fn a_report_too_large_for_its_lease_is_cut_to_fit() {
        use crate::runtime::report::usage::{Paced, Usage};
        let busy = Usage {
            hook_calls: 123_456,
            hook_cpu_micros: 9_876_543,
            writes: 65_432,
            ..Usage::default()
        };
        let paced = Paced {
            reason: "CPUBudget".into(),
            message: "over its CPU budget".into(),
        };
        let report: Report = (0..400)
            .map(|n| {
                let counts = crate::runtime::report::status::Counts {
                    targets: 1_000 + n,
                    synced: 990,
                    usage: UsageReport {
                        since: 1_800_000_000,
                        total: busy.clone(),
                        recent: busy.clone(),
                        recent_minutes: 10,
                        paced: (n == 7).then(|| paced.clone()),
                    },
                    ..Default::default()
                };
                (format!("decorator/controller-{n}"), counts)
            })
            .collect();
        let whole = serde_json::to_string(&report).unwrap();
        assert_eq!(
            fitted(report.clone(), whole.len()),
            (whole.clone(), Cut::Nothing)
        );
        let (text, cut) = fitted(report.clone(), whole.len() - 1);
        assert_eq!(cut, Cut::UsageTotals);
        let read: Report = serde_json::from_str(&text).unwrap();
        assert_eq!(read["decorator/controller-7"].usage.recent, busy);
        assert_eq!(read["decorator/controller-7"].usage.total, Usage::default());
        let mut counted = report.clone();
        for counts in counted.values_mut() {
            counts.usage = UsageReport {
                paced: counts.usage.paced.take(),
                ..UsageReport::default()
            };
        }
        let counted = serde_json::to_string(&counted).unwrap();
        let (text, cut) = fitted(report.clone(), counted.len());
        assert_eq!((text.len(), cut), (counted.len(), Cut::Usage));
        let read: Report = serde_json::from_str(&text).unwrap();
        assert_eq!(read.len(), 400);
        assert_eq!(read["decorator/controller-399"].targets, 1_399);
        assert_eq!(
            read["decorator/controller-399"].usage.recent,
            Usage::default()
        );
        assert_eq!(
            read["decorator/controller-7"].usage.paced,
            Some(paced),
            "the Throttled condition is built from it"
        );
        let limit = counted.len() / 10;
        let (text, cut) = fitted(report, limit);
        assert_eq!(cut, Cut::Controllers);
        assert!(text.len() <= limit, "{} > {limit}", text.len());
        let read: Report = serde_json::from_str(&text).unwrap();
        assert!(!read.is_empty() && read.len() < 400);
        assert!(
            read.contains_key("decorator/controller-399"),
            "the most targets stay"
        );
        assert!(
            !read.contains_key("decorator/controller-0"),
            "the fewest go first"
        );
    }

    fn holders(live: &[(String, Report)]) -> Vec<&str> {
        live.iter().map(|(holder, _)| holder.as_str()).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_lives_until_seen_unchanged_for_its_duration_whatever_its_clock_says() {
        let mut sightings = Sightings::default();
        // Renewal times from a clock far behind ours do not matter: only changes do.
        let a = |renewed| lease("g-a", Some("a"), renewed, 10);
        let b = lease("g-b", Some("b"), "2001-01-01T00:00:00Z", 10);
        let released = lease("g-c", None, "2001-01-01T00:00:00Z", 10);
        let (live, _) = sightings.look(
            &[a("2001-01-01T00:00:00Z"), b.clone(), released.clone()],
            Instant::now(),
            Instant::now(),
        );
        assert_eq!(holders(&live), ["a", "b"], "a released Lease is nobody's");
        assert_eq!(live[0].1["decorator/spp"].targets, 3);

        tokio::time::advance(Duration::from_secs(6)).await;
        let (live, _) = sightings.look(
            &[a("2001-01-01T00:00:06Z"), b.clone()],
            Instant::now(),
            Instant::now(),
        );
        assert_eq!(holders(&live), ["a", "b"]);
        // b has not renewed for 10 s as we timed it; a renewed 4 s ago.
        tokio::time::advance(Duration::from_secs(4)).await;
        let (live, abandoned) = sightings.look(
            &[a("2001-01-01T00:00:06Z"), b.clone()],
            Instant::now(),
            Instant::now(),
        );
        assert_eq!(holders(&live), ["a"]);
        assert!(abandoned.is_empty());
        // Long after, b is deleted; a Lease no longer listed is forgotten.
        tokio::time::advance(Duration::from_secs(40)).await;
        let (live, abandoned) =
            sightings.look(std::slice::from_ref(&b), Instant::now(), Instant::now());
        assert!(live.is_empty());
        assert_eq!(abandoned.len(), 1);
        assert_eq!(sightings.seen.len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_renewal_counts_from_the_answer_and_expiry_from_the_sending() {
        let mut sightings = Sightings::default();
        let a = lease("g-a", Some("a"), "2001-01-01T00:00:00Z", 10);
        let sent = Instant::now();
        tokio::time::advance(Duration::from_secs(2)).await;
        sightings.look(std::slice::from_ref(&a), sent, Instant::now());
        // Sent 9.5 s after that answer: live. Sent 10 s after: gone.
        tokio::time::advance(Duration::from_millis(9_500)).await;
        let (live, _) = sightings.look(std::slice::from_ref(&a), Instant::now(), Instant::now());
        assert_eq!(holders(&live), ["a"]);
        tokio::time::advance(Duration::from_millis(500)).await;
        let (live, _) = sightings.look(std::slice::from_ref(&a), Instant::now(), Instant::now());
        assert!(live.is_empty());
    }
}
