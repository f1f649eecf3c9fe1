//! What a controller's ServiceAccount may read, asked of the API server with
//! SubjectAccessReviews (its own answer: RBAC, aggregated roles and any other authorizer), one
//! per account, verb, type and namespace, kept for [`ACCESS_TTL`]. An RBAC change forgets the
//! answers it can alter ([`crate::runtime::reads::rbac`] says which, and gathers the changes of a second into
//! one forget). The pure side, what is asked and when, is [`crate::reads`]; hooks are handed
//! only what these answers allow.

use crate::api::ServiceAccountRef;
use crate::reads::{ReadPolicy, ReadScope, Refusal};
use crate::runtime::reads::rbac::Batch;
use crate::runtime::report::metrics::Metrics;
use futures::FutureExt as _;
use futures::future::{BoxFuture, Shared};
use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long an answer is kept. RBAC changes forget the answers they can alter (see
/// [`AccessReviews::forget`]); the time bound covers what the watch does not see: authorizers
/// other than RBAC, and a watch that is re-listing.
pub(crate) const ACCESS_TTL: Duration = Duration::from_secs(30);

/// How long a refusal is kept: shorter, so a grant the watch has not delivered yet (or that
/// the API server's authorizer had not seen when asked) is not held against work for long.
pub(crate) const REFUSAL_TTL: Duration = Duration::from_secs(5);

/// How many recent forgets an answer being asked is checked against. Forgets come at most once
/// a second ([`crate::runtime::reads::rbac::RBAC_WINDOW`]) and a question takes one round trip, so this is
/// ample; an answer asked before the oldest one kept is not kept.
const FORGETS_KEPT: usize = 16;

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

    /// Forgets the questions being asked about `keys`: whoever asks next asks again.
    fn forget(&self, keys: impl Fn(&K) -> bool) {
        self.asked.lock().retain(|key, _| !keys(key));
    }
}

/// Whether a forget covers an account's read.
fn covers(batch: &Batch, (account, scope): &Key) -> bool {
    batch.covers(Some(account), scope.namespace.as_deref())
}

/// The answers kept, the questions being asked, and what recent RBAC changes forgot.
struct Answers {
    ttl: Duration,
    kept: Mutex<HashMap<Key, (Instant, bool)>>,
    asking: InFlight<Key, Answer>,
    /// Bumped by every forget: the generation a question was asked in tells which forgets came
    /// while it was being answered.
    generation: AtomicU64,
    /// The recent forgets, oldest first, with the generation each started.
    forgets: Mutex<VecDeque<(u64, Arc<Batch>)>>,
}

impl Answers {
    fn new(ttl: Duration) -> Answers {
        Answers {
            ttl,
            kept: Mutex::default(),
            asking: InFlight::new(),
            generation: AtomicU64::new(0),
            forgets: Mutex::default(),
        }
    }

    fn cached(&self, key: &Key) -> Option<bool> {
        let kept = self.kept.lock();
        let (at, allowed) = kept.get(key)?;
        let ttl = if *allowed { self.ttl } else { REFUSAL_TTL };
        (at.elapsed() < ttl).then_some(*allowed)
    }

    /// The answer to `key`: kept, being asked, or `ask()`'s.
    async fn answer<F>(&self, key: Key, ask: impl FnOnce() -> F) -> Answer
    where
        F: Future<Output = Answer> + Send + 'static,
    {
        if let Some(allowed) = self.cached(&key) {
            return Ok(allowed);
        }
        let generation = self.generation.load(Ordering::SeqCst);
        let allowed = self.asking.join(key.clone(), ask).await?;
        let mut kept = self.kept.lock();
        // An answer asked across a change that can alter it may be the old one: used, not kept.
        if !self.forgotten_since(generation, &key) {
            kept.insert(key, (Instant::now(), allowed));
        }
        Ok(allowed)
    }

    /// Whether a forget since `generation` covers `key` (or may have: it is no longer kept).
    fn forgotten_since(&self, generation: u64, key: &Key) -> bool {
        let forgets = self.forgets.lock();
        match forgets.front() {
            None => false,
            Some((oldest, _)) if *oldest > generation + 1 => true,
            Some(_) => forgets
                .iter()
                .any(|(forgot, batch)| *forgot > generation && covers(batch, key)),
        }
    }

    /// Forgets the answers `batch` can alter, and the questions about them being asked.
    fn forget(&self, batch: Arc<Batch>) {
        // Under the lock answers are kept under: a question answered now either sees this
        // forget or is forgotten by it.
        let mut kept = self.kept.lock();
        let generation = self.generation.fetch_add(1, Ordering::SeqCst) + 1;
        {
            let mut forgets = self.forgets.lock();
            if forgets.len() == FORGETS_KEPT {
                forgets.pop_front();
            }
            forgets.push_back((generation, batch.clone()));
        }
        kept.retain(|key, _| !covers(&batch, key));
        // A question asked before the change may get the old answer.
        self.asking.forget(|key| covers(&batch, key));
    }
}

/// Answers to "may this account read that", shared by every controller.
pub struct AccessReviews {
    client: kube::Client,
    answers: Answers,
    /// SubjectAccessReviews sent so far (the cost of the checks; the rest are cache hits).
    reviews: AtomicU64,
    metrics: Metrics,
}

impl AccessReviews {
    pub(crate) fn new(client: kube::Client, metrics: Metrics) -> AccessReviews {
        AccessReviews {
            client,
            answers: Answers::new(ACCESS_TTL),
            reviews: AtomicU64::new(0),
            metrics,
        }
    }

    /// Forgets the answers an RBAC change can alter (one window's changes: see
    /// [`crate::runtime::reads::rbac::RbacChanges`]), and the questions about them being asked.
    pub(crate) fn forget(&self, batch: Arc<Batch>) {
        self.answers.forget(batch);
    }

    /// SubjectAccessReviews sent so far.
    pub(crate) fn reviews(&self) -> u64 {
        self.reviews.load(Ordering::Relaxed)
    }

    fn cached(&self, key: &Key) -> Option<bool> {
        self.answers.cached(key)
    }

    /// Whether `account` may make the read, from the cache or the API server.
    pub(crate) async fn allowed(&self, account: &ServiceAccountRef, scope: &ReadScope) -> Answer {
        self.answers
            .answer((account.clone(), scope.clone()), || {
                self.reviews.fetch_add(1, Ordering::Relaxed);
                self.metrics.count_access_review(account);
                let (client, account, scope) =
                    (self.client.clone(), account.clone(), scope.clone());
                async move { review(&client, &account, &scope).await.map_err(Arc::new) }
            })
            .await
    }

    /// [`AccessReviews::allowed`] as a refusal.
    pub(crate) async fn check(
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
    pub(crate) fn policy(self: &Arc<Self>, account: &ServiceAccountRef) -> Arc<dyn ReadPolicy> {
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
    use crate::runtime::reads::rbac::{Covered, Reach, Whose};
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

    fn key(account: &str, namespace: Option<&str>) -> Key {
        let resolver = crate::resources::StaticResolver::with_builtins();
        let config_maps = resolver.find_kind("v1", "ConfigMap").unwrap();
        (
            ServiceAccountRef {
                namespace: "team".into(),
                name: account.into(),
            },
            ReadScope::new(crate::reads::ReadVerb::List, &config_maps, namespace),
        )
    }

    /// A forget of what a RoleBinding in `namespace` naming `account` reaches.
    fn binding_of(account: &str, namespace: &str) -> Batch {
        let mut batch = Batch::default();
        batch.add(Reach {
            whose: Whose::Of(
                [Covered::Account {
                    namespace: "team".into(),
                    name: account.into(),
                }]
                .into(),
            ),
            namespace: Some(namespace.into()),
        });
        batch
    }

    #[tokio::test]
    async fn a_forget_drops_only_the_answers_it_covers() {
        let answers = Answers::new(ACCESS_TTL);
        let (app_shop, app_dev, other_shop, app_all) = (
            key("app", Some("shop")),
            key("app", Some("dev")),
            key("other", Some("shop")),
            key("app", None),
        );
        for key in [&app_shop, &app_dev, &other_shop, &app_all] {
            answers
                .answer(key.clone(), || async { Ok(true) })
                .await
                .unwrap();
        }
        answers.forget(Arc::new(binding_of("app", "shop")));
        assert_eq!(answers.cached(&app_shop), None, "reached: asked again");
        for key in [&app_dev, &other_shop, &app_all] {
            assert_eq!(answers.cached(key), Some(true), "{key:?} kept");
        }
    }

    /// Asks `key` with a question answered only when told; returns the answer's task and the
    /// trigger.
    async fn ask_pending(
        answers: &Arc<Answers>,
        key: &Key,
    ) -> (
        tokio::task::JoinHandle<Answer>,
        tokio::sync::oneshot::Sender<()>,
    ) {
        let (answer, answered) = tokio::sync::oneshot::channel::<()>();
        let asked = Arc::new(tokio::sync::Notify::new());
        let task = {
            let (answers, key, asked) = (answers.clone(), key.clone(), asked.clone());
            tokio::spawn(async move {
                answers
                    .answer(key, || {
                        asked.notify_one();
                        async move {
                            answered.await.ok();
                            Ok(true)
                        }
                    })
                    .await
            })
        };
        asked.notified().await;
        (task, answer)
    }

    #[tokio::test]
    async fn an_answer_asked_across_a_change_that_reaches_it_is_used_not_kept() {
        let answers = Arc::new(Answers::new(ACCESS_TTL));
        let reached = key("app", Some("shop"));
        let (task, answer) = ask_pending(&answers, &reached).await;
        answers.forget(Arc::new(binding_of("app", "shop")));
        // Asked after the change: a question of its own, not the one asked before.
        let again = Arc::new(AtomicUsize::new(0));
        let (later, later_answer) = {
            let (answers, key, again) = (answers.clone(), reached.clone(), again.clone());
            let (later_answer, answered) = tokio::sync::oneshot::channel::<()>();
            let task = tokio::spawn(async move {
                answers
                    .answer(key, || {
                        again.fetch_add(1, Ordering::SeqCst);
                        async move {
                            answered.await.ok();
                            Ok(false)
                        }
                    })
                    .await
            });
            (task, later_answer)
        };
        answer.send(()).unwrap();
        assert!(task.await.unwrap().unwrap(), "used by whoever asked");
        assert_eq!(answers.cached(&reached), None, "not kept");
        later_answer.send(()).unwrap();
        assert!(!later.await.unwrap().unwrap());
        assert_eq!(again.load(Ordering::SeqCst), 1, "asked again");
        assert_eq!(
            answers.cached(&reached),
            Some(false),
            "the new answer is kept"
        );
    }

    #[tokio::test]
    async fn an_answer_asked_across_a_change_that_cannot_reach_it_is_kept() {
        let answers = Arc::new(Answers::new(ACCESS_TTL));
        let elsewhere = key("app", Some("dev"));
        let (task, answer) = ask_pending(&answers, &elsewhere).await;
        answers.forget(Arc::new(binding_of("app", "shop")));
        answer.send(()).unwrap();
        assert!(task.await.unwrap().unwrap());
        assert_eq!(answers.cached(&elsewhere), Some(true));
    }

    #[tokio::test]
    async fn an_answer_asked_before_the_forgets_remembered_is_not_kept() {
        let answers = Arc::new(Answers::new(ACCESS_TTL));
        let elsewhere = key("app", Some("dev"));
        let (task, answer) = ask_pending(&answers, &elsewhere).await;
        for _ in 0..=FORGETS_KEPT {
            answers.forget(Arc::new(binding_of("app", "shop")));
        }
        answer.send(()).unwrap();
        assert!(task.await.unwrap().unwrap());
        assert_eq!(
            answers.cached(&elsewhere),
            None,
            "what came between is not known"
        );
    }
}
