//! Which controllers of a kind care about which events, so an event never scans every
//! controller: watched types to the controllers they concern, ConfigMaps and dev-loop script
//! files to the controllers whose hooks they hold.

use crate::resources::ResourceType;
use crate::runtime::kind::Interest;
use crate::runtime::load::ScriptSources;
use crate::runtime::watch::event::ObjectEvent;
use serde_json::Value;
use std::collections::HashMap;

/// Rebuilt whenever a controller is loaded or removed (rare), read on every event (often).
#[derive(Debug, Default)]
pub(crate) struct Routes {
    /// Watched types → the controllers their events concern.
    types: HashMap<ResourceType, Vec<String>>,
    /// Controllers that see events of every type.
    every_type: Vec<String>,
    /// ConfigMaps (namespace, name) → the controllers whose hooks they hold.
    config_maps: HashMap<(String, String), Vec<String>>,
    /// Dev-loop script file names → the controllers whose hooks they replace.
    script_keys: HashMap<String, Vec<String>>,
}

impl Routes {
    /// Adds a controller: the events it wants (none for one that never loaded) and where its
    /// scripts come from.
    pub(crate) fn add(&mut self, name: &str, interest: Option<&Interest>, sources: &ScriptSources) {
        let name = name.to_string();
        match interest {
            Some(interest) if interest.every_type => push_unique(&mut self.every_type, &name),
            Some(interest) => {
                for resource in &interest.types {
                    push_unique(self.types.entry(resource.clone()).or_default(), &name);
                }
            }
            None => {}
        }
        for config_map in &sources.config_maps {
            push_unique(
                self.config_maps.entry(config_map.clone()).or_default(),
                &name,
            );
        }
        for key in &sources.script_keys {
            push_unique(self.script_keys.entry(key.clone()).or_default(), &name);
        }
    }

    /// The controllers an event of this type concerns, each once (a controller that sees
    /// every type is listed under no type).
    pub(crate) fn for_type(&self, resource: &ResourceType) -> impl Iterator<Item = &String> {
        let typed = self.types.get(resource).into_iter().flatten();
        typed.chain(&self.every_type)
    }

    pub(crate) fn for_config_map(&self, namespace: &str, name: &str) -> &[String] {
        self.config_maps
            .get(&(namespace.to_string(), name.to_string()))
            .map_or(&[], Vec::as_slice)
    }

    pub(crate) fn for_script_key(&self, key: &str) -> &[String] {
        self.script_keys.get(key).map_or(&[], Vec::as_slice)
    }
}

fn push_unique(list: &mut Vec<String>, item: &String) {
    if !list.contains(item) {
        list.push(item.clone());
    }
}

/// Whether the event changed an existing object's status: the event after which a
/// controller syncs the object again even when the write was its own. The hook is called with
/// the object's status and may keep state there (Metacontroller's daemonjob records completion
/// in status and acts on it in the sync that reads it back); Metacontroller syncs again after
/// its own status writes, and so does metascript. A stable status writes nothing on that sync.
/// The operator's `Synced` conditions are not state a hook keeps: a failure written there
/// must not run the failing sync again at once, nor one controller's condition another's sync.
pub(crate) fn status_changed(event: &ObjectEvent) -> bool {
    let status = |object: &Value| {
        object
            .get("status")
            .map(crate::plan::synced::without_operators)
    };
    matches!((&event.old, &event.new), (Some(old), Some(new)) if status(old.head()) != status(new.head()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::TypeInfo;

    #[test]
    fn each_controller_hears_of_a_type_once() {
        let configmaps = crate::resources::StaticResolver::with_builtins()
            .find_kind("v1", "ConfigMap")
            .expect("ConfigMap is built in");
        let mut routes = Routes::default();
        let typed = Interest {
            types: vec![configmaps.clone()],
            every_type: false,
        };
        let everything = Interest {
            types: vec![configmaps.clone()],
            every_type: true,
        };
        let sources = ScriptSources {
            config_maps: vec![("hooks".into(), "scripts".into())],
            script_keys: vec!["sync.rhai".into()],
        };
        routes.add("a", Some(&typed), &ScriptSources::default());
        routes.add("a", Some(&typed), &ScriptSources::default());
        routes.add("b", Some(&everything), &sources);
        routes.add("c", None, &sources);
        let names: Vec<&String> = routes.for_type(&configmaps).collect();
        assert_eq!(names, ["a", "b"]);
        let secrets = ResourceType::from(TypeInfo {
            kind: "Secret".into(),
            plural: "secrets".into(),
            ..TypeInfo::clone(&configmaps)
        });
        let names: Vec<&String> = routes.for_type(&secrets).collect();
        assert_eq!(names, ["b"]);
        assert_eq!(routes.for_config_map("hooks", "scripts"), ["b", "c"]);
        assert_eq!(routes.for_script_key("sync.rhai"), ["b", "c"]);
        assert!(routes.for_script_key("other.rhai").is_empty());
    }

    /// The events after which the controller syncs even when it wrote them: a changed status
    /// (its own status write), not a finalizer it added, nor the operator's `Synced`
    /// condition, an addition or a deletion.
    #[test]
    fn a_status_change_is_told_from_other_changes() {
        use serde_json::json;
        let resource = crate::resources::StaticResolver::with_builtins()
            .find_kind("v1", "ConfigMap")
            .unwrap();
        let event = |old: Option<Value>, new: Option<Value>| ObjectEvent::of(&resource, old, new);
        let parent = json!({"metadata": {"name": "p"}, "status": {"conditions": [{"type": "Complete", "status": "False"}]}});
        let mut complete = parent.clone();
        complete["status"]["conditions"][0]["status"] = json!("True");
        let mut finalizer = parent.clone();
        finalizer["metadata"]["finalizers"] = json!(["metascript.dev/composite-x"]);
        let mut first = parent.clone();
        first.as_object_mut().unwrap().remove("status");
        let mut synced_only = parent.clone();
        synced_only["status"]["conditions"]
            .as_array_mut()
            .unwrap()
            .push(json!({"type": "Synced", "status": "False", "reason": "HookFailed"}));
        let changed = |old, new| status_changed(&event(old, new));
        assert!(changed(Some(parent.clone()), Some(complete)));
        assert!(changed(Some(first), Some(parent.clone())));
        assert!(!changed(Some(parent.clone()), Some(finalizer)));
        assert!(!changed(None, Some(parent.clone())));
        // The operator's conditions are not state a hook keeps.
        assert!(!changed(Some(parent.clone()), Some(synced_only)));
        assert!(!changed(Some(parent), None));
    }
}
