//! The runtime's vocabulary: how an object, a controller and a unit of work are named. Every
//! other runtime module speaks it; it depends on none of them.

use crate::api::KindName;
use crate::object;
use crate::resources::ResourceType;
use serde_json::Value;
use std::fmt;

/// One object, addressed by type, namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ObjRef {
    pub resource: ResourceType,
    pub namespace: Option<String>,
    pub name: String,
}

impl ObjRef {
    /// [`object::identity_digest`] of the object referred to: the same digest as computed from
    /// the object itself (a MapController's map key of an input, whether or not it still exists).
    pub(crate) fn identity_digest(&self) -> String {
        object::identity_digest(
            self.resource.group(),
            &self.resource.kind,
            self.namespace.as_deref().unwrap_or_default(),
            &self.name,
        )
    }

    pub(crate) fn of(resource: &ResourceType, object: &Value) -> ObjRef {
        ObjRef {
            resource: resource.clone(),
            namespace: resource.scope_of(object).map(str::to_string),
            name: object::name(object).to_string(),
        }
    }

    /// The object an owner reference on `child` names, when it is of type `owner_type`.
    pub(crate) fn owner_of(owner_type: &ResourceType, child: &Value) -> Option<ObjRef> {
        let reference = object::controller_ref(child)?;
        let same_type = object::str_at(reference, "/kind") == Some(owner_type.kind.as_str())
            && object::group_of(object::str_at(reference, "/apiVersion")?) == owner_type.group();
        Some(ObjRef {
            resource: owner_type.clone(),
            // The garbage collector ignores owner references across namespaces, so a namespaced
            // owner is in its child's namespace.
            namespace: owner_type.scope_of(child).map(str::to_string),
            name: object::str_at(reference, "/name")?.to_string(),
        })
        .filter(|_| same_type)
    }
}

impl fmt::Display for ObjRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ", self.resource.group_key())?;
        if let Some(namespace) = &self.namespace {
            write!(f, "{namespace}/")?;
        }
        f.write_str(&self.name)
    }
}

/// One controller object: its kind and name (controllers are cluster-scoped).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ControllerId {
    pub kind: KindName,
    pub name: String,
}

impl ControllerId {
    pub fn new(kind: KindName, name: impl Into<String>) -> ControllerId {
        ControllerId {
            kind,
            name: name.into(),
        }
    }

    /// `<kind>/<name>`, e.g. `decorator/service-per-pod`.
    pub(crate) fn to_string_short(&self) -> String {
        format!("{}/{}", self.kind.as_str(), self.name)
    }

    /// The server-side apply field manager of the controller, so every field it writes is
    /// attributed to it in managedFields and two controllers never fight over ownership.
    pub(crate) fn field_manager(&self) -> String {
        format!("metascript.dev/{}-{}", self.kind.as_str(), self.name)
    }
}

impl fmt::Display for ControllerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.kind.object_kind(), self.name)
    }
}

/// The children of one parent that share a key (a MapController's outputs of one input).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Group {
    pub parent: ObjRef,
    pub key: String,
}

impl fmt::Display for Group {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}, key {}", self.parent, self.key)
    }
}

/// What a work item does for its controller. Kinds choose which of these their work is.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Work {
    /// Load, reload or remove the controller itself.
    Load,
    /// Sync one object the controller acts on (a target, a parent).
    Object(ObjRef),
    /// Sync one object for another (a map parent and one of its inputs).
    Pair { parent: ObjRef, input: ObjRef },
    /// Settle a group of children whose source is not known.
    Group(Group),
}

impl Work {
    /// The object whose users should hear of this work's failures: the object synced, or the
    /// map parent a pair or group belongs to; none for loading the controller.
    pub(crate) fn subject(&self) -> Option<&ObjRef> {
        match self {
            Work::Load => None,
            Work::Object(object) => Some(object),
            Work::Pair { parent, .. } | Work::Group(Group { parent, .. }) => Some(parent),
        }
    }
}

impl fmt::Display for Work {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Work::Load => f.write_str("load"),
            Work::Object(object) => write!(f, "{object}"),
            Work::Pair { parent, input } => write!(f, "{parent}, input {input}"),
            Work::Group(group) => group.fmt(f),
        }
    }
}

/// A unit of work. Keys coalesce in the queue, and one key is never worked on twice at once.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct WorkKey {
    pub controller: ControllerId,
    pub work: Work,
}

impl WorkKey {
    pub(crate) fn load(controller: &ControllerId) -> WorkKey {
        WorkKey {
            controller: controller.clone(),
            work: Work::Load,
        }
    }

    pub(crate) fn new(controller: &ControllerId, work: Work) -> WorkKey {
        WorkKey {
            controller: controller.clone(),
            work,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::TypeInfo;
    use serde_json::json;

    fn stateful_sets() -> ResourceType {
        crate::resources::StaticResolver::with_builtins()
            .find_kind("apps/v1", "StatefulSet")
            .expect("StatefulSet is built in")
    }

    #[test]
    fn an_owner_is_found_in_its_childs_namespace_only_when_the_type_matches() {
        let child = json!({
            "metadata": {"name": "web-0", "namespace": "shop", "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "uid": "u", "controller": true}
            ]}
        });
        let owner = ObjRef::owner_of(&stateful_sets(), &child).expect("an owner");
        assert_eq!(owner.to_string(), "StatefulSet.apps/v1 shop/web");
        let deployments = ResourceType::from(TypeInfo {
            kind: "Deployment".into(),
            plural: "deployments".into(),
            ..TypeInfo::clone(&stateful_sets())
        });
        assert_eq!(ObjRef::owner_of(&deployments, &child), None);
    }

    #[test]
    fn a_works_failures_are_told_to_the_object_its_users_look_at() {
        let object = |name: &str| {
            ObjRef::of(
                &stateful_sets(),
                &json!({"metadata": {"name": name, "namespace": "shop"}}),
            )
        };
        let (parent, input) = (object("parent"), object("input"));
        assert_eq!(Work::Load.subject(), None);
        assert_eq!(Work::Object(input.clone()).subject(), Some(&input));
        let pair = Work::Pair {
            parent: parent.clone(),
            input,
        };
        assert_eq!(pair.subject(), Some(&parent));
        let group = Work::Group(Group {
            parent: parent.clone(),
            key: "k".into(),
        });
        assert_eq!(group.subject(), Some(&parent));
    }

    #[test]
    fn field_managers_name_the_kind_and_the_controller() {
        assert_eq!(
            ControllerId::new(crate::kinds::decorator::KIND, "spp").field_manager(),
            "metascript.dev/decorator-spp"
        );
        assert_eq!(
            ControllerId::new(crate::kinds::map::KIND, "snap").field_manager(),
            "metascript.dev/map-snap"
        );
    }
}
