//! CompositeController planning: which parents it syncs, which children each parent claims
//! (Kubernetes' ControllerRef rules), what its hooks are asked, and what a response means for
//! the cluster: children, claims, revisions, the parent's status and its finalizer.

use super::api::{CompositeController, revisions_ref};
use super::rolling::{self, Revision, RollingType};
use crate::api::{AdoptPolicy, HookVersion, UpdateMethod};
use crate::kinds::one_object::{Common, ObjectRequest};
use crate::object::{self, ObjectKey};
use crate::plan::children::{self, ChildType};
use crate::plan::lifecycle::Phase;
use crate::plan::response::{self, InvalidResponse, json_type};
use crate::plan::synced;
use crate::plan::{Claim, ClaimChange, InvalidSelector, Plan, StatusChange};
use crate::resources::{ResolveError, ResourceResolver, ResourceType};
use crate::script::Json;
use crate::selector::LabelSelector;
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, BTreeSet};

/// The label a generated selector selects children by, as Metacontroller (and Job) name it.
pub const CONTROLLER_UID_LABEL: &str = "controller-uid";

/// A CompositeController with its types resolved: everything planning needs that does not change
/// from one parent to the next.
#[derive(Clone, Debug)]
pub struct Composite {
    pub(crate) common: Common,
    pub parent: ResourceType,
    /// `parentResource.labelSelector`: only these parents are synced.
    pub parent_selector: Option<LabelSelector>,
    pub ignore_status_changes: bool,
    pub children: Vec<ChildType>,
    /// Per child type: how it rolls out, when its method is a rolling one.
    pub rolling: Vec<Option<RollingType>>,
    /// `revisionHistory.fieldPaths` (default `spec`).
    pub field_paths: Vec<String>,
    /// ControllerRevisions, when a child type rolls out.
    pub revisions: Option<ResourceType>,
    pub generate_selector: bool,
}

/// What one parent's hooks are asked about: the parent, the children it claims, the claims
/// that make them its own, and its related objects.
#[derive(Clone, Debug)]
pub struct Observed<'a> {
    pub parent: &'a Value,
    pub children: Vec<&'a Value>,
    pub claims: Vec<Claim>,
    /// Related objects, grouped as the request shows them.
    pub related: Value,
}

/// The rolling update part of a sync: the parent's latest revision, the ControllerRevisions it
/// owns, and the desired children of each older revision that can still be computed.
#[derive(Clone, Debug)]
pub struct Rollout<'a> {
    pub latest: Revision,
    pub revisions: Vec<&'a Value>,
    pub old: BTreeMap<String, BTreeMap<ObjectKey, Value>>,
}

impl Composite {
    pub fn new(
        controller: &CompositeController,
        resolver: &dyn ResourceResolver,
    ) -> Result<Composite, ResolveError> {
        let spec = &controller.spec;
        let parent_rule = &spec.parent_resource;
        let parent = resolver.resolve(&crate::api::ResourceRef {
            api_version: parent_rule.api_version.clone(),
            resource: parent_rule.resource.clone(),
        })?;
        let rules: Vec<_> = spec
            .child_resources
            .iter()
            .map(|c| c.child_rule())
            .collect();
        let revisions = match spec.rolls() {
            true if !parent.namespaced => {
                return Err(ResolveError::Unsupported {
                    api_version: parent_rule.api_version.clone(),
                    resource: parent_rule.resource.clone(),
                    reason: "is cluster-scoped, and rolling updates (RollingRecreate, \
                             RollingInPlace) keep a parent's revisions in ControllerRevisions in \
                             its namespace"
                        .into(),
                });
            }
            true => Some(resolver.resolve(&revisions_ref())?),
            false => None,
        };
        let field_paths = parent_rule
            .revision_history
            .as_ref()
            .map(|history| history.field_paths.clone())
            .filter(|paths| !paths.is_empty())
            .unwrap_or_else(|| vec!["spec".to_string()]);
        Ok(Composite {
            parent,
            parent_selector: parent_rule.label_selector.clone(),
            ignore_status_changes: parent_rule.ignore_status_changes == Some(true),
            children: children::resolve_child_types(&rules, resolver)?,
            rolling: spec
                .child_resources
                .iter()
                .map(|rule| {
                    let method = rule.method();
                    method.is_rolling().then(|| RollingType {
                        in_place: method == super::api::CompositeUpdateMethod::RollingInPlace,
                        checks: rule
                            .update_strategy
                            .as_ref()
                            .and_then(|s| s.status_checks.as_ref())
                            .map(|checks| checks.conditions.clone())
                            .unwrap_or_default(),
                    })
                })
                .collect(),
            field_paths,
            revisions,
            generate_selector: spec.generate_selector == Some(true),
            common: Common::new(
                controller,
                (
                    spec.hooks.finalize.is_some(),
                    spec.hooks.customize.is_some(),
                ),
                &spec.reads,
                resolver,
            )?,
        })
    }

    /// Whether a parent is one this controller syncs (`parentResource.labelSelector`).
    pub fn selects(&self, parent: &Value) -> bool {
        self.parent.describes(parent)
            && self
                .parent_selector
                .as_ref()
                .is_none_or(|selector| selector.matches_labels_of(parent))
    }

    /// Every type of object the parent owns: its child types, and ControllerRevisions when a
    /// type rolls out (what the writes of a plan may touch).
    pub fn owned_types(&self) -> Vec<ResourceType> {
        self.children
            .iter()
            .map(|child| child.resource.clone())
            .chain(self.revisions.clone())
            .collect()
    }

    /// The selector that decides which children a parent owns: `controller-uid: <uid>` with
    /// `generateSelector`, else the parent's `spec.selector`, which must select something (an
    /// empty one would claim every object of the child types in the namespace).
    pub fn selector(&self, parent: &Value) -> Result<LabelSelector, InvalidSelector> {
        let invalid = |source| InvalidSelector {
            parent: ObjectKey::of(parent).to_string(),
            source,
        };
        if self.generate_selector {
            let uid = object::uid(parent).unwrap_or_default();
            return Ok(LabelSelector {
                match_labels: [(CONTROLLER_UID_LABEL.to_string(), uid.to_string())].into(),
                ..LabelSelector::default()
            });
        }
        let selector =
            LabelSelector::from_json(parent.pointer("/spec/selector").unwrap_or(&Value::Null))
                .map_err(invalid)?;
        if selector.match_labels.is_empty() && selector.match_expressions.is_empty() {
            return Err(invalid(crate::selector::SelectorError::Shape(
                "must have matchLabels, matchExpressions or both (or set generateSelector on \
                 the CompositeController)"
                    .into(),
            )));
        }
        Ok(selector)
    }

    /// Claims children as Kubernetes controllers do, among `candidates` (objects of the child
    /// types the parent controls, and orphans in its scope): a controlled child that matches the
    /// selector is the parent's; one that no longer matches is released; an orphan that matches
    /// is adopted and is the parent's, unless its rule says `adopt: Never`. A parent being
    /// deleted adopts and releases nothing.
    pub fn claim<'a>(
        &self,
        parent: &Value,
        selector: &LabelSelector,
        candidates: impl IntoIterator<Item = &'a Value>,
    ) -> (Vec<&'a Value>, Vec<Claim>) {
        let deleting = object::is_deleting(parent);
        let mut seen = BTreeSet::new();
        let mut claimed = Vec::new();
        let mut claims = Vec::new();
        for candidate in candidates {
            let Some(child_type) = self
                .children
                .iter()
                .find(|t| t.resource.describes(candidate))
            else {
                continue;
            };
            if !seen.insert(ObjectKey::of(candidate)) {
                continue;
            }
            let matches = selector.matches_labels_of(candidate);
            let claim = |change| Claim {
                key: ObjectKey::of(candidate),
                resource_version: object::str_at(candidate, "/metadata/resourceVersion")
                    .unwrap_or_default()
                    .to_string(),
                change,
            };
            if object::is_controlled_by(candidate, parent) {
                if matches {
                    claimed.push(candidate);
                } else if !deleting && !object::is_deleting(candidate) {
                    claims.push(claim(ClaimChange::Release {
                        index: controller_index(candidate),
                    }));
                }
            } else if object::controller_ref(candidate).is_none()
                && matches
                && child_type.rule.adopt_policy() != AdoptPolicy::Never
                && !deleting
                && !object::is_deleting(candidate)
            {
                let first = candidate.pointer("/metadata/ownerReferences").is_none();
                claims.push(claim(ClaimChange::Adopt {
                    reference: object::owner_reference(parent),
                    first,
                }));
                claimed.push(candidate);
            }
        }
        (claimed, claims)
    }

    /// The sync or finalize request about `parent` (a revision's parent for an older revision),
    /// in the shape of the hook's `version`.
    pub(crate) fn request<'a>(
        &'a self,
        phase: Phase,
        parent: &'a Value,
        observed: &'a Observed,
        version: HookVersion,
    ) -> ObjectRequest<'a> {
        let children = children::group_for_request(
            observed.parent,
            self.children.iter().map(|t| &t.resource),
            observed.children.iter().copied(),
            version,
        );
        self.common.request(
            phase,
            ("parent", Json::Tree(parent)),
            ("children", children),
            &observed.related,
        )
    }

    /// The children a response asks for, checked and completed (namespace, owner reference,
    /// the generated selector's label, applied digest), each with its type's index. A child
    /// whose labels the parent's selector does not match is refused: it would be released as
    /// soon as it was created.
    pub fn desired(
        &self,
        parent: &Value,
        selector: &LabelSelector,
        response: &Value,
    ) -> Result<Vec<(Value, usize)>, InvalidResponse> {
        let fields = response::fields(response)?;
        let uid = object::uid(parent).unwrap_or_default();
        let generated = [(CONTROLLER_UID_LABEL, uid)];
        let labels: &[(&str, &str)] = if self.generate_selector {
            &generated
        } else {
            &[]
        };
        let items = response::list(fields, "children")?;
        let desired = children::desired_children(
            items,
            "children",
            parent,
            self.parent.namespaced,
            &self.children,
            labels,
        )?;
        for (index, (child, _)) in desired.iter().enumerate() {
            if !selector.matches_labels_of(child) {
                return Err(InvalidResponse::new(
                    format!("children[{index}].metadata.labels"),
                    format!(
                        "{} {:?} has labels the parent's selector does not match (it would be \
                         released as soon as it was created); give it the labels of \
                         spec.selector",
                        object::kind(child),
                        object::name(child)
                    ),
                ));
            }
        }
        Ok(desired)
    }

    /// Turns a sync or finalize response into the writes that converge the parent: claims,
    /// the latest revision, children (one rolling step, for a sync with `rollout`), revisions
    /// no child belongs to any more, the parent's status and its finalizer.
    pub fn plan(
        &self,
        phase: Phase,
        observed: &Observed,
        selector: &LabelSelector,
        response: &Value,
        rollout: Option<&Rollout>,
    ) -> Result<Plan, InvalidResponse> {
        let parent = observed.parent;
        let fields = response::fields(response)?;
        let desired = self.desired(parent, selector, response)?;
        let mut status = match fields.get("status") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(status)) => status.clone(),
            Some(other) => {
                return Err(InvalidResponse::new(
                    "status",
                    format!(
                        "expected a map (the parent's whole status), got {}",
                        json_type(other)
                    ),
                ));
            }
        };
        let mut apply = Vec::new();
        let mut revision_deletes = Vec::new();
        let desired: Vec<(Value, UpdateMethod)> = match rollout {
            Some(rollout) if phase == Phase::Sync => {
                let rolled = rolling::roll(
                    desired,
                    &observed.children,
                    &self.children,
                    &self.rolling,
                    &rollout.latest,
                    &rollout.old,
                );
                rolling::set_condition(&mut status, rolled.condition);
                let mut highest = 0;
                let mut has_latest = false;
                for revision in &rollout.revisions {
                    highest = highest.max(revision["revision"].as_i64().unwrap_or(0));
                    match object::label(revision, rolling::REVISION_LABEL) {
                        Some(hash) if hash == rollout.latest.hash => has_latest = true,
                        Some(hash) if rolled.live.contains(hash) => {}
                        _ if object::is_deleting(revision) => {}
                        _ => revision_deletes.push(children::deletion(
                            revision,
                            "no child belongs to this revision any more",
                        )),
                    }
                }
                // The revision is recorded before any child is written for it.
                if !has_latest {
                    apply.push(rollout.latest.object(parent, highest + 1));
                }
                rolled.desired
            }
            // While finalizing, children are created and deleted as asked but never updated:
            // a teardown is no time to roll anything out.
            _ if phase == Phase::Finalize => desired
                .into_iter()
                .map(|(child, index)| {
                    let method = match self.rolling[index] {
                        Some(_) => UpdateMethod::OnDelete,
                        None => self.children[index].rule.update_method(),
                    };
                    (child, method)
                })
                .collect(),
            _ => desired
                .into_iter()
                .map(|(child, index)| (child, self.children[index].rule.update_method()))
                .collect(),
        };
        let (children_apply, mut delete) = children::reconcile_each(
            desired,
            &observed.children,
            "no longer returned by the hook",
        );
        apply.extend(children_apply);
        delete.extend(revision_deletes);
        Ok(Plan {
            claims: observed.claims.clone(),
            apply,
            delete,
            status: self.status_change(parent, status),
            finalizer: self.common.finalizer_change(phase, fields, parent)?,
            resync_after_seconds: response::resync_after(fields)?,
            ..Plan::default()
        })
    }

    /// The parent's status becomes the hook's, with `observedGeneration`; written only when it
    /// differs from what the parent has.
    ///
    /// A parent type without a status subresource has its status written through the main
    /// resource, which moves `metadata.generation` (Kubernetes counts every change but metadata
    /// there). Recording the generation it had would leave `observedGeneration` one behind
    /// forever and write again on every sync (Metacontroller #68); the write records the
    /// generation it produces instead, so the next sync finds nothing to write.
    fn status_change(
        &self,
        parent: &Value,
        mut status: Map<String, Value>,
    ) -> Option<StatusChange> {
        let generation = parent
            .pointer("/metadata/generation")
            .and_then(Value::as_i64);
        if let Some(generation) = generation {
            status.insert("observedGeneration".into(), generation.into());
        }
        let desired = Value::Object(status);
        let current = parent.get("status").cloned().unwrap_or_else(|| json!({}));
        let (compared, current) = (
            synced::without_operators(&desired),
            synced::without_operators(&current),
        );
        if same(&compared, &current) {
            return None;
        }
        let mut desired = desired;
        if let (false, Some(generation)) = (self.parent.has_status, generation) {
            desired["observedGeneration"] = (generation + 1).into();
        }
        Some(StatusChange::Replace(desired))
    }
}

/// The index of an object's controller reference in its `ownerReferences`.
fn controller_index(object: &Value) -> usize {
    object
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .and_then(|references| {
            references
                .iter()
                .position(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
        })
        .unwrap_or_default()
}

/// Equal as JSON, numbers compared by value (`1` and `1.0` alike).
fn same(a: &Value, b: &Value) -> bool {
    object::is_subset(a, b) && object::is_subset(b, a)
}
