//! Where the running operator reads hook scripts: ConfigMaps from the shared cache, and in the
//! dev loop files in a local directory, watched so that saving a file reloads its hooks.

use super::cache::Informers;
use crate::hooks::ConfigMapLookup;
use crate::resources::ResourceType;
use notify::{RecursiveMode, Watcher};
use std::path::Path;
use tokio::sync::mpsc;

/// ConfigMap keys read from the watch cache (wrapped in `hooks::ScriptsDir` for the dev loop).
pub struct CachedConfigMaps<'a> {
    pub informers: &'a Informers,
    /// The ConfigMap type as discovery resolved it (the cache's key).
    pub config_maps: &'a ResourceType,
}

impl ConfigMapLookup for CachedConfigMaps<'_> {
    fn value(&self, namespace: &str, name: &str, key: &str) -> Option<Option<String>> {
        let config_map = self
            .informers
            .get(self.config_maps, Some(namespace), name)?;
        Some(crate::hooks::config_map_data(&config_map, key))
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
