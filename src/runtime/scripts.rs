//! Where the running operator reads hook scripts: ConfigMaps from the shared cache, and in the
//! dev loop files in a local directory, watched so that saving a file reloads its hooks.

use super::cache::Informers;
use crate::hooks::ConfigMapLookup;
use crate::resources::ResourceType;
use notify::{RecursiveMode, Watcher};
use std::path::Path;
use tokio::sync::mpsc;

/// The core ConfigMap type, which every configMapRef names.
pub fn config_map_type() -> ResourceType {
    ResourceType {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        plural: "configmaps".into(),
        namespaced: true,
        has_status: false,
    }
}

/// ConfigMap keys read from the watch cache (wrapped in `hooks::ScriptsDir` for the dev loop).
pub struct CachedConfigMaps<'a>(pub &'a Informers);

impl ConfigMapLookup for CachedConfigMaps<'_> {
    fn value(&self, namespace: &str, name: &str, key: &str) -> Option<Option<String>> {
        let config_map = self.0.get(&config_map_type(), Some(namespace), name)?;
        Some(
            config_map
                .get("data")
                .and_then(|data| data.get(key))
                .and_then(|value| value.as_str())
                .map(str::to_string),
        )
    }
}

/// Watches a scripts directory and sends the name of every file that changes. The returned
/// watcher must be kept alive for as long as changes are wanted.
pub fn watch_dir(
    dir: &Path,
    changed: mpsc::UnboundedSender<String>,
) -> Result<notify::RecommendedWatcher, notify::Error> {
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        let Ok(event) = event else { return };
        if event.kind.is_access() {
            return;
        }
        for path in event.paths {
            if let Some(name) = path.file_name().and_then(|n| n.to_str()) {
                let _ = changed.send(name.to_string());
            }
        }
    })?;
    watcher.watch(dir, RecursiveMode::NonRecursive)?;
    Ok(watcher)
}
