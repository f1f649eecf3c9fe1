//! Where in the manifest files a script's line is: a finding or a failure about an inline
//! script names its `FILE:LINE:COLUMN` (which terminals and editors open), with the script's
//! own line kept in the message. Through the language server's map of YAML positions.

use crate::lsp::scripts::{Manifest, Script};
use crate::plan::SyncError;
use crate::validate::ScriptSpot;
use crate::yaml::Position;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The manifest files read again for the places of their scripts, each once.
#[derive(Default)]
pub(super) struct Places(HashMap<PathBuf, Option<(Manifest, Vec<Script>)>>);

impl Places {
    /// Where in `path` the place a spot names in one of its scripts is (0-based).
    pub(super) fn position(&mut self, path: &Path, spot: &ScriptSpot) -> Option<Position> {
        let line = spot.line?;
        let (manifest, scripts) = self
            .0
            .entry(path.to_path_buf())
            .or_insert_with(|| {
                let text = std::fs::read_to_string(path).ok()?;
                let manifest = Manifest::parse(&text).ok()?;
                let scripts = manifest.scripts();
                Some((manifest, scripts))
            })
            .as_ref()?;
        let script = manifest.script_of(scripts, &spot.origin)?;
        let node = manifest.node(script.document, &script.path)?;
        manifest.index.file_position(node, line, spot.column)
    }

    /// `FILE:LINE:COLUMN` (1-based) of the spot in the first of `paths` holding its script.
    pub(super) fn find<'a>(
        &mut self,
        paths: impl IntoIterator<Item = &'a Path>,
        spot: &ScriptSpot,
    ) -> Option<String> {
        paths.into_iter().find_map(|path| {
            let at = self.position(path, spot)?;
            Some(format!(
                "{}:{}:{}",
                path.display(),
                at.line + 1,
                at.column + 1
            ))
        })
    }

    /// `FILE:LINE:COLUMN` of the line of a script in one of `paths` a sync failure is about.
    pub(super) fn locate<'a>(
        &mut self,
        paths: impl IntoIterator<Item = &'a Path>,
        error: &SyncError,
    ) -> Option<String> {
        self.find(paths, &ScriptSpot::of_sync(error)?)
    }

    /// A sync failure as printed: its [`Places::locate`] first, when it has one, and what a
    /// failed webhook answered (the author runs this).
    pub(super) fn failure<'a>(
        &mut self,
        paths: impl IntoIterator<Item = &'a Path>,
        error: &SyncError,
    ) -> String {
        match self.locate(paths, error) {
            Some(place) => format!("{place}: {}", error.with_body()),
            None => error.with_body(),
        }
    }
}
