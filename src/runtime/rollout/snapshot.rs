//! The serving revision's snapshot, a ControllerRevision beside the controller object: saved
//! by the replica that writes the controller's status, read back after a restart or by a new
//! leader to go on serving it, and by an undo to serve the revision before it again.

use crate::hooks::{ConfigMapLookup, HookCode};
use crate::object;
use crate::runtime::context::Context;
use crate::runtime::keys::ControllerId;
use crate::runtime::kind::{Controller, Kind};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// The serving revision's snapshot: where it is kept, and what it holds.
const KIND_LABEL: &str = "metascript.dev/controller-kind";
const NAME_LABEL: &str = "metascript.dev/controller";
const REVISION_LABEL: &str = "metascript.dev/revision";
/// On a snapshot: the revision that served before it, kept for `metascript rollout undo`.
const REPLACES_LABEL: &str = "metascript.dev/replaces";

/// A controller revision as it was loaded: the controller object (its spec) and the code of
/// every script and library it read from a ConfigMap key (or a dev-loop file), by
/// `namespace/name/key`, so that it runs the same when those change.
#[derive(Debug, serde::Deserialize, serde::Serialize)]
pub(super) struct Snapshot {
    pub(super) controller: Value,
    #[serde(default)]
    scripts: BTreeMap<String, String>,
}

impl ConfigMapLookup for Snapshot {
    fn value(&self, namespace: &str, name: &str, key: &str) -> Option<Option<String>> {
        Some(self.scripts.get(&script_key(namespace, name, key)).cloned())
    }
}

fn script_key(namespace: &str, name: &str, key: &str) -> String {
    format!("{namespace}/{name}/{key}")
}

/// A label value for a controller name (at most 63 characters).
fn name_label(name: &str) -> String {
    if name.len() <= 63 {
        name.to_string()
    } else {
        object::short_digest(name)
    }
}

/// The snapshot's name: `<kind>-<controller>-<revision>`, shortened to fit.
pub(super) fn snapshot_name(id: &ControllerId, revision: &str) -> String {
    let name = if id.name.len() + revision.len() + 12 <= 253 {
        id.name.clone()
    } else {
        object::short_digest(&id.name)
    };
    format!("{}-{name}-{revision}", id.kind.as_str())
}

fn snapshots(context: &Context) -> Api<ControllerRevision> {
    Api::namespaced(context.client.clone(), &context.config.snapshot_namespace)
}

/// What a serving version snapshots: its object, and the code of the scripts it took from
/// ConfigMap keys.
pub(super) fn snapshot_of<K: Kind>(serving: &Controller<K>) -> Snapshot {
    let mut scripts = BTreeMap::new();
    let spec = serde_json::from_value::<K::Object>((*serving.object).clone())
        .ok()
        .map(|parsed| crate::api::ControllerObject::spec(&parsed));
    let (hooks, libraries) = spec
        .as_ref()
        .map(|spec| (&spec.hooks[..], &spec.libraries[..]))
        .unwrap_or_default();
    for (hook, declared) in hooks {
        let (Some(reference), Some(loaded)) = (
            declared
                .script
                .as_ref()
                .and_then(|s| s.config_map_ref.as_ref()),
            serving.hooks.get(*hook),
        ) else {
            continue;
        };
        if let HookCode::Script { script, .. } = &loaded.code {
            scripts.insert(
                script_key(&reference.namespace, &reference.name, &reference.key),
                script.code().to_string(),
            );
        }
    }
    let compiled: Vec<_> = serving
        .hooks
        .iter()
        .filter_map(|hook| match &hook.code {
            HookCode::Script { script, .. } => Some(script.clone()),
            HookCode::Webhook(_) => None,
        })
        .collect();
    for library in libraries {
        let Some(reference) = &library.config_map_ref else {
            continue;
        };
        let code = compiled.iter().find_map(|script| {
            script
                .libraries()
                .find(|loaded| loaded.name == library.name)
                .map(|loaded| loaded.code.to_string())
        });
        if let Some(code) = code {
            scripts.insert(
                script_key(&reference.namespace, &reference.name, &reference.key),
                code,
            );
        }
    }
    let object = &serving.object;
    Snapshot {
        controller: json!({
            "apiVersion": object::api_version(object),
            "kind": object::kind(object),
            "metadata": {
                "name": object::name(object),
                "uid": object::uid(object),
                "generation": object.pointer("/metadata/generation"),
                "annotations": object.pointer("/metadata/annotations"),
            },
            "spec": object.get("spec"),
        }),
        scripts,
    }
}

pub(super) async fn save_snapshot<K: Kind>(
    context: &Context,
    serving: &Controller<K>,
    replaces: Option<&str>,
) -> Result<(), kube::Error> {
    let id = &serving.id;
    let object = &serving.object;
    let data = serde_json::to_value(snapshot_of(serving)).expect("a snapshot serializes");
    let revision = ControllerRevision {
        metadata: kube::api::ObjectMeta {
            name: Some(snapshot_name(id, &serving.revision)),
            namespace: Some(context.config.snapshot_namespace.clone()),
            labels: Some(
                [
                    (KIND_LABEL.to_string(), id.kind.as_str().to_string()),
                    (NAME_LABEL.to_string(), name_label(&id.name)),
                    (REVISION_LABEL.to_string(), serving.revision.clone()),
                ]
                .into_iter()
                .chain(
                    replaces
                        .filter(|replaced| *replaced != serving.revision)
                        .map(|replaced| (REPLACES_LABEL.to_string(), replaced.to_string())),
                )
                .collect(),
            ),
            // Deleted with the controller by the garbage collector.
            owner_references: Some(vec![
                serde_json::from_value(object::owner_reference(object))
                    .expect("an owner reference"),
            ]),
            ..Default::default()
        },
        revision: serving.generation.unwrap_or(1),
        data: Some(RawExtension(data)),
    };
    let api = snapshots(context);
    match api.create(&PostParams::default(), &revision).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(error) => return Err(error),
    }
    let selector = format!(
        "{KIND_LABEL}={},{NAME_LABEL}={}",
        id.kind.as_str(),
        name_label(&id.name)
    );
    let kept = api.list(&ListParams::default().labels(&selector)).await?;
    let before = kept
        .iter()
        .map(kube::ResourceExt::labels)
        .find(|labels| labels.get(REVISION_LABEL) == Some(&serving.revision))
        .and_then(|labels| labels.get(REPLACES_LABEL).cloned());
    for old in kept {
        let name = kube::ResourceExt::name_any(&old);
        let revision = kube::ResourceExt::labels(&old).get(REVISION_LABEL);
        if revision != Some(&serving.revision) && revision != before.as_ref() {
            match api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(error) => return Err(error),
            }
        }
    }
    Ok(())
}

/// The snapshot of a controller's revision, when it is kept and belongs to this very
/// controller object (not an earlier one of the same name).
pub(super) async fn load_snapshot(
    context: &Context,
    id: &ControllerId,
    object: &Value,
    revision: &str,
) -> Result<Option<Snapshot>, kube::Error> {
    let Some(kept) = snapshots(context)
        .get_opt(&snapshot_name(id, revision))
        .await?
    else {
        return Ok(None);
    };
    let owned = kept
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|owner| Some(owner.uid.as_str()) == object::uid(object));
    Ok(kept
        .data
        .filter(|_| owned)
        .and_then(|data| serde_json::from_value(data.0).ok()))
}

/// The revision that served before `revision`, as its snapshot names it (none when it has no
/// snapshot of this controller object, or names none).
pub(super) async fn replaced(
    context: &Context,
    id: &ControllerId,
    object: &Value,
    revision: &str,
) -> Result<Option<String>, kube::Error> {
    let kept = snapshots(context)
        .get_opt(&snapshot_name(id, revision))
        .await?;
    Ok(kept
        .filter(|kept| {
            kept.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|owner| Some(owner.uid.as_str()) == object::uid(object))
        })
        .and_then(|kept| {
            kube::ResourceExt::labels(&kept)
                .get(REPLACES_LABEL)
                .cloned()
        }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_names_fit_and_stay_apart() {
        let id = ControllerId::new(crate::kinds::decorator::KIND, "service-per-pod");
        assert_eq!(
            snapshot_name(&id, "0123456789"),
            "decorator-service-per-pod-0123456789"
        );
        let long = ControllerId::new(crate::kinds::decorator::KIND, "x".repeat(250));
        assert!(snapshot_name(&long, "0123456789").len() <= 253);
        assert_eq!(name_label(&"y".repeat(80)).len(), 32);
    }

    #[test]
    fn a_snapshot_answers_for_the_configmap_keys_it_holds_only() {
        let snapshot = Snapshot {
            controller: Value::Null,
            scripts: [("ns/hooks/sync.rhai".to_string(), "#{}".to_string())].into(),
        };
        assert_eq!(
            snapshot.value("ns", "hooks", "sync.rhai"),
            Some(Some("#{}".into()))
        );
        assert_eq!(snapshot.value("ns", "hooks", "other.rhai"), Some(None));
    }
}
