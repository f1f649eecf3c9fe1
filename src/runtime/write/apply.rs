//! Carrying out a plan against the API: server-side apply for children, preconditioned deletes,
//! merge patches for metadata and status, and finalizer edits guarded by resourceVersion.

use crate::api::ServiceAccountRef;
use crate::object;
use crate::plan::outputs::{self, InvalidOutputs};
use crate::plan::{Claim, ClaimChange, Deletion, FinalizerChange, Plan, StatusChange};
use crate::reasons;
use crate::resources::ResourceType;
use crate::runtime::keys::ControllerId;
use crate::runtime::replicas::authority::Authority;
use crate::runtime::report::metrics::Metrics;
use crate::runtime::watch::decode::WrittenVersion;
use crate::runtime::watch::schemas::{FIRST_READ, LiveSchemas};
use crate::runtime::write::own_writes::OwnWrites;
use crate::store::ObjectStore;
use kube::api::{
    Api, DeleteParams, Patch, PatchParams, Preconditions, PropagationPolicy, ValidationDirective,
};
use serde_json::{Value, json};
use std::sync::Arc;
use tracing::Instrument as _;

#[derive(Debug, thiserror::Error)]
pub(crate) enum ApplyError {
    #[error("{action} {object}: {source}")]
    Api {
        action: &'static str,
        object: String,
        #[source]
        source: kube::Error,
    },
    #[error(
        "{action} {object}: this replica may not write it now (it is not the leader, or another \
         replica owns it, or its lease lapsed)"
    )]
    NotWriter {
        action: &'static str,
        object: String,
    },
    /// A child to be created exists after all: made after the cache was read.
    #[error(
        "{object} exists but was not in the operator's cache when the sync was planned (it was \
         just made); nothing more was written, and the retry decides by the rule's `adopt` policy"
    )]
    Appeared { object: String },
    /// An object of the plan breaks its type's schema: nothing of the plan was written.
    #[error("nothing of this sync was written: {0}")]
    Invalid(#[from] InvalidOutputs),
    #[error("{object} is of type {kind}.{api_version}, which the controller does not declare")]
    UnknownType {
        object: String,
        kind: String,
        api_version: String,
    },
}

impl ApplyError {
    /// A short PascalCase reason for Events and metrics: `NamespaceTerminating` when the
    /// write's namespace is being deleted, `Forbidden` when RBAC refused the write (the API's
    /// message names the verb, the resource and the identity), `HandedOver` when this replica
    /// may no longer write it, else `ApplyFailed`.
    pub(crate) fn reason(&self) -> &'static str {
        match self {
            _ if self.is_namespace_terminating() => reasons::NAMESPACE_TERMINATING,
            ApplyError::Api {
                source: kube::Error::Api(status),
                ..
            } if status.code == 403 => reasons::FORBIDDEN,
            ApplyError::NotWriter { .. } => reasons::HANDED_OVER,
            ApplyError::Invalid(_) => reasons::SCHEMA_VIOLATION,
            _ => reasons::APPLY_FAILED,
        }
    }

    /// Whether the API server refused to create an object because its namespace is being
    /// deleted (a 403 whose cause says so): not RBAC, and nothing the controller can mend.
    /// The namespace's deletion takes the object's owner along, or, for an owner outside it
    /// (a cluster-scoped parent), a retry after the namespace is gone makes the object again.
    pub(crate) fn is_namespace_terminating(&self) -> bool {
        matches!(
            self,
            ApplyError::Api { source: kube::Error::Api(status), .. }
                if status.code == 403
                    && status.details.as_ref().is_some_and(|details| {
                        details
                            .causes
                            .iter()
                            .any(|cause| cause.reason == "NamespaceTerminating")
                    })
        )
    }
}

/// Who a controller's writes are sent as: the operator itself, or a ServiceAccount it
/// impersonates (a client of its own, whose requests carry `Impersonate-User`).
#[derive(Clone)]
pub struct Writer {
    pub client: kube::Client,
    pub identity: Option<ServiceAccountRef>,
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.identity {
            Some(account) => write!(f, "Writer({})", account.username()),
            None => f.write_str("Writer(operator)"),
        }
    }
}

#[derive(Clone)]
pub struct Applier {
    metrics: Metrics,
    authority: Arc<Authority>,
    pub own_writes: Arc<OwnWrites>,
    /// What a plan's objects are checked against before any of them is written.
    schemas: Arc<LiveSchemas>,
    /// Where the objects a plan replaces are read from (`oldSelf` to transition rules).
    observed: Arc<dyn ObjectStore + Send + Sync>,
}

/// What a plan's writes left behind: the resourceVersion each written object has now (the
/// version the API server answered the last write to it with), and whether anything was
/// deleted.
#[derive(Debug, Default)]
pub(crate) struct Written {
    pub versions: Vec<(object::ObjectKey, String)>,
    pub deleted: bool,
}

impl Written {
    fn note(&mut self, subject: &Value, version: &Option<String>) {
        if let Some(version) = version {
            self.versions
                .push((object::ObjectKey::of(subject), version.clone()));
        }
    }
}

fn advance(version: &mut String, new: Option<String>) {
    if let Some(new) = new {
        *version = new;
    }
}

/// The object a plan is about, the types of its children, and the controller writing (as
/// whom).
pub(crate) struct PlanTarget<'a> {
    pub object: &'a Value,
    pub resource: &'a ResourceType,
    pub child_types: &'a [ResourceType],
    pub controller: &'a ControllerId,
    pub writer: &'a Writer,
}

impl Applier {
    /// Every write request is counted in `metrics`, per controller, so "nothing changed" can be
    /// checked as "nothing written".
    /// Writes only while `authority` allows (the leader; sharded, the owner of the item the
    /// work acts for): checked before every request, so a replica whose lease lapsed or whose
    /// item moved stops in the middle of a plan.
    ///
    /// What a plan writes is checked against `schemas` first, with the objects it replaces
    /// read from `observed`.
    pub(crate) fn new(
        metrics: Metrics,
        authority: Arc<Authority>,
        own_writes: OwnWrites,
        schemas: Arc<LiveSchemas>,
        observed: Arc<dyn ObjectStore + Send + Sync>,
    ) -> Applier {
        Applier {
            metrics,
            authority,
            own_writes: Arc::new(own_writes),
            schemas,
            observed,
        }
    }

    fn may_write(&self, action: &'static str, subject: impl ToString) -> Result<(), ApplyError> {
        if self.authority.may_write() {
            Ok(())
        } else {
            self.metrics.shard_refused_writes.inc();
            Err(ApplyError::NotWriter {
                action,
                object: subject.to_string(),
            })
        }
    }

    /// Patches other than apply still name the controller's field manager, so every field the
    /// operator writes is attributed in managedFields.
    fn params(&self, target: &PlanTarget<'_>) -> PatchParams {
        PatchParams {
            field_manager: Some(target.controller.field_manager()),
            ..PatchParams::default()
        }
    }

    fn api(
        &self,
        target: &PlanTarget<'_>,
        resource: &ResourceType,
        namespace: Option<&str>,
    ) -> Api<WrittenVersion> {
        let (client, api_resource) = (target.writer.client.clone(), resource.api_resource());
        match namespace {
            Some(namespace) if resource.namespaced => {
                Api::namespaced_with(client, namespace, &api_resource)
            }
            _ => Api::all_with(client, &api_resource),
        }
    }

    /// Executes a plan. Order matters: the finalizer is added before any child exists and
    /// removed only after everything else succeeded, so a crash in between never leaves a
    /// child without the cleanup that was promised.
    pub(crate) async fn execute(
        &self,
        target: &PlanTarget<'_>,
        plan: &Plan,
    ) -> Result<Written, ApplyError> {
        self.check(target, plan).await?;
        let mut written = Written::default();
        // Each write to the target moves its resourceVersion; the finalizer edits test the
        // version they expect, so they must see the one the previous write produced.
        let mut version = object::str_at(target.object, "/metadata/resourceVersion")
            .unwrap_or_default()
            .to_string();
        let mut metadata_patch = plan.metadata_patch.as_ref();
        if let Some(FinalizerChange::Add(finalizer)) = &plan.finalizer {
            let new = match metadata_patch.take() {
                // One write where two are due: labels and annotations go with the finalizer.
                Some(patch) => {
                    self.add_finalizer_with_metadata(target, &version, finalizer, patch)
                        .await?
                }
                None => {
                    self.edit_finalizer(target, &version, finalizer, true)
                        .await?
                }
            };
            written.note(target.object, &new);
            advance(&mut version, new);
        }
        for claim in &plan.claims {
            if let Some(new) = self.claim(target, claim).await? {
                written.versions.push((claim.key.clone(), new));
            }
        }
        for child in &plan.apply {
            if plan.unseen.contains(&object::ObjectKey::of(child)) {
                self.still_missing(target, child).await?;
            }
            let new = self.apply_child(target, child).await?;
            written.note(child, &new);
        }
        for deletion in &plan.delete {
            self.delete(target, deletion).await?;
            written.deleted = true;
        }
        if let Some(patch) = metadata_patch {
            let api = self.api(target, target.resource, object::namespace(target.object));
            let (params, patch) = (self.params(target), Patch::Merge(patch));
            let request = api.patch(object::name(target.object), &params, &patch);
            let new = unless_gone(
                self.write(
                    "patch metadata of",
                    target.object,
                    target.controller,
                    request,
                )
                .await,
            )?;
            written.note(target.object, &new);
            advance(&mut version, new);
        }
        if let Some(status) = &plan.status {
            let new = unless_gone(self.write_status(target, status).await)?;
            written.note(target.object, &new);
            advance(&mut version, new);
        }
        if let Some(FinalizerChange::Remove(finalizer)) = &plan.finalizer {
            let new = self
                .edit_finalizer(target, &version, finalizer, false)
                .await?;
            written.note(target.object, &new);
        }
        Ok(written)
    }

    /// Checks what the plan writes against the schemas of its types ([`outputs`]) before any
    /// of it is written. The API server stays the last word (children are applied with strict
    /// field validation); this check says what is wrong in the terms of the hook's output, all
    /// of it at once, and keeps a plan from being written half.
    async fn check(&self, target: &PlanTarget<'_>, plan: &Plan) -> Result<(), ApplyError> {
        // Only the hook's own status is checked (see `outputs`): a merge or conditions are
        // the operator's.
        let writes_status = plan.writes_hook_status();
        if plan.apply.is_empty() && !writes_status {
            return Ok(());
        }
        let written_types = plan
            .apply
            .iter()
            .filter_map(|child| target.child_types.iter().find(|t| t.describes(child)));
        let status_type = writes_status.then_some(target.resource);
        self.schemas
            .follow(written_types.chain(status_type), FIRST_READ)
            .await;
        let observed = |desired: &Value| {
            let resource = target.child_types.iter().find(|t| t.describes(desired))?;
            self.observed
                .get(resource, object::namespace(desired), object::name(desired))
        };
        let started = std::time::Instant::now();
        let checked = outputs::check(plan, target.object, &observed, self.schemas.schemas());
        self.metrics
            .count_output_check(target.controller, started.elapsed());
        for note in checked? {
            tracing::debug!(controller = %target.controller, %note, "a rule of an output is left to the API server");
        }
        Ok(())
    }

    /// Sends one write and remembers the resourceVersion it produced, so the watch event it
    /// causes can be told from someone else's change (see [`OwnWrites`]).
    async fn write(
        &self,
        action: &'static str,
        subject: &Value,
        controller: &ControllerId,
        request: impl std::future::Future<Output = Result<WrittenVersion, kube::Error>>,
    ) -> Result<Option<String>, ApplyError> {
        let key = object::ObjectKey::of(subject);
        self.may_write(action, &key)?;
        self.metrics.count_write(controller);
        self.own_writes.begin(controller, key.clone());
        let span = crate::telemetry::span!(
            "write",
            action,
            object = crate::telemetry::bounded(&key.to_string())
        );
        let written = request.instrument(span.clone()).await;
        if let Err(error) = &written {
            crate::telemetry::fail(&span, &refusal(error));
        }
        let version = written
            .as_ref()
            .ok()
            .and_then(|w| w.resource_version().map(str::to_owned));
        let from = object::str_at(subject, "/metadata/resourceVersion");
        self.own_writes
            .finish(controller, key.clone(), from, version.clone());
        written.map_err(|source| ApplyError::Api {
            action,
            object: key.to_string(),
            source,
        })?;
        Ok(version)
    }

    async fn apply_child(
        &self,
        target: &PlanTarget<'_>,
        child: &Value,
    ) -> Result<Option<String>, ApplyError> {
        let resource = target
            .child_types
            .iter()
            .find(|t| t.describes(child))
            .ok_or_else(|| ApplyError::UnknownType {
                object: object::ObjectKey::of(child).to_string(),
                kind: object::kind(child).to_string(),
                api_version: object::api_version(child).to_string(),
            })?;
        let api = self.api(target, resource, object::namespace(child));
        // Strict: a field the type does not have is refused, not dropped without a word.
        let params = PatchParams {
            field_validation: Some(ValidationDirective::Strict),
            ..PatchParams::apply(&target.controller.field_manager()).force()
        };
        self.write(
            "apply",
            child,
            target.controller,
            api.patch(object::name(child), &params, &Patch::Apply(child)),
        )
        .await
    }

    /// Makes sure a child the cache did not hold when the plan was checked for take-overs is
    /// still missing: applied, it would merge into an object made meanwhile. One found fails
    /// the sync; its retry, with the object cached, judges it by the rule's `adopt` policy. A
    /// read the account may not make is no evidence either way, and the apply goes ahead.
    async fn still_missing(
        &self,
        target: &PlanTarget<'_>,
        child: &Value,
    ) -> Result<(), ApplyError> {
        let resource = Self::child_type(target, &object::ObjectKey::of(child))?;
        let api = self.api(target, resource, object::namespace(child));
        match api.get_metadata_opt(object::name(child)).await {
            Ok(Some(_)) => Err(ApplyError::Appeared {
                object: object::ObjectKey::of(child).to_string(),
            }),
            Ok(None) | Err(_) => Ok(()),
        }
    }

    /// The declared child type of an object named by its key.
    fn child_type<'t>(
        target: &'t PlanTarget<'_>,
        key: &object::ObjectKey,
    ) -> Result<&'t ResourceType, ApplyError> {
        target
            .child_types
            .iter()
            .find(|t| t.kind == key.kind && t.api_version == key.api_version)
            .ok_or_else(|| ApplyError::UnknownType {
                object: key.to_string(),
                kind: key.kind.clone(),
                api_version: key.api_version.clone(),
            })
    }

    /// Adopts or releases one object with a JSON patch that first tests the resourceVersion it
    /// was judged at, so a concurrent change (another controller adopting it first, its labels
    /// moving) fails the write instead of being overwritten; the sync is then retried and judges
    /// the object as it is.
    async fn claim(
        &self,
        target: &PlanTarget<'_>,
        claim: &Claim,
    ) -> Result<Option<String>, ApplyError> {
        let key = &claim.key;
        let resource = Self::child_type(target, key)?;
        let test = json!({"op": "test", "path": "/metadata/resourceVersion", "value": claim.resource_version});
        let (action, edit) = match &claim.change {
            ClaimChange::Adopt {
                reference,
                first: true,
            } => (
                "adopt",
                json!({"op": "add", "path": "/metadata/ownerReferences", "value": [reference]}),
            ),
            ClaimChange::Adopt { reference, .. } => (
                "adopt",
                json!({"op": "add", "path": "/metadata/ownerReferences/-", "value": reference}),
            ),
            ClaimChange::Release { index } => (
                "release",
                json!({"op": "remove", "path": format!("/metadata/ownerReferences/{index}")}),
            ),
        };
        let patch: json_patch::Patch =
            serde_json::from_value(json!([test, edit])).expect("a valid JSON patch");
        let api = self.api(target, resource, key.namespace.as_deref());
        let (params, patch) = (self.params(target), Patch::<Value>::Json(patch));
        let subject = json!({
            "apiVersion": key.api_version, "kind": key.kind,
            "metadata": {"name": key.name, "namespace": key.namespace},
        });
        let request = api.patch(&key.name, &params, &patch);
        self.write(action, &subject, target.controller, request)
            .await
    }

    async fn delete(&self, target: &PlanTarget<'_>, deletion: &Deletion) -> Result<(), ApplyError> {
        let key = &deletion.key;
        let resource = Self::child_type(target, key)?;
        let api = self.api(target, resource, key.namespace.as_deref());
        let params = DeleteParams {
            preconditions: deletion.uid.clone().map(|uid| Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            propagation_policy: Some(PropagationPolicy::Background),
            ..DeleteParams::default()
        };
        self.may_write("delete", key)?;
        self.metrics.count_write(target.controller);
        let span = crate::telemetry::span!(
            "write",
            action = "delete",
            object = crate::telemetry::bounded(&key.to_string())
        );
        match api
            .delete(&key.name, &params)
            .instrument(span.clone())
            .await
        {
            Ok(_) => Ok(()),
            // Already gone, or replaced by a newer object of the same name: nothing to do.
            Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => Ok(()),
            Err(source) => {
                crate::telemetry::fail(&span, &refusal(&source));
                Err(ApplyError::Api {
                    action: "delete",
                    object: key.to_string(),
                    source,
                })
            }
        }
    }

    async fn write_status(
        &self,
        target: &PlanTarget<'_>,
        status: &StatusChange,
    ) -> Result<Option<String>, ApplyError> {
        let api = self.api(target, target.resource, object::namespace(target.object));
        let name = object::name(target.object);
        let params = self.params(target);
        let patch: Patch<Value> = match status {
            // `add` on an existing member replaces it: the whole status becomes the hook's.
            StatusChange::Replace(value) => Patch::Json(
                serde_json::from_value(json!([{"op": "add", "path": "/status", "value": value}]))
                    .expect("a valid JSON patch"),
            ),
            StatusChange::Merge(value) => Patch::Merge(json!({"status": value})),
            // A resourceVersion in a patch is a precondition: a conflict, not a lost update.
            StatusChange::Conditions {
                conditions,
                resource_version,
            } => Patch::Merge(json!({
                "metadata": {"resourceVersion": resource_version},
                "status": {"conditions": conditions},
            })),
        };
        if target.resource.has_status {
            let request = api.patch_status(name, &params, &patch);
            self.write("patch status of", target.object, target.controller, request)
                .await
        } else {
            let request = api.patch(name, &params, &patch);
            self.write("patch status of", target.object, target.controller, request)
                .await
        }
    }

    /// Adds a finalizer and patches labels and annotations in one merge patch. The patch
    /// carries the resourceVersion the finalizer list was read at, which the API server takes
    /// as a precondition, so a concurrent edit of the list fails (and is retried) instead of
    /// being overwritten by the whole list this patch sets.
    async fn add_finalizer_with_metadata(
        &self,
        target: &PlanTarget<'_>,
        version: &str,
        finalizer: &str,
        metadata_patch: &Value,
    ) -> Result<Option<String>, ApplyError> {
        let mut finalizers = object::finalizers(target.object);
        if !finalizers.contains(&finalizer) {
            finalizers.push(finalizer);
        }
        let mut patch = metadata_patch.clone();
        if let Some(metadata) = patch.get_mut("metadata").and_then(Value::as_object_mut) {
            metadata.insert("finalizers".into(), json!(finalizers));
            metadata.insert("resourceVersion".into(), json!(version));
        }
        let api = self.api(target, target.resource, object::namespace(target.object));
        let (params, patch) = (self.params(target), Patch::Merge(&patch));
        let request = api.patch(object::name(target.object), &params, &patch);
        self.write(
            "add finalizer and patch metadata of",
            target.object,
            target.controller,
            request,
        )
        .await
    }

    /// Adds or removes one finalizer with a JSON patch that first tests the resourceVersion, so
    /// a concurrent edit of the list fails (and is retried) instead of being overwritten.
    async fn edit_finalizer(
        &self,
        target: &PlanTarget<'_>,
        version: &str,
        finalizer: &str,
        add: bool,
    ) -> Result<Option<String>, ApplyError> {
        let current: Vec<&str> = object::finalizers(target.object);
        let test = json!({"op": "test", "path": "/metadata/resourceVersion", "value": version});
        let edit = match (add, current.iter().position(|f| *f == finalizer)) {
            (true, Some(_)) | (false, None) => return Ok(None),
            (true, None)
                if current.is_empty()
                    && target.object.pointer("/metadata/finalizers").is_none() =>
            {
                json!({"op": "add", "path": "/metadata/finalizers", "value": [finalizer]})
            }
            (true, None) => {
                json!({"op": "add", "path": "/metadata/finalizers/-", "value": finalizer})
            }
            (false, Some(index)) => {
                json!({"op": "remove", "path": format!("/metadata/finalizers/{index}")})
            }
        };
        let patch: json_patch::Patch =
            serde_json::from_value(json!([test, edit])).expect("a valid JSON patch");
        let api = self.api(target, target.resource, object::namespace(target.object));
        let action = if add {
            "add finalizer to"
        } else {
            "remove finalizer from"
        };
        let (params, patch) = (self.params(target), Patch::<Value>::Json(patch));
        let request = api.patch(object::name(target.object), &params, &patch);
        self.write(action, target.object, target.controller, request)
            .await
    }
}

/// A patch of the target or parent itself that finds it gone (deleted while its sync ran) has
/// nothing left to do, and is no failure: its deletion reaches the controller through the watch.
fn unless_gone(written: Result<Option<String>, ApplyError>) -> Result<Option<String>, ApplyError> {
    match written {
        Err(ApplyError::Api {
            source: kube::Error::Api(status),
            ..
        }) if status.code == 404 => Ok(None),
        other => other,
    }
}

/// What a write span says of a failed write: the API server's status code and reason, not
/// its message, which may quote the object (the sync's Event and condition have the message).
fn refusal(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => format!("{} {}", status.code, status.reason),
        _ => "no answer from the API server".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(code: u16) -> Result<Option<String>, ApplyError> {
        Err(ApplyError::Api {
            action: "patch status of",
            object: "SecureSecretPropagation.v1 p".into(),
            source: kube::Error::Api(
                kube::core::Status::failure("refused", "NotFound")
                    .with_code(code)
                    .boxed(),
            ),
        })
    }

    /// A create refused in a namespace being deleted, as the API server answers it.
    fn refused_in_terminating_namespace() -> ApplyError {
        let mut status = kube::core::Status::failure(
            "services \"web-0\" is forbidden: unable to create new content in namespace shop \
             because it is being terminated",
            "Forbidden",
        )
        .with_code(403);
        status.details = Some(kube::core::response::StatusDetails {
            name: "web-0".into(),
            group: String::new(),
            kind: "services".into(),
            uid: String::new(),
            causes: vec![kube::core::response::StatusCause {
                reason: "NamespaceTerminating".into(),
                message: "namespace shop is being terminated".into(),
                field: "metadata.namespace".into(),
            }],
            retry_after_seconds: 0,
        });
        ApplyError::Api {
            action: "apply",
            object: "Service.v1 shop/web-0".into(),
            source: kube::Error::Api(status.boxed()),
        }
    }

    #[test]
    fn a_create_in_a_namespace_being_deleted_is_told_from_an_rbac_refusal() {
        let terminating = refused_in_terminating_namespace();
        assert!(terminating.is_namespace_terminating());
        assert_eq!(terminating.reason(), reasons::NAMESPACE_TERMINATING);
        let problem = crate::runtime::report::problem::Problem::from(terminating);
        assert!(problem.is_namespace_terminating());
        assert_eq!(problem.reason, reasons::NAMESPACE_TERMINATING);

        let rbac = refused(403).unwrap_err();
        assert!(!rbac.is_namespace_terminating());
        assert_eq!(rbac.reason(), reasons::FORBIDDEN);
        assert!(!crate::runtime::report::problem::Problem::from(rbac).is_namespace_terminating());
    }

    #[test]
    fn a_patch_of_an_object_deleted_meanwhile_is_no_failure_but_others_are() {
        assert!(matches!(unless_gone(refused(404)), Ok(None)));
        assert_eq!(
            unless_gone(refused(409)).unwrap_err().reason(),
            reasons::APPLY_FAILED
        );
        assert_eq!(
            unless_gone(refused(403)).unwrap_err().reason(),
            reasons::FORBIDDEN
        );
        assert_eq!(unless_gone(Ok(Some("7".into()))).unwrap(), Some("7".into()));
    }
}
