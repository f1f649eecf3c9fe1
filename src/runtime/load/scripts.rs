//! Where the running operator reads hook scripts: ConfigMaps from the shared cache, and in the
//! dev loop files in a local directory, watched so that saving a file reloads its hooks.

use crate::hooks::ConfigMapLookup;
use crate::resources::ResourceType;
use crate::runtime::watch::cache::Informers;
use notify::RecursiveMode;
use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;
use tokio::sync::mpsc;

/// ConfigMap keys read from the watch cache (wrapped in `hooks::ScriptsDir` for the dev loop).
pub(crate) struct CachedConfigMaps<'a> {
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

/// The dev loop's watcher; dropping it stops watching.
pub(crate) type ScriptsWatcher = notify_debouncer_full::Debouncer<
    notify::RecommendedWatcher,
    notify_debouncer_full::RecommendedCache,
>;

/// How long a file must stay unchanged before its change counts: editors save in several
/// writes (truncate, write, rename), and one save must be one reload of the finished file.
pub(crate) const SETTLE: Duration = Duration::from_millis(150);

/// Watches a scripts directory and sends the name of every file whose changes have settled.
pub(crate) fn watch_dir(
    dir: &Path,
    changed: mpsc::UnboundedSender<String>,
) -> Result<ScriptsWatcher, notify::Error> {
    let mut debouncer = notify_debouncer_full::new_debouncer(
        SETTLE,
        None,
        move |result: notify_debouncer_full::DebounceEventResult| {
            let Ok(events) = result else { return };
            let names: BTreeSet<String> = events
                .iter()
                .filter(|event| !event.kind.is_access())
                .flat_map(|event| &event.paths)
                .filter_map(|path| path.file_name()?.to_str().map(str::to_string))
                .collect();
            for name in names {
                let _ = changed.send(name);
            }
        },
    )?;
    debouncer.watch(dir, RecursiveMode::NonRecursive)?;
    Ok(debouncer)
}
