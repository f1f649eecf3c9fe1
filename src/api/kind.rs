//! What every kind of controller is, as the shared layers name it: its names, its hooks and what
//! each hook's request and response hold, and what loading reads of a controller object. Each
//! kind declares these once, in its own folder (`crate::kinds`); nothing below that switches on
//! a kind.

use super::{
    Compatibility, EndpointConfig, Hook, InlineTest, Library, ResourceRef, Rollout,
    RolloutStrategy, ServiceAccountRef,
};
use crate::selector::{AnnotationSelector, LabelSelector};
use std::fmt;
use std::hash::{Hash, Hasher};
use std::time::Duration;

/// The names of one kind of controller, and its hooks.
#[derive(Debug)]
pub struct KindInfo {
    /// Lower case, for field managers, metric labels, provenance and logs: `decorator`.
    pub short: &'static str,
    /// The Kubernetes kind of the controller objects: `DecoratorController`.
    pub object_kind: &'static str,
    /// Their resource (plural) in `metascript.dev/v1alpha1`: `decoratorcontrollers`.
    pub plural: &'static str,
    /// kubectl's short name of the resource: `dec`.
    pub short_name: &'static str,
    /// What its work is called in Events (`Sync`, `Map`).
    pub action: &'static str,
    /// Its hooks. The first is required, and is the one a test case without `hook:` calls.
    pub hooks: &'static [HookKind],
    /// Which request fields hold an object of a type the controller's spec names, and where
    /// (`("object", "spec.resources")`: the first rule's type): what editors complete below
    /// `request.object`.
    pub request_types: &'static [(&'static str, &'static str)],
}

/// One kind of controller. Compared by its short name.
#[derive(Clone, Copy)]
pub struct KindName(pub &'static KindInfo);

/// A kind for the tests of layers below the kinds (which may not name a real one).
#[cfg(test)]
pub(crate) const TEST_KIND: KindName = KindName(&KindInfo {
    short: "test",
    object_kind: "TestController",
    plural: "testcontrollers",
    short_name: "test",
    action: "Sync",
    hooks: &[],
    request_types: &[],
});

impl KindName {
    pub(crate) fn as_str(self) -> &'static str {
        self.0.short
    }

    pub(crate) fn object_kind(self) -> &'static str {
        self.0.object_kind
    }

    pub fn plural(self) -> &'static str {
        self.0.plural
    }

    pub(crate) fn short_name(self) -> &'static str {
        self.0.short_name
    }

    pub(crate) fn action(self) -> &'static str {
        self.0.action
    }

    pub(crate) fn hooks(self) -> &'static [HookKind] {
        self.0.hooks
    }

    /// See [`KindInfo::request_types`].
    pub(crate) fn request_types(self) -> &'static [(&'static str, &'static str)] {
        self.0.request_types
    }

    /// The hook of this kind with this name.
    pub(crate) fn hook(self, name: &str) -> Option<HookKind> {
        self.hooks()
            .iter()
            .copied()
            .find(|hook| hook.as_str() == name)
    }

    /// Its hooks' names, for messages: `sync, finalize or customize`.
    pub(crate) fn hook_names(self) -> String {
        let names: Vec<&str> = self.hooks().iter().map(|h| h.as_str()).collect();
        match names.split_last() {
            Some((last, [])) => last.to_string(),
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
            None => String::new(),
        }
    }
}

impl PartialEq for KindName {
    fn eq(&self, other: &Self) -> bool {
        self.0.short == other.0.short
    }
}

impl Eq for KindName {}

impl Hash for KindName {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.short.hash(state)
    }
}

impl PartialOrd for KindName {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for KindName {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.short.cmp(other.0.short)
    }
}

impl fmt::Debug for KindName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.object_kind)
    }
}

impl fmt::Display for KindName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.object_kind)
    }
}

/// One field of a hook request or response, as editor definitions document it.
#[derive(Debug)]
pub struct Field {
    pub name: &'static str,
    /// Its type in LuaLS notation.
    pub lua_type: &'static str,
    pub doc: &'static str,
    /// A response's list of whole objects (children to apply, outputs to keep): held to the
    /// sizes the API server accepts before anything is planned from it.
    pub objects: bool,
}

impl Field {
    pub(crate) const fn new(
        name: &'static str,
        lua_type: &'static str,
        doc: &'static str,
    ) -> Field {
        Field {
            name,
            lua_type,
            doc,
            objects: false,
        }
    }

    /// A response field holding a flat list of objects.
    pub(crate) const fn objects(name: &'static str, doc: &'static str) -> Field {
        Field {
            name,
            lua_type: "table<string, any>[]",
            doc,
            objects: true,
        }
    }
}

/// What one hook of one kind is: its name, what its request holds and what its response may.
#[derive(Debug)]
pub struct HookContract {
    pub kind: KindName,
    pub name: &'static str,
    /// The request field holding the object a call is about (names recorded cases).
    pub subject: &'static str,
    pub request: &'static [Field],
    pub response: &'static [Field],
}

/// One hook of one kind of controller; used in every error message. Compared by kind and name.
#[derive(Clone, Copy)]
pub struct HookKind(pub &'static HookContract);

impl HookKind {
    pub(crate) fn as_str(self) -> &'static str {
        self.0.name
    }

    pub(crate) fn kind(self) -> KindName {
        self.0.kind
    }

    pub(crate) fn contract(self) -> &'static HookContract {
        self.0
    }

    /// The names of the fields its response may have.
    pub(crate) fn response_fields(self) -> impl Iterator<Item = &'static str> {
        self.0.response.iter().map(|field| field.name)
    }
}

impl PartialEq for HookKind {
    fn eq(&self, other: &Self) -> bool {
        self.0.name == other.0.name && self.0.kind == other.0.kind
    }
}

impl Eq for HookKind {}

impl Hash for HookKind {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.kind.hash(state);
        self.0.name.hash(state);
    }
}

impl PartialOrd for HookKind {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for HookKind {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.0.kind, self.0.name).cmp(&(other.0.kind, other.0.name))
    }
}

impl fmt::Debug for HookKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.0.kind.as_str(), self.0.name)
    }
}

impl fmt::Display for HookKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.name)
    }
}

/// Request fields more than one kind's hooks share.
pub(crate) mod fields {
    use super::Field;

    pub(crate) const CONTROLLER: Field =
        Field::new("controller", "table<string, any>", "The controller object.");
    pub(crate) const PARENT: Field =
        Field::new("parent", "table<string, any>", "The parent object.");
    pub(crate) const RELATED: Field = Field::new(
        "related",
        "table<string, table<string, table<string, any>>>",
        "Related objects by `<Kind>.<apiVersion>`, then by name.",
    );
    pub(crate) const FINALIZING: Field = Field::new(
        "finalizing",
        "boolean",
        "Whether the object is being deleted.",
    );
    pub(crate) const STATUS: Field = Field::new(
        "status",
        "table<string, any>",
        "The object's status; null leaves it as it is.",
    );
    pub(crate) const RESYNC_AFTER_SECONDS: Field = Field::new(
        "resyncAfterSeconds",
        "number",
        "Sync again after this many seconds.",
    );
    pub(crate) const FINALIZED: Field = Field::new(
        "finalized",
        "boolean",
        "Whether finalizing is done (finalize hook).",
    );
    pub(crate) const RELATED_RESOURCES: Field = Field::new(
        "relatedResources",
        "table<string, any>[]",
        "Rules for related objects (customize hook).",
    );
}

/// What loading needs from a controller object, whatever its kind.
#[derive(Clone, Debug)]
pub struct ControllerSpec {
    pub generation: Option<i64>,
    /// Every type the controller names (its hooks' reads included); each is resolved and
    /// watched before it runs.
    pub types: Vec<ResourceRef>,
    pub hooks: Vec<(HookKind, Hook)>,
    /// `spec.libraries`.
    pub libraries: Vec<Library>,
    pub resync_period: Option<Duration>,
    /// Whom its writes impersonate (none: the operator itself, where allowed), or why the
    /// spec names no account.
    pub service_account: Result<Option<ServiceAccountRef>, super::InvalidAccount>,
    /// The types its hooks may read (`spec.reads`); also in `types`.
    pub reads: Vec<ResourceRef>,
    /// `spec.tests`.
    pub tests: Vec<InlineTest>,
    /// The child types whose `updateStrategy` is left to its default, `OnDelete`, by path
    /// (`spec.attachments[0]`): their children are created, then never updated, which surprises
    /// whoever expected a changed hook output to reach them (`validate` and `render` say so).
    pub on_delete_by_default: Vec<String>,
    /// `spec.endpointConfigs`: per-host webhook credentials.
    pub endpoint_configs: Vec<EndpointConfig>,
    /// `spec.compatibility`, or its defaults.
    pub compatibility: Compatibility,
    /// `spec.rollout`, or its defaults (`Immediate`).
    pub rollout: Rollout,
    /// `spec.budget`, as the controller sets it (the operator's defaults and ceiling apply).
    pub budget: Option<super::Budget>,
    /// The types in `types` whose objects the controller needs only where these label
    /// selectors (kubectl syntax) match: watched one watch per selector, not whole. A type not
    /// named here is watched whole.
    pub label_scoped: Vec<(ResourceRef, String)>,
    /// The types in `types` a sharded replica keeps only its share of: the objects its rules
    /// select whose items the replica owns. A type not named here is kept whole.
    pub shard_scoped: Vec<(ResourceRef, Vec<Selection>)>,
}

/// The paths of the child rules under `field` whose `updateStrategy` is not set.
pub(crate) fn on_delete_by_default(
    field: &str,
    unset: impl IntoIterator<Item = bool>,
) -> Vec<String> {
    unset
        .into_iter()
        .enumerate()
        .filter(|(_, unset)| *unset)
        .map(|(index, _)| format!("{field}[{index}]"))
        .collect()
}

impl ControllerSpec {
    /// The ConfigMaps (namespace, name) its scripts and libraries are read from.
    pub(crate) fn config_maps(&self) -> Vec<(String, String)> {
        self.config_map_refs()
            .map(|r| (r.namespace.clone(), r.name.clone()))
            .collect()
    }

    /// The Secrets and ConfigMaps its webhooks' credentials are read from, each once.
    pub(crate) fn credential_sources(&self) -> Vec<super::CredentialSource> {
        let hooks = self
            .hooks
            .iter()
            .filter_map(|(_, hook)| hook.webhook.as_ref())
            .flat_map(|webhook| webhook.credentials().sources());
        let endpoints = self
            .endpoint_configs
            .iter()
            .flat_map(|endpoint| endpoint.credentials().sources());
        let mut sources: Vec<super::CredentialSource> = hooks.chain(endpoints).collect();
        sources.sort();
        sources.dedup();
        sources
    }

    /// Every `configMapRef` of its hooks and libraries.
    pub(crate) fn config_map_refs(&self) -> impl Iterator<Item = &super::ConfigMapKeyRef> + Clone {
        let hooks = self
            .hooks
            .iter()
            .filter_map(|(_, hook)| hook.script.as_ref()?.config_map_ref.as_ref());
        let libraries = self
            .libraries
            .iter()
            .filter_map(|library| library.config_map_ref.as_ref());
        hooks.chain(libraries)
    }

    /// The hooks as `(kind, &hook)`, as `ControllerHooks::load` takes them.
    pub(crate) fn named_hooks(&self) -> Vec<(HookKind, &Hook)> {
        self.hooks
            .iter()
            .map(|(kind, hook)| (*kind, hook))
            .collect()
    }
}

/// The longest `resyncPeriodSeconds` honoured (a year), as for a hook's `resyncAfterSeconds`:
/// a period near `i64::MAX` would overflow the timer that schedules it.
pub(super) const MAX_RESYNC_PERIOD_SECONDS: u64 = 365 * 24 * 3600;

/// Declares a kind's spec: the fields of its own, given first, then `hooks` and the fields every
/// kind shares, written here once so their defaults and limits cannot drift apart (the docs of
/// the three that say something of the kind come with it). Not
/// `#[serde(flatten)]`: a flattened struct loses the field path of a bad value
/// (`spec.rollout.strategy: unknown variant` would read `spec: …`), and paths are what
/// `validate` and admission answer with. Also writes `common`, the shared fields for
/// [`CommonSpec::spec`].
macro_rules! controller_spec {
    (
        $(#[$attr:meta])*
        pub struct $spec:ident {
            $($own:tt)*
        }
        $(#[$resync:meta])*
        resync_period_seconds;
        $(#[$hooks_doc:meta])*
        hooks: $hooks:ty;
        $(#[$account:meta])*
        service_account_name;
    ) => {
        $(#[$attr])*
        pub struct $spec {
            $($own)*
            $(#[$resync])*
            #[serde(default, skip_serializing_if = "Option::is_none")]
            #[schemars(range(min = 1))]
            pub resync_period_seconds: Option<i64>,
            /// Types the hooks may read with the `get` and `list` helpers, served from the operator's
            /// shared watch caches (watched from load). Every read is tracked: a change to what a call
            /// read re-syncs exactly the work that read it. Secrets cannot be declared.
            #[serde(default, skip_serializing_if = "Vec::is_empty")]
            pub reads: Vec<$crate::api::ResourceRef>,
            /// Code shared by the hooks: each script hook loads the libraries of its language, in
            /// this order, before it runs (`docs/scripting.md#libraries`).
            #[serde(default, skip_serializing_if = "Vec::is_empty")]
            #[schemars(length(max = 16))]
            pub libraries: Vec<$crate::api::Library>,
            $(#[$hooks_doc])*
            pub hooks: $hooks,
            $(#[$account])*
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub service_account_name: Option<String>,
            /// The namespace of `serviceAccountName`, required with it: who may use an account (verb
            /// `use` on `serviceaccounts.metascript.dev`) is granted in its namespace.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub service_account_namespace: Option<String>,
            /// Test cases for the hooks (at most 32): run before the controller is admitted (a failing
            /// one rejects it), before any new revision of it serves, and by `metascript validate`.
            #[serde(default, skip_serializing_if = "Vec::is_empty")]
            #[schemars(length(max = 32))]
            pub tests: Vec<$crate::api::InlineTest>,
            /// Credentials and CA bundles for the webhook hooks on each host, read with the
            /// controller's ServiceAccount; a hook that sets any of its own uses those instead.
            #[serde(default, skip_serializing_if = "Vec::is_empty")]
            pub endpoint_configs: Vec<$crate::api::EndpointConfig>,
            /// Behaviour kept from the tool the controller was moved from (`metascript convert` sets
            /// it); see `docs/migrating.md`.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub compatibility: Option<$crate::api::Compatibility>,
            /// How a new revision of this controller (its spec or the scripts it runs) reaches the
            /// objects it acts on: at once (the default), evaluated in the shadows until promoted, or
            /// as a canary serving a growing share; see `docs/operations.md#staged-rollouts`.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub rollout: Option<$crate::api::Rollout>,
            /// What the controller may cost per minute (hook CPU, writes) before its work is
            /// paced; see `docs/operations.md#budgets`.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub budget: Option<$crate::api::Budget>,
        }

        impl $spec {
            /// The fields every kind shares, of a controller with `metadata`; see
            /// [`CommonSpec::on_delete_by_default`].
            pub(crate) fn common<'a>(
                &'a self,
                metadata: &'a kube::api::ObjectMeta,
                on_delete_by_default: Vec<String>,
            ) -> $crate::api::CommonSpec<'a> {
                $crate::api::CommonSpec {
                    metadata,
                    resync_period_seconds: self.resync_period_seconds,
                    reads: &self.reads,
                    libraries: &self.libraries,
                    service_account_name: self.service_account_name.as_deref(),
                    service_account_namespace: self.service_account_namespace.as_deref(),
                    tests: &self.tests,
                    on_delete_by_default,
                    endpoint_configs: &self.endpoint_configs,
                    compatibility: self.compatibility.as_ref(),
                    rollout: self.rollout.as_ref(),
                    budget: self.budget.as_ref(),
                }
            }
        }
    };
}
pub(crate) use controller_spec;

/// The parts of a spec every kind has, turned into a [`ControllerSpec`] by [`CommonSpec::spec`].
pub(crate) struct CommonSpec<'a> {
    pub metadata: &'a kube::api::ObjectMeta,
    pub resync_period_seconds: Option<i64>,
    pub reads: &'a [ResourceRef],
    pub libraries: &'a [Library],
    pub service_account_name: Option<&'a str>,
    pub service_account_namespace: Option<&'a str>,
    pub tests: &'a [InlineTest],
    /// See [`ControllerSpec::on_delete_by_default`].
    pub on_delete_by_default: Vec<String>,
    pub endpoint_configs: &'a [EndpointConfig],
    pub compatibility: Option<&'a Compatibility>,
    pub rollout: Option<&'a Rollout>,
    pub budget: Option<&'a super::Budget>,
}

impl CommonSpec<'_> {
    /// The spec of a controller that names `types`, each selected as it says (its reads are
    /// added, whole), and has `hooks`. `resyncPeriodSeconds` that is not positive means none.
    pub(crate) fn spec(
        self,
        types: impl IntoIterator<Item = (ResourceRef, Selects)>,
        hooks: Vec<(HookKind, &Hook)>,
    ) -> ControllerSpec {
        let selected: Vec<(ResourceRef, Selects)> = types
            .into_iter()
            .chain(self.reads.iter().map(|read| (read.clone(), Selects::Whole)))
            .collect();
        let finalizes = hooks.iter().any(|(kind, _)| kind.as_str() == "finalize")
            || self
                .metadata
                .finalizers
                .iter()
                .flatten()
                .any(|finalizer| finalizer == super::CLEANUP_FINALIZER);
        let label_scoped = label_scoped(&selected, finalizes);
        // A shadow revision is evaluated on every object its rules select, by one replica.
        let shadowed = self
            .rollout
            .is_some_and(|rollout| rollout.strategy == RolloutStrategy::Shadow);
        let shard_scoped = shard_scoped(&selected, finalizes || shadowed);
        let types = selected
            .into_iter()
            .map(|(reference, _)| reference)
            .collect();
        ControllerSpec {
            generation: self.metadata.generation,
            types,
            label_scoped,
            shard_scoped,
            hooks: hooks
                .into_iter()
                .map(|(kind, hook)| (kind, hook.clone()))
                .collect(),
            libraries: self.libraries.to_vec(),
            resync_period: self
                .resync_period_seconds
                .filter(|s| *s > 0)
                .map(|s| Duration::from_secs((s as u64).min(MAX_RESYNC_PERIOD_SECONDS))),
            service_account: ServiceAccountRef::from_spec(
                self.service_account_name,
                self.service_account_namespace,
            ),
            reads: self.reads.to_vec(),
            tests: self.tests.to_vec(),
            on_delete_by_default: self.on_delete_by_default,
            endpoint_configs: self.endpoint_configs.to_vec(),
            compatibility: self.compatibility.cloned().unwrap_or_default(),
            rollout: self.rollout.cloned().unwrap_or_default(),
            budget: self.budget.copied(),
        }
    }
}

/// How a controller selects the objects of one of its types, for [`CommonSpec::spec`].
#[derive(Clone, Debug)]
pub(crate) enum Selects {
    /// Every object of the type (children, inputs, reads).
    Whole,
    /// The objects a rule selects: the objects it acts on.
    Rule(Selection),
}

/// What a rule selects of its type's objects: those its label and annotation selectors match
/// (every object without either).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Selection {
    pub labels: Option<LabelSelector>,
    pub annotations: Option<AnnotationSelector>,
}

impl Selection {
    pub fn selects(&self, object: &serde_json::Value) -> bool {
        self.labels
            .as_ref()
            .is_none_or(|selector| selector.matches_labels_of(object))
            && self
                .annotations
                .as_ref()
                .is_none_or(|selector| selector.matches_annotations_of(object))
    }
}

/// The types a controller needs only where label selectors match (kubectl syntax): those whose
/// every mention in `types` has one the API server applies exactly as the operator does. A
/// rule's selector counts only for a controller without a finalize hook that never had one
/// ([`super::CLEANUP_FINALIZER`]): objects that stop matching must still be finalized, or have
/// its finalizer released, and a watch of what matches would not see them.
fn label_scoped(types: &[(ResourceRef, Selects)], finalizes: bool) -> Vec<(ResourceRef, String)> {
    let scoped: Vec<(&ResourceRef, Option<String>)> = types
        .iter()
        .map(|(reference, selects)| {
            let selector = match selects {
                Selects::Whole => None,
                Selects::Rule(_) if finalizes => None,
                Selects::Rule(selection) => selection
                    .labels
                    .as_ref()
                    .and_then(LabelSelector::server_side),
            };
            (reference, selector)
        })
        .collect();
    let named_whole = |reference: &ResourceRef| {
        scoped
            .iter()
            .any(|(r, selector)| *r == reference && selector.is_none())
    };
    let mut label_scoped: Vec<(ResourceRef, String)> = scoped
        .iter()
        .filter(|(reference, _)| !named_whole(reference))
        .filter_map(|(reference, selector)| Some(((*reference).clone(), selector.clone()?)))
        .collect();
    label_scoped.sort_by(|a, b| {
        (&a.0.api_version, &a.0.resource, &a.1).cmp(&(&b.0.api_version, &b.0.resource, &b.1))
    });
    label_scoped.dedup();
    label_scoped
}

/// The types a sharded replica keeps only its share of, with what the controller's rules
/// select of each: those whose every mention in `types` is a rule, of a controller that does
/// not need every object (`whole`: finalizing, or releasing its finalizer from, every object it
/// ever held; a shadow revision's report). An object is the controller's work item, owned by one
/// replica; children, inputs and reads are looked up from other objects and kept whole.
fn shard_scoped(
    types: &[(ResourceRef, Selects)],
    whole: bool,
) -> Vec<(ResourceRef, Vec<Selection>)> {
    if whole {
        return Vec::new();
    }
    let mut scoped: Vec<(ResourceRef, Vec<Selection>)> = Vec::new();
    let mut whole: Vec<&ResourceRef> = Vec::new();
    for (reference, selects) in types {
        match selects {
            Selects::Whole => whole.push(reference),
            Selects::Rule(selection) => match scoped.iter_mut().find(|(r, _)| r == reference) {
                Some((_, selections)) => selections.push(selection.clone()),
                None => scoped.push((reference.clone(), vec![selection.clone()])),
            },
        }
    }
    scoped.retain(|(reference, _)| !whole.contains(&reference));
    scoped
}

/// A controller object of some kind, as the shared layers read it.
pub trait ControllerObject:
    serde::de::DeserializeOwned + serde::Serialize + kube::CustomResourceExt + Send + Sync + 'static
{
    const KIND: KindName;

    /// Its name.
    fn name(&self) -> String;

    /// What loading reads of it.
    fn spec(&self) -> ControllerSpec;
}

/// The set hooks of a spec's hooks, with their kinds: `[(SYNC, Some(&hooks.sync)), …]`.
pub(crate) fn set_hooks<'a>(
    hooks: impl IntoIterator<Item = (HookKind, Option<&'a Hook>)>,
) -> Vec<(HookKind, &'a Hook)> {
    hooks
        .into_iter()
        .filter_map(|(kind, hook)| Some((kind, hook?)))
        .collect()
}
