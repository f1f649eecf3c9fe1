//! Preparing a controller object to run, whatever its kind: resolving and watching its types,
//! and compiling its hooks, keeping the last good version when a new one fails.

use super::context::Context;
use super::scripts::CachedConfigMaps;
use super::status::{Health, Problem};
use crate::api::{Hook, HookKind, Library, ResourceRef, ScriptStatus, ServiceAccountRef};
use crate::hooks::{ConfigMapLookup, ControllerHooks, ScriptsDir};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// What loading needs from a controller object, whatever its kind.
pub struct ControllerSpec {
    pub generation: Option<i64>,
    /// Every type the controller names; each is resolved and watched before it runs.
    pub types: Vec<ResourceRef>,
    pub hooks: Vec<(HookKind, Hook)>,
    /// `spec.libraries`.
    pub libraries: Vec<Library>,
    pub resync_period: Option<Duration>,
    /// Whom its writes impersonate.
    pub service_account: Option<ServiceAccountRef>,
    /// The types its hooks may read (`spec.reads`); also in `types`.
    pub reads: Vec<ResourceRef>,
}

impl ControllerSpec {
    /// `resync_period_seconds` is `resyncPeriodSeconds`: none when unset or not positive.
    pub fn new(
        metadata: &kube::api::ObjectMeta,
        types: Vec<ResourceRef>,
        hooks: Vec<(HookKind, &Hook)>,
        resync_period_seconds: Option<i64>,
        service_account: Option<ServiceAccountRef>,
    ) -> ControllerSpec {
        ControllerSpec {
            generation: metadata.generation,
            types,
            hooks: hooks
                .into_iter()
                .map(|(kind, hook)| (kind, hook.clone()))
                .collect(),
            libraries: Vec::new(),
            resync_period: resync_period_seconds
                .filter(|s| *s > 0)
                .map(|s| Duration::from_secs(s as u64)),
            service_account,
            reads: Vec::new(),
        }
    }

    /// Adds the types the hooks may read (`spec.reads`): watched like every other type, and
    /// checked against the controller's ServiceAccount at load.
    pub fn with_reads(mut self, reads: &[ResourceRef]) -> ControllerSpec {
        self.types.extend(reads.iter().cloned());
        self.reads = reads.to_vec();
        self
    }

    pub fn with_libraries(mut self, libraries: &[Library]) -> ControllerSpec {
        self.libraries = libraries.to_vec();
        self
    }
}

/// Where a controller's scripts come from: a change there reloads the controller, even one
/// that has not loaded yet.
#[derive(Clone, Debug, Default)]
pub struct ScriptSources {
    /// ConfigMaps (namespace, name) named by `configMapRef`.
    pub config_maps: Vec<(String, String)>,
    /// ConfigMap keys a dev-loop file of the same name replaces.
    pub script_keys: Vec<String>,
}

impl ScriptSources {
    pub fn of(spec: &ControllerSpec) -> ScriptSources {
        let hooks = spec
            .hooks
            .iter()
            .filter_map(|(_, hook)| hook.script.as_ref()?.config_map_ref.clone());
        let libraries = spec
            .libraries
            .iter()
            .filter_map(|library| library.config_map_ref.clone());
        let references = hooks.chain(libraries);
        ScriptSources {
            config_maps: references.clone().map(|r| (r.namespace, r.name)).collect(),
            script_keys: references.map(|r| r.key).collect(),
        }
    }
}

/// A controller's hooks, compiled.
pub struct Prepared {
    pub hooks: Arc<ControllerHooks>,
    pub health: Health,
    /// True when the newest scripts failed and the previous version keeps running.
    pub stale: bool,
}

/// Resolves and watches every type a controller names, then compiles its hooks. When the new
/// scripts do not compile but `previous` hooks exist, those keep running and are marked stale.
pub async fn prepare(
    context: &Context,
    name: &str,
    spec: &ControllerSpec,
    previous: Option<Arc<ControllerHooks>>,
) -> Result<Prepared, Health> {
    let fail = |reason: &str, message: String| {
        Health::failed(spec.generation, Problem::new(reason, message))
    };
    let mut types = spec.types.clone();
    if !ScriptSources::of(spec).config_maps.is_empty() {
        types.push(ResourceRef {
            api_version: context.config_map_type.api_version.clone(),
            resource: context.config_map_type.plural.clone(),
        });
    }
    for reference in &types {
        let resolved = context
            .discovery
            .resolve(reference)
            .await
            .map_err(|error| fail("ResolveFailed", error.to_string()))?;
        context
            .informers
            .ensure(&resolved)
            .await
            .map_err(|error| fail("WatchFailed", error.to_string()))?;
    }
    if let Some(account) = &spec.service_account {
        for reference in &spec.reads {
            // Resolved and watched above.
            let resolved = context
                .discovery
                .resolve(reference)
                .await
                .map_err(|error| fail("ResolveFailed", error.to_string()))?;
            match may_list(&context.client, account, &resolved.resource).await {
                Ok(true) => {}
                Ok(false) => {
                    return Err(fail(
                        "ReadForbidden",
                        format!(
                            "spec.reads names {}, but the controller's ServiceAccount {} may not \
                             list it cluster-wide; hooks read with the operator's access, so \
                             the account must be allowed to read what its scripts read",
                            resolved.resource.group_key(),
                            account.username()
                        ),
                    ));
                }
                Err(error) => return Err(fail("ReadCheckFailed", error.to_string())),
            }
        }
    }
    let cached = CachedConfigMaps {
        informers: &context.informers,
        config_maps: &context.config_map_type,
    };
    let local;
    let lookup: &dyn ConfigMapLookup = match &context.config.scripts_dir {
        Some(dir) => {
            local = ScriptsDir {
                dir: dir.clone(),
                fallback: &cached,
            };
            &local
        }
        None => &cached,
    };
    let named = spec.hooks.iter().map(|(kind, hook)| (*kind, hook));
    let (hooks, scripts_loaded, stale) = match (
        ControllerHooks::load(&context.engine, name, named, &spec.libraries, lookup),
        previous,
    ) {
        (Ok(hooks), _) => (Arc::new(hooks), Ok(()), false),
        (Err(error), Some(previous)) => {
            tracing::warn!(controller = name, %error, "script failed to load; the previous version keeps running");
            (previous, Err(Problem::new("ScriptError", error)), true)
        }
        (Err(error), None) => return Err(fail("ScriptError", error.to_string())),
    };
    let scripts = hooks
        .iter()
        .map(|hook| {
            (
                hook.kind.to_string(),
                ScriptStatus {
                    digest: hook.digest().to_string(),
                    source: hook.origin().to_string(),
                    stale,
                },
            )
        })
        .collect();
    Ok(Prepared {
        hooks,
        health: Health {
            generation: spec.generation,
            ready: scripts_loaded.clone(),
            scripts_loaded,
            scripts,
        },
        stale,
    })
}

/// The digests of the hooks running, to tell whether a reload changed anything.
pub fn digests(hooks: &ControllerHooks) -> BTreeMap<String, String> {
    hooks
        .iter()
        .map(|hook| (hook.kind.to_string(), hook.digest().to_string()))
        .collect()
}

/// Whether a ServiceAccount may list a type in every namespace, asked with a
/// SubjectAccessReview (the API server's own answer, aggregated roles included).
async fn may_list(
    client: &kube::Client,
    account: &ServiceAccountRef,
    resource: &crate::resources::ResourceType,
) -> Result<bool, kube::Error> {
    use k8s_openapi::api::authorization::v1::{
        ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
    };
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(account.username()),
            groups: Some(vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{}", account.namespace),
                "system:authenticated".into(),
            ]),
            resource_attributes: Some(ResourceAttributes {
                verb: Some("list".into()),
                group: Some(resource.group().to_string()),
                resource: Some(resource.plural.clone()),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    };
    let api: kube::Api<SubjectAccessReview> = kube::Api::all(client.clone());
    let answer = api.create(&Default::default(), &review).await?;
    Ok(answer.status.is_some_and(|status| status.allowed))
}
