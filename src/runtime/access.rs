//! What a controller's ServiceAccount may read, asked of the API server with
//! SubjectAccessReviews (its own answer: RBAC, aggregated roles and any other authorizer), one
//! per account, verb, type and namespace, kept for [`ACCESS_TTL`] and forgotten at once when a
//! Role, ClusterRole or binding changes (the operator watches them). The pure side, what is
//! asked and when, is [`crate::reads`]; hooks are handed only what these answers allow.

use crate::api::ServiceAccountRef;
use crate::reads::{ReadPolicy, ReadScope, Refusal};
use crate::resources::ResourceType;
use futures::FutureExt as _;
use futures::future::{BoxFuture, Shared};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long an answer is kept. RBAC changes forget every answer at once (see
/// [`AccessReviews::rbac_changed`]); the time bound covers what the watch does not see:
/// authorizers other than RBAC, and a watch that is re-listing.
pub const ACCESS_TTL: Duration = Duration::from_secs(30);

/// How long a refusal is kept: shorter, so a grant the watch has not delivered yet (or that
/// the API server's authorizer had not seen when asked) is not held against work for long.
pub const REFUSAL_TTL: Duration = Duration::from_secs(5);

/// How long after an RBAC change refused work is retried: the API server's authorizer learns
/// of the change through a watch of its own, a moment after ours.
pub const RBAC_SETTLE: Duration = Duration::from_millis(500);

/// The types whose changes may change an answer.
pub const RBAC_TYPES: [(&str, &str); 4] = [
    ("rbac.authorization.k8s.io/v1", "roles"),
    ("rbac.authorization.k8s.io/v1", "rolebindings"),
    ("rbac.authorization.k8s.io/v1", "clusterroles"),
    ("rbac.authorization.k8s.io/v1", "clusterrolebindings"),
];

/// Whether an object of this type is RBAC: a change to it forgets every answer.
pub fn is_rbac(resource: &ResourceType) -> bool {
    RBAC_TYPES.iter().any(|(api_version, plural)| {
        resource.api_version == *api_version && resource.plural == *plural
    })
}

type Key = (ServiceAccountRef, ReadScope);

/// The API server's answer to one review (shared by everyone who asked while it was asked).
type Answer = Result<bool, Arc<kube::Error>>;

/// Questions being asked now, so that many workers missing the cache at once (every worker at
/// start-up) send one question, not one each.
struct InFlight<K, T: Clone> {
    asked: Mutex<HashMap<K, Shared<BoxFuture<'static, T>>>>,
}

impl<K: Eq + Hash + Clone, T: Clone + Send + Sync + 'static> InFlight<K, T> {
    fn new() -> Self {
        InFlight {
            asked: Mutex::default(),
        }
    }

    /// The answer to `key`: the one being asked now, or `ask()`'s (which then runs once for
    /// everyone asking meanwhile).
    async fn join<F>(&self, key: K, ask: impl FnOnce() -> F) -> T
    where
        F: Future<Output = T> + Send + 'static,
    {
        let answer = self
            .asked
            .lock()
            .entry(key.clone())
            .or_insert_with(|| ask().boxed().shared())
            .clone();
        let result = answer.clone().await;
        let mut asked = self.asked.lock();
        // Only this question: a later one for the same key may have started since.
        if asked.get(&key).is_some_and(|now| now.ptr_eq(&answer)) {
            asked.remove(&key);
        }
        result
    }

    /// Forgets the questions being asked: whoever asks next asks again.
    fn forget(&self) {
        self.asked.lock().clear();
    }
}

/// Answers to "may this account read that", shared by every controller.
pub struct AccessReviews {
    client: kube::Client,
    ttl: Duration,
    answers: Mutex<HashMap<Key, (Instant, bool)>>,
    asking: InFlight<Key, Answer>,
    /// Bumped by every RBAC change: an answer asked before it is not kept.
    generation: AtomicU64,
    /// SubjectAccessReviews sent so far (the cost of the checks; the rest are cache hits).
    reviews: AtomicU64,
}

impl AccessReviews {
    pub fn new(client: kube::Client) -> AccessReviews {
        AccessReviews {
            client,
            ttl: ACCESS_TTL,
            answers: Mutex::default(),
            asking: InFlight::new(),
            generation: AtomicU64::new(0),
            reviews: AtomicU64::new(0),
        }
    }

    /// Forgets every answer (a Role, ClusterRole or binding changed).
    pub fn rbac_changed(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.answers.lock().clear();
        // A question asked before the change may get the old answer.
        self.asking.forget();
    }

    /// How many RBAC changes were seen: a change of it tells the runtime to retry refused work.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// SubjectAccessReviews sent so far.
    pub fn reviews(&self) -> u64 {
        self.reviews.load(Ordering::Relaxed)
    }

    fn cached(&self, key: &Key) -> Option<bool> {
        let answers = self.answers.lock();
        let (at, allowed) = answers.get(key)?;
        let ttl = if *allowed { self.ttl } else { REFUSAL_TTL };
        (at.elapsed() < ttl).then_some(*allowed)
    }

    /// Whether `account` may make the read, from the cache or the API server.
    pub async fn allowed(&self, account: &ServiceAccountRef, scope: &ReadScope) -> Answer {
        let key = (account.clone(), scope.clone());
        if let Some(allowed) = self.cached(&key) {
            return Ok(allowed);
        }
        let generation = self.generation();
        let allowed = self
            .asking
            .join(key.clone(), || {
                self.reviews.fetch_add(1, Ordering::Relaxed);
                let (client, account, scope) =
                    (self.client.clone(), account.clone(), scope.clone());
                async move { review(&client, &account, &scope).await.map_err(Arc::new) }
            })
            .await?;
        // An answer asked across an RBAC change may be the old one: used, not kept.
        let mut answers = self.answers.lock();
        if self.generation() == generation {
            answers.insert(key, (Instant::now(), allowed));
        }
        Ok(allowed)
    }

    /// [`AccessReviews::allowed`] as a refusal.
    pub async fn check(
        &self,
        account: &ServiceAccountRef,
        scope: &ReadScope,
    ) -> Result<(), Refusal> {
        match self.allowed(account, scope).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(Refusal::Forbidden {
                account: describe(account),
                scope: Box::new(scope.clone()),
            }),
            Err(error) => Err(Refusal::CheckFailed {
                account: describe(account),
                scope: Box::new(scope.clone()),
                message: error.to_string(),
            }),
        }
    }

    /// The policy a controller's hooks read under.
    pub fn policy(self: &Arc<Self>, account: &ServiceAccountRef) -> Arc<dyn ReadPolicy> {
        Arc::new(AccountReads {
            reviews: self.clone(),
            account: account.clone(),
        })
    }
}

fn describe(account: &ServiceAccountRef) -> String {
    format!("ServiceAccount {}/{}", account.namespace, account.name)
}

/// A controller's reads: what its account may read. Checked from blocking threads (the hooks'
/// and their helpers'): a cached answer costs a lock, a new one waits for the API server.
struct AccountReads {
    reviews: Arc<AccessReviews>,
    account: ServiceAccountRef,
}

impl ReadPolicy for AccountReads {
    fn check(&self, scope: &ReadScope) -> Result<(), Refusal> {
        let key = (self.account.clone(), scope.clone());
        match self.reviews.cached(&key) {
            Some(true) => Ok(()),
            Some(false) => Err(Refusal::Forbidden {
                account: describe(&self.account),
                scope: Box::new(scope.clone()),
            }),
            None => {
                tokio::runtime::Handle::current().block_on(self.reviews.check(&self.account, scope))
            }
        }
    }
}

/// Asks the API server whether a ServiceAccount may make a read (the groups it would have
/// when authenticated by its token).
async fn review(
    client: &kube::Client,
    account: &ServiceAccountRef,
    scope: &ReadScope,
) -> Result<bool, kube::Error> {
    use k8s_openapi::api::authorization::v1::{
        ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
    };
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(account.username()),
            groups: Some(vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{}", account.namespace),
                "system:authenticated".into(),
            ]),
            resource_attributes: Some(ResourceAttributes {
                verb: Some(scope.verb.as_str().into()),
                group: Some(scope.resource.group().to_string()),
                resource: Some(scope.resource.plural.clone()),
                namespace: scope.namespace.clone(),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    };
    let api: kube::Api<SubjectAccessReview> = kube::Api::all(client.clone());
    let answer = api.create(&Default::default(), &review).await?;
    Ok(answer.status.is_some_and(|status| status.allowed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[tokio::test]
    async fn questions_asked_at_once_are_asked_once_and_later_ones_again() {
        let in_flight: Arc<InFlight<&str, u32>> = Arc::new(InFlight::new());
        let asked = Arc::new(AtomicUsize::new(0));
        let (answer, answered) = tokio::sync::oneshot::channel::<u32>();
        let answered = answered.shared();
        let joined = Arc::new(AtomicUsize::new(0));
        let waiting: Vec<_> = (0..16)
            .map(|_| {
                let (in_flight, asked, answered, joined) = (
                    in_flight.clone(),
                    asked.clone(),
                    answered.clone(),
                    joined.clone(),
                );
                tokio::spawn(async move {
                    let answer = in_flight.join("key", || {
                        asked.fetch_add(1, Ordering::SeqCst);
                        async move { answered.await.unwrap() }
                    });
                    joined.fetch_add(1, Ordering::SeqCst);
                    answer.await
                })
            })
            .collect();
        // Every asker is waiting on its answer before the question is answered (`join` finds
        // or asks the question when first polled, after `joined` counts it).
        while joined.load(Ordering::SeqCst) < 16 {
            tokio::task::yield_now().await;
        }
        tokio::task::yield_now().await;
        answer.send(7).unwrap();
        for task in waiting {
            assert_eq!(task.await.unwrap(), 7);
        }
        assert_eq!(
            asked.load(Ordering::SeqCst),
            1,
            "one question for sixteen askers"
        );
        // Answered and gone: the next asker asks again.
        let again = in_flight
            .join("key", || {
                asked.fetch_add(1, Ordering::SeqCst);
                async { 8 }
            })
            .await;
        assert_eq!((again, asked.load(Ordering::SeqCst)), (8, 2));
    }
}
