//! The services every controller kind shares: the client, discovery, the watch caches, the
//! script engine, the applier, metrics, the Event recorder and the work queue. It knows no
//! kind of controller.

use super::apply::{Applier, ApplyError, Writer};
use super::cache::Informers;
use super::discovery::Discovery;
use super::keys::{ControllerId, ObjRef, WorkKey};
use super::leader::{Leadership, LeaseConfig};
use super::metrics::Metrics;
use super::queue::WorkQueue;
use crate::api::ServiceAccountRef;
use crate::hooks::ControllerHooks;
use crate::object;
use crate::resources::ResourceType;
use crate::script::ScriptEngine;
use crate::sync::{HookRunner, SyncError};
use kube::runtime::events::{Event, EventType, Recorder};
use parking_lot::Mutex;
use serde_json::Value;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

#[derive(Clone, Debug)]
pub struct OperatorConfig {
    /// Work items run at once.
    pub workers: usize,
    /// The dev loop: files here replace ConfigMap keys of the same name, and are watched.
    pub scripts_dir: Option<PathBuf>,
    /// How often controller status is brought up to date (written only when it changed).
    pub status_interval: Duration,
    /// Serve only the controller objects whose labels match this selector (kubectl syntax),
    /// so several operators can share a cluster, or a canary can take a few controllers.
    pub controller_selector: Option<String>,
    /// Take part in leader election through this lease; only the leader writes. None: run
    /// alone (one replica, or a laptop).
    pub leader_election: Option<LeaseConfig>,
    /// Whether a controller without `serviceAccountName` may write as the operator itself.
    /// Shared clusters should say no: then every controller can do only what its own account
    /// may.
    pub allow_unimpersonated: bool,
}

impl Default for OperatorConfig {
    fn default() -> Self {
        OperatorConfig {
            workers: 8,
            scripts_dir: None,
            status_interval: Duration::from_secs(2),
            controller_selector: None,
            leader_election: None,
            allow_unimpersonated: true,
        }
    }
}

/// Why a sync failed: an Event reason and the message.
#[derive(Debug)]
pub struct Failure {
    pub reason: &'static str,
    pub message: String,
}

impl From<SyncError> for Failure {
    fn from(error: SyncError) -> Self {
        Failure {
            reason: error.reason(),
            message: error.to_string(),
        }
    }
}

impl From<ApplyError> for Failure {
    fn from(error: ApplyError) -> Self {
        Failure {
            reason: error.reason(),
            message: error.to_string(),
        }
    }
}

impl Failure {
    pub fn new(reason: &'static str, message: impl ToString) -> Failure {
        Failure {
            reason,
            message: message.to_string(),
        }
    }
}

pub struct Context {
    /// The operator's own client: reads, its controllers' status, Events.
    pub client: kube::Client,
    pub identities: Identities,
    pub discovery: Arc<Discovery>,
    pub informers: Arc<Informers>,
    pub engine: ScriptEngine,
    pub applier: Applier,
    pub metrics: Metrics,
    pub recorder: Recorder,
    pub queue: WorkQueue<WorkKey>,
    pub config: OperatorConfig,
    /// Whether this replica may write now.
    pub leadership: Arc<Leadership>,
    /// ConfigMaps, as discovery resolved them: where `configMapRef` scripts live.
    pub config_map_type: ResourceType,
}

/// Clients that impersonate the ServiceAccounts controllers name, one per account (each with
/// its own connection pool), made on first use.
pub struct Identities {
    base: kube::Config,
    clients: Mutex<HashMap<ServiceAccountRef, kube::Client>>,
}

impl Identities {
    pub fn new(base: kube::Config) -> Identities {
        Identities {
            base,
            clients: Mutex::default(),
        }
    }

    /// The writer for a controller: its account's client, or the operator's own client when it
    /// names none (and that is allowed).
    pub fn writer(
        &self,
        operator: &kube::Client,
        account: Option<&ServiceAccountRef>,
    ) -> Result<Writer, kube::Error> {
        let Some(account) = account else {
            return Ok(Writer {
                client: operator.clone(),
                identity: None,
            });
        };
        let mut clients = self.clients.lock();
        let client = match clients.get(account) {
            Some(client) => client.clone(),
            None => {
                let mut config = self.base.clone();
                config.auth_info.impersonate = Some(account.username());
                let client = kube::Client::try_from(config)?;
                clients.insert(account.clone(), client.clone());
                client
            }
        };
        Ok(Writer {
            client,
            identity: Some(account.clone()),
        })
    }
}

impl Context {
    /// An object from the watch cache.
    pub fn get(&self, reference: &ObjRef) -> Option<Arc<Value>> {
        self.informers.get(
            &reference.resource,
            reference.namespace.as_deref(),
            &reference.name,
        )
    }

    /// Runs script work on tokio's blocking pool, never on the runtime's threads, and counts
    /// it for its controller.
    pub async fn blocking<T: Send + 'static>(
        self: &Arc<Self>,
        controller: &ControllerId,
        hooks: &Arc<ControllerHooks>,
        work: impl FnOnce(&Context, &HookRunner) -> Result<T, SyncError> + Send + 'static,
    ) -> Result<T, Failure> {
        let (context, hooks, controller) = (self.clone(), hooks.clone(), controller.clone());
        tokio::task::spawn_blocking(move || {
            let runner = HookRunner {
                engine: &context.engine,
                hooks: &hooks,
                clock: None,
                logs: None,
            };
            let started = std::time::Instant::now();
            let result = work(&context, &runner).map_err(Failure::from);
            context
                .metrics
                .count_sync(&controller, started.elapsed().as_secs_f64());
            result
        })
        .await
        .map_err(|e| Failure::new("SyncFailed", format!("sync task failed: {e}")))?
    }

    /// Publishes a Kubernetes Event about an object (a leader only: Events are writes too);
    /// failures are only logged.
    pub async fn event(
        &self,
        about: &Value,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) {
        if !self.leadership.is_leader() {
            return;
        }
        let reference = k8s_openapi::api::core::v1::ObjectReference {
            api_version: Some(object::api_version(about).to_string()),
            kind: Some(object::kind(about).to_string()),
            name: Some(object::name(about).to_string()),
            namespace: object::namespace(about).map(str::to_string),
            uid: object::uid(about).map(str::to_string),
            ..Default::default()
        };
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(truncate_note(note)),
            action: action.into(),
            secondary: None,
        };
        if let Err(error) = self.recorder.publish(&event, &reference).await {
            tracing::warn!(%error, object = %object::ObjectKey::of(about), "cannot publish event");
        }
    }
}

/// Event notes are limited to 1 kB by the API.
fn truncate_note(mut note: String) -> String {
    const LIMIT: usize = 1000;
    if note.len() > LIMIT {
        let mut cut = LIMIT;
        while !note.is_char_boundary(cut) {
            cut -= 1;
        }
        note.truncate(cut);
        note.push('…');
    }
    note
}

#[cfg(test)]
mod tests {
    #[test]
    fn long_notes_are_cut_on_a_character_boundary() {
        let note = "é".repeat(600);
        let cut = super::truncate_note(note);
        assert!(cut.len() <= 1000 + '…'.len_utf8());
        assert!(cut.ends_with('…'));
        assert_eq!(super::truncate_note("short".into()), "short");
    }
}
