//! One admission review: who asks, may they make the controller run as its account, and do
//! its scripts compile and its `spec.tests` pass. Every answer says only what the caller could
//! learn anyway: nothing read with the operator's rights is quoted to a caller the webhook
//! cannot authenticate, and the work a request causes is bounded.

use crate::api::GROUP;
use crate::hooks::ConfigMapLookup;
use crate::runtime::watch::discovery::Discovery;
use crate::runtime::watch::schemas::LiveSchemas;
use crate::script::ScriptEngine;
use crate::tenancy::{self, ACCOUNTS_RESOURCE, Operation, RunsAs, USE_VERB};
use crate::validate::{self, Finding, Severity};
use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;

/// What a review decides.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Verdict {
    /// Why the request is refused; empty: admitted.
    pub errors: Vec<String>,
    /// Said to the user either way (kubectl prints them).
    pub warnings: Vec<String>,
}

impl Verdict {
    fn refused(message: impl Into<String>) -> Verdict {
        Verdict {
            errors: vec![message.into()],
            warnings: Vec::new(),
        }
    }

    fn add(&mut self, findings: Vec<Finding>) {
        for finding in findings {
            match finding.severity {
                Severity::Error => self.errors.push(finding.to_string()),
                Severity::Warning => self.warnings.push(finding.to_string()),
            }
        }
    }
}

/// Everything a review needs, shared by the requests.
pub(super) struct Reviewer {
    pub client: kube::Client,
    pub discovery: Arc<Discovery>,
    /// What the objects `spec.tests` cases write are checked against.
    /// Built-in types' schemas, and the CRDs of the types controllers name, followed from
    /// the first review that names one.
    pub schemas: Arc<LiveSchemas>,
    /// The engine `spec.tests` run in at admission, with its own small ceilings.
    pub engine: ScriptEngine,
    /// The operator's own user: no controller may run as it.
    pub operator_user: Option<String>,
    /// Whether the TLS layer verified the caller's client certificate (`--webhook-client-ca`):
    /// only then is the request's `userInfo` the API server's word, and ConfigMaps are read to
    /// check the scripts they hold.
    pub authenticated_callers: bool,
    /// Reviews that may compile and test at once; the others wait, within their deadline.
    pub permits: Arc<Semaphore>,
    /// The most a review may take, under the API server's timeout for the webhook.
    pub deadline: Duration,
}

/// The most `spec.tests` cases admission runs: each may take the ceiling's time.
pub(super) const MAX_ADMISSION_TESTS: usize = 32;

/// Why a ConfigMap is not read for a caller the webhook cannot authenticate.
const UNAUTHENTICATED: &str = "the webhook does not authenticate its callers (no \
    --webhook-client-ca), so it reads no ConfigMap for them; the operator compiles it and runs \
    spec.tests when it loads the controller, as the controller's account";

impl Reviewer {
    /// Decides one request within the deadline, from the moment it arrived: every read,
    /// review and script it causes is inside it. `resource` is what the request is about (its
    /// group and plural), `object` the new object (none for a deletion), `old` the stored one
    /// (none for a creation).
    pub(super) async fn review(
        self: &Arc<Self>,
        operation: Operation,
        user: &UserInfo,
        resource: (&str, &str),
        object: Option<Value>,
        old: Option<Value>,
    ) -> Verdict {
        let deadline = tokio::time::Instant::now() + self.deadline;
        let judged = tokio::time::timeout_at(
            deadline,
            self.judge(operation, user, resource, object, old, deadline),
        );
        judged.await.unwrap_or_else(|_| {
            Verdict::refused(format!(
                "metascript: checking the request took longer than the admission webhook's \
                 {:?}: keep spec.tests few and fast (they run on every change, within the \
                 webhook's ceilings)",
                self.deadline
            ))
        })
    }

    async fn judge(
        self: &Arc<Self>,
        operation: Operation,
        user: &UserInfo,
        (group, plural): (&str, &str),
        object: Option<Value>,
        old: Option<Value>,
        deadline: tokio::time::Instant,
    ) -> Verdict {
        let username = user.username.clone().unwrap_or_default();
        let Some(subject) = object.as_ref().or(old.as_ref()) else {
            return Verdict::refused("metascript: the request carries no object to check");
        };
        let controller = crate::kinds::of(subject).is_some();
        if group == GROUP && !controller {
            // A version this operator does not know would skip every check: refused.
            return Verdict::refused(format!(
                "metascript: {plural}.{group} {} is not a version this operator checks",
                crate::object::api_version(subject)
            ));
        }
        if !controller {
            // A labelled ConfigMap of scripts: what it holds is in the request itself.
            return match (operation, object) {
                (Operation::Delete, _) | (_, None) => Verdict::default(),
                (_, Some(object)) => {
                    self.validate(object, Vec::new(), Vec::new(), deadline)
                        .await
                }
            };
        }
        if tenancy::incomplete(operation, old.as_ref(), object.as_ref()) {
            return Verdict::refused(format!(
                "metascript: {operation} of a controller without the object it needs (the \
                 stored or the new one) cannot be checked, so it is refused"
            ));
        }
        let checks = match tenancy::checks(operation, old.as_ref(), object.as_ref()) {
            Ok(checks) => checks,
            Err(invalid) => return Verdict::refused(format!("metascript: {invalid}")),
        };
        if let Some(RunsAs::Account(next)) = &checks.next
            && self.operator_user.as_deref() == Some(next.username().as_str())
        {
            // Only as the account it will run as: one stored before this check can still be
            // fixed or deleted by whoever may use the account it names.
            return Verdict::refused(format!(
                "metascript: {}",
                tenancy::own_account_refusal(next)
            ));
        }
        for runs_as in checks.accounts() {
            if let Some(refusal) = self.may_use(user, &username, runs_as).await {
                return Verdict::refused(format!("metascript: {refusal}"));
            }
        }
        let Some(object) = object.filter(|_| checks.scripts) else {
            return Verdict::default();
        };
        let tests = object
            .pointer("/spec/tests")
            .and_then(Value::as_array)
            .map_or(0, Vec::len);
        if tests > MAX_ADMISSION_TESTS {
            return Verdict::refused(format!(
                "metascript: spec.tests has {tests} cases; admission runs at most \
                 {MAX_ADMISSION_TESTS} (keep the few that guard the controller there, and the \
                 rest in a *.test.yaml for `metascript test`)"
            ));
        }
        let references = validate::references(&object);
        let mut verdict = Verdict::default();
        let mut readable = Vec::new();
        for (namespace, name) in &references.config_maps {
            let attributes = ResourceAttributes {
                verb: Some("get".into()),
                resource: Some("configmaps".into()),
                namespace: Some(namespace.clone()),
                name: Some(name.clone()),
                ..ResourceAttributes::default()
            };
            match self.allowed(user, attributes).await {
                Ok(true) => readable.push((namespace.clone(), name.clone())),
                Ok(false) => verdict.errors.push(format!(
                    "user {username:?} may not get ConfigMap {namespace}/{name}: a controller \
                     may take scripts only from ConfigMaps its author may read"
                )),
                Err(error) => verdict.errors.push(format!(
                    "cannot check access to ConfigMap {namespace}/{name}: {error}"
                )),
            }
        }
        if !verdict.errors.is_empty() {
            verdict.errors = vec![format!("metascript: {}", verdict.errors.join("; "))];
            return verdict;
        }
        let mut types = Vec::new();
        for reference in &references.types {
            // A type that does not resolve is reported by the validation itself.
            if let Ok(resolved) = self.discovery.resolve(reference).await {
                types.push(resolved.resource);
            }
        }
        // What `spec.tests` cases write is checked against their types' schemas; reading a
        // new CRD may take at most half the time left, the rest is the cases'.
        if tests > 0 {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            self.schemas.follow(&types, left / 2).await;
        }
        let (config_maps, withheld) = if self.authenticated_callers {
            (self.read_config_maps(&readable).await, Vec::new())
        } else {
            (Vec::new(), readable)
        };
        self.validate(object, config_maps, withheld, deadline).await
    }

    /// Why `user` may not make a controller run as `runs_as`, or `None` when they may.
    async fn may_use(&self, user: &UserInfo, username: &str, runs_as: &RunsAs) -> Option<String> {
        let (namespace, name) = runs_as.use_attributes();
        let attributes = ResourceAttributes {
            verb: Some(USE_VERB.into()),
            group: Some(GROUP.into()),
            resource: Some(ACCOUNTS_RESOURCE.into()),
            namespace: namespace.map(str::to_string),
            name: name.map(str::to_string),
            ..ResourceAttributes::default()
        };
        match self.allowed(user, attributes).await {
            Ok(true) => None,
            Ok(false) => Some(tenancy::refusal(username, runs_as)),
            // Refused, not admitted: an unchecked controller would act as an account no one
            // was found allowed to use.
            Err(error) => Some(format!(
                "cannot check whether {username:?} may use {runs_as}: {error}"
            )),
        }
    }

    /// Asks the API server whether the requesting user may do what `attributes` say.
    async fn allowed(
        &self,
        user: &UserInfo,
        attributes: ResourceAttributes,
    ) -> Result<bool, kube::Error> {
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username.clone(),
                groups: user.groups.clone(),
                uid: user.uid.clone(),
                extra: user
                    .extra
                    .clone()
                    .map(|extra| extra.into_iter().collect::<BTreeMap<_, _>>()),
                resource_attributes: Some(attributes),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        let api: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let answer = api.create(&Default::default(), &review).await?;
        Ok(answer.status.is_some_and(|status| status.allowed))
    }

    /// The ConfigMaps (the requester may read them) as JSON objects; a missing one is left
    /// out, and validation says so.
    async fn read_config_maps(&self, references: &[(String, String)]) -> Vec<Value> {
        let mut found = Vec::new();
        for (namespace, name) in references {
            let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), namespace);
            if let Ok(Some(config_map)) = api.get_opt(name).await
                && let Ok(mut value) = serde_json::to_value(config_map)
            {
                value["apiVersion"] = "v1".into();
                value["kind"] = "ConfigMap".into();
                found.push(value);
            }
        }
        found
    }

    /// Compiles and tests on the blocking pool, holding a permit for as long as the work runs
    /// (an answer given at the deadline does not free the permit before the work stops), and
    /// running no test case once the deadline has passed.
    async fn validate(
        self: &Arc<Self>,
        object: Value,
        config_maps: Vec<Value>,
        withheld: Vec<(String, String)>,
        deadline: tokio::time::Instant,
    ) -> Verdict {
        let Ok(permit) = self.permits.clone().acquire_owned().await else {
            return Verdict::refused("metascript: the admission webhook is shutting down");
        };
        let reviewer = self.clone();
        let stop_at = deadline.into_std();
        let work = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let lookup = AdmissionConfigMaps {
                found: config_maps,
                withheld,
            };
            validate::validate_until(
                &reviewer.engine,
                &*reviewer.discovery,
                &reviewer.schemas.shared(),
                &lookup,
                &object,
                Some(stop_at),
            )
        });
        match work.await {
            Ok(findings) => {
                let mut verdict = Verdict::default();
                verdict.add(findings);
                if !verdict.errors.is_empty() {
                    verdict.errors = vec![format!("metascript: {}", verdict.errors.join("; "))];
                }
                verdict
            }
            Err(error) => Verdict::refused(format!("metascript: validation failed: {error}")),
        }
    }
}

/// The ConfigMaps an admission review read, and those it did not read on purpose.
struct AdmissionConfigMaps {
    found: Vec<Value>,
    withheld: Vec<(String, String)>,
}

impl ConfigMapLookup for AdmissionConfigMaps {
    fn value(&self, namespace: &str, name: &str, key: &str) -> Option<Option<String>> {
        self.found.value(namespace, name, key)
    }

    fn withheld(&self, namespace: &str, name: &str) -> Option<String> {
        self.withheld
            .iter()
            .any(|(n, m)| n == namespace && m == name)
            .then(|| UNAUTHENTICATED.to_string())
    }
}
