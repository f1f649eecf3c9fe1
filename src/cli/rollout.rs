//! `metascript rollout status|promote|abort|undo KIND/NAME`: where a controller's staged
//! rollout stands, and the decisions a person makes about it. Promotion, abort and undo are the
//! controller's `metascript.dev/promote`, `abort` and `undo` annotations, which the operator
//! acts on; this only writes them. Such an update skips the admission webhook (the API server
//! checks it itself), so the brake works while the webhook is down.

use super::cluster::{self, value};
use crate::api::{ABORT_ANNOTATION, PROMOTE_ANNOTATION, RolloutStatus, UNDO_ANNOTATION};
use crate::kinds::ControllerKind;
use crate::object;
use anyhow::Context as _;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub(crate) struct RolloutArgs {
    #[command(subcommand)]
    pub action: RolloutAction,
    /// Kubeconfig to use; without it, $KUBECONFIG, ~/.kube/config or the in-cluster config.
    #[arg(long, global = true)]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context to use instead of the current one.
    #[arg(long, global = true)]
    pub context: Option<String>,
}

#[derive(Debug, clap::Subcommand)]
pub(crate) enum RolloutAction {
    /// Where the rollout stands: the revision serving, the candidate and its step, a shadow's
    /// findings, a revision held back and why.
    Status {
        /// The controller, as KIND/NAME (`dec/web`, `mapcontroller/m`, `cc/x`).
        controller: String,
        /// Print `status.rollout` as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Serve the candidate revision (or the one held back) everywhere now, whatever its
    /// strategy still waits for.
    Promote {
        controller: String,
        /// The revision to promote; default: the candidate, else the revision held back.
        #[arg(long)]
        revision: Option<String>,
    },
    /// Stop rolling out the candidate: the serving revision serves every object again, until
    /// the controller changes or the revision is promoted.
    Abort {
        controller: String,
        /// The revision to abort; default: the candidate.
        #[arg(long)]
        revision: Option<String>,
    },
    /// Go back one revision: the candidate is aborted, or (none staged) the revision that
    /// served before the serving one serves every object again, from its snapshot. The undone
    /// revision is held back until the controller changes or it is promoted.
    Undo {
        controller: String,
        /// The revision to undo; default: the candidate, else the serving revision.
        #[arg(long)]
        revision: Option<String>,
    },
}

pub(super) async fn rollout(args: &RolloutArgs) -> anyhow::Result<String> {
    let client = cluster::client(args.kubeconfig.as_deref(), args.context.as_deref()).await?;
    let named = match &args.action {
        RolloutAction::Status { controller, .. }
        | RolloutAction::Promote { controller, .. }
        | RolloutAction::Abort { controller, .. }
        | RolloutAction::Undo { controller, .. } => controller,
    };
    let (kind, name) = controller_named(named)?;
    let resource = cluster::controller_resource(kind);
    let api: Api<DynamicObject> = Api::all_with(client, &resource);
    let found = api
        .get_opt(name)
        .await?
        .with_context(|| format!("{} {name} not found", kind.name().object_kind()))?;
    let object = value(found, &resource);
    let label = format!("{}/{name}", kind.name().object_kind());
    let status = crate::runtime::rollout::rollout_status(&object);
    match &args.action {
        RolloutAction::Status { json, .. } => {
            if *json {
                return Ok(serde_json::to_string_pretty(&status)? + "\n");
            }
            let mut out = describe(&label, &object, status.as_ref());
            out.push_str(&format!(
                "  admission webhook: {}\n",
                webhook_probe(&api, name).await
            ));
            Ok(out)
        }
        RolloutAction::Promote { revision, .. } => {
            let revision = match revision {
                Some(revision) => revision.clone(),
                None => status
                    .as_ref()
                    .and_then(|s| {
                        s.candidate
                            .clone()
                            .or_else(|| s.halted.as_ref().map(|h| h.revision.clone()))
                    })
                    .with_context(|| {
                        format!(
                            "{label} reports no candidate revision and none held back to \
                             promote (the operator reports a new one within its status interval)"
                        )
                    })?,
            };
            annotate(&api, name, PROMOTE_ANNOTATION, &revision).await?;
            Ok(format!(
                "{label}: revision {revision} promoted ({PROMOTE_ANNOTATION}); the operator \
                 serves it everywhere at once\n"
            ))
        }
        RolloutAction::Abort { revision, .. } => {
            let revision = match revision {
                Some(revision) => revision.clone(),
                None => status
                    .as_ref()
                    .and_then(|s| s.candidate.clone())
                    .with_context(|| {
                        format!(
                            "{label} reports no candidate revision to abort (the operator \
                             reports a new one within its status interval)"
                        )
                    })?,
            };
            annotate(&api, name, ABORT_ANNOTATION, &revision).await?;
            Ok(format!(
                "{label}: revision {revision} aborted ({ABORT_ANNOTATION}); the serving revision \
                 serves every object\n"
            ))
        }
        RolloutAction::Undo { revision, .. } => {
            let revision = match revision {
                Some(revision) => revision.clone(),
                None => undo_target(&label, &object, status.as_ref())?,
            };
            // An older promotion of the same revision would win over the undo.
            let patch = json!({"metadata": {"annotations": {
                UNDO_ANNOTATION: revision, PROMOTE_ANNOTATION: null,
            }}});
            patch_annotations(&api, name, &patch).await?;
            // The operator acts only while the revision is the newest (a script edit since
            // the status was read makes another one newest), so this says what was asked.
            Ok(format!(
                "{label}: undo of revision {revision} asked ({UNDO_ANNOTATION}); if it is still \
                 the newest revision, the revision before it serves every object, else nothing \
                 changes. See metascript rollout status {label}\n"
            ))
        }
    }
}

/// The kind and name of `KIND/NAME`, KIND being a kind's name in any of its spellings.
fn controller_named(text: &str) -> anyhow::Result<(&'static dyn ControllerKind, &str)> {
    let (kind, name) = text
        .split_once('/')
        .filter(|(_, name)| !name.is_empty())
        .with_context(|| format!("{text:?}: expected KIND/NAME, e.g. dec/service-per-pod"))?;
    let wanted = kind.to_ascii_lowercase();
    let found = crate::kinds::ALL.iter().copied().find(|candidate| {
        let names = candidate.name();
        [
            names.as_str(),
            names.short_name(),
            names.plural(),
            &names.object_kind().to_ascii_lowercase(),
        ]
        .iter()
        .any(|spelling| *spelling == wanted)
    });
    let kind = found.with_context(|| {
        format!("{kind:?} is not a metascript controller kind (dec, mapc or cc)")
    })?;
    Ok((kind, name))
}

/// The revision `undo` goes back from: the candidate, else the serving revision, unless a
/// revision is held back already (then the serving one is not the newest, and undo has
/// nothing to go back from), or the status lags the controller's spec (it may name a revision
/// that is no longer the newest, and the undo would do nothing).
fn undo_target(
    label: &str,
    controller: &Value,
    status: Option<&RolloutStatus>,
) -> anyhow::Result<String> {
    let status = status.with_context(|| {
        format!(
            "{label} reports no staged rollout: undo needs spec.rollout.strategy Shadow or \
             Canary, whose snapshots keep the revision before"
        )
    })?;
    let generation = controller
        .pointer("/metadata/generation")
        .and_then(Value::as_i64);
    let observed = controller
        .pointer("/status/observedGeneration")
        .and_then(Value::as_i64);
    if generation.is_some() && observed != generation {
        anyhow::bail!(
            "{label}: its status is of generation {}, not of the newest ({}): the revision it \
             names may no longer be the newest, and undoing it would do nothing. Wait until the \
             operator reports the newest (metascript rollout status {label}), or name the \
             revision with --revision",
            observed.map_or_else(|| "none".to_string(), |g| g.to_string()),
            generation.unwrap_or_default()
        );
    }
    if let Some(candidate) = &status.candidate {
        return Ok(candidate.clone());
    }
    if let Some(halted) = &status.halted {
        anyhow::bail!(
            "{label}: revision {} is held back already ({}) and {} serves; undo goes back one \
             revision from the newest. To go further back, apply the spec you want (it rolls out \
             as a change), or promote {} to serve it again",
            halted.revision,
            halted.reason,
            status.serving,
            halted.revision
        );
    }
    Ok(status.serving.clone())
}

/// Sets one annotation on a controller, as the CLI's own field manager.
async fn annotate(
    api: &Api<DynamicObject>,
    name: &str,
    key: &str,
    value: &str,
) -> anyhow::Result<()> {
    patch_annotations(
        api,
        name,
        &json!({"metadata": {"annotations": {key: value}}}),
    )
    .await
}

/// Merges `patch` (annotations only: the brake) into a controller.
async fn patch_annotations(
    api: &Api<DynamicObject>,
    name: &str,
    patch: &Value,
) -> anyhow::Result<()> {
    let params = PatchParams {
        field_manager: Some("metascript-cli".to_string()),
        ..PatchParams::default()
    };
    api.patch(name, &params, &Patch::Merge(patch))
        .await
        .with_context(|| format!("annotating {name}"))?;
    Ok(())
}

/// An annotation only a dry run sets: a change the admission webhook judges.
const PROBE_ANNOTATION: &str = "metascript.dev/webhook-probe";

/// Whether the API server can call the admission webhook, found by a server-side dry run of a
/// change it judges (nothing is stored). The brake does not need it; every other change of a
/// controller does.
async fn webhook_probe(api: &Api<DynamicObject>, name: &str) -> String {
    let patch = json!({"metadata": {"annotations": {PROBE_ANNOTATION: "probe"}}});
    let params = PatchParams {
        field_manager: Some("metascript-cli".to_string()),
        dry_run: true,
        ..PatchParams::default()
    };
    let answer = api.patch(name, &params, &Patch::Merge(&patch)).await;
    probe_verdict(answer.map(drop).map_err(|error| error.to_string()))
}

/// What a dry run's answer says of the webhook.
fn probe_verdict(answer: Result<(), String>) -> String {
    match answer {
        Ok(()) => "reachable".into(),
        Err(error) if error.contains("failed calling webhook") => format!(
            "UNREACHABLE: controllers cannot be created or changed until it serves again; the \
             rollout brake (promote, abort, undo) works without it. The API server says: \
             {error}"
        ),
        Err(error) if error.contains("denied the request") => "reachable".into(),
        Err(error) => format!("unknown (a dry-run change was refused: {error})"),
    }
}

/// The status as people read it.
fn describe(label: &str, object: &Value, status: Option<&RolloutStatus>) -> String {
    let mut out = format!("{label}\n");
    let Some(status) = status else {
        out.push_str(
            "  no staged rollout: every revision serves at once (spec.rollout.strategy \
             Immediate)\n",
        );
        return out;
    };
    out.push_str(&format!("  strategy: {:?}\n", status.strategy));
    out.push_str(&format!("  serving: revision {}\n", status.serving));
    if let Some(candidate) = &status.candidate {
        out.push_str(&format!("  candidate: revision {candidate}"));
        if let (Some(step), Some(started)) = (status.step, &status.step_started_at) {
            let steps = object
                .pointer("/spec/rollout/steps")
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            out.push_str(&format!(", step {} of {steps} since {started}", step + 1));
        }
        if let Some(canary) = &status.canary {
            out.push_str(&format!(
                "; serves {} work item(s), {} failing",
                canary.serving, canary.failing
            ));
        }
        out.push('\n');
    }
    if let Some(shadow) = &status.shadow {
        out.push_str(&format!(
            "  shadow evaluation at {}: {} evaluated, {} to create, {} to change, {} to delete, \
             {} to adopt or release, {} error(s)\n",
            shadow.evaluated_at,
            shadow.evaluated,
            shadow.would_create,
            shadow.would_update,
            shadow.would_delete,
            shadow.would_claim,
            shadow.errors
        ));
        for example in &shadow.examples {
            out.extend(example.lines().map(|line| format!("    {line}\n")));
        }
    }
    if let Some(halted) = &status.halted {
        out.push_str(&format!(
            "  held back: revision {} ({}): {}\n",
            halted.revision, halted.reason, halted.message
        ));
    }
    let condition = object
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Rollout");
    if let Some(condition) = condition {
        out.push_str(&format!(
            "  condition Rollout: {} {}{}\n",
            object::str_at(condition, "/status").unwrap_or_default(),
            object::str_at(condition, "/reason").unwrap_or_default(),
            object::str_at(condition, "/message")
                .filter(|m| !m.is_empty())
                .map(|m| format!(": {m}"))
                .unwrap_or_default()
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_webhook_probe_tells_unreachable_from_refused() {
        assert_eq!(probe_verdict(Ok(())), "reachable");
        let down = probe_verdict(Err("Internal error occurred: failed calling webhook \"controllers.metascript.dev\": connection refused".into()));
        assert!(down.starts_with("UNREACHABLE"), "{down}");
        assert!(down.contains("connection refused"), "{down}");
        let refused = probe_verdict(Err(
            "admission webhook \"controllers.metascript.dev\" denied the request: user may not use"
                .into(),
        ));
        assert_eq!(refused, "reachable");
        let forbidden = probe_verdict(Err("cannot patch resource".into()));
        assert!(forbidden.starts_with("unknown"), "{forbidden}");
    }

    #[test]
    fn undo_goes_back_from_the_candidate_or_the_serving_revision_once() {
        let status = |value| serde_json::from_value::<RolloutStatus>(value).unwrap();
        let current = json!({"metadata": {"generation": 3}, "status": {"observedGeneration": 3}});
        let staged = status(json!({"strategy": "Canary", "serving": "aaa", "candidate": "bbb"}));
        assert_eq!(undo_target("c", &current, Some(&staged)).unwrap(), "bbb");
        let serving = status(json!({"strategy": "Canary", "serving": "bbb"}));
        assert_eq!(undo_target("c", &current, Some(&serving)).unwrap(), "bbb");
        let undone = status(json!({"strategy": "Canary", "serving": "aaa",
            "halted": {"revision": "bbb", "reason": "Undone", "message": "m"}}));
        let error = undo_target("c", &current, Some(&undone))
            .unwrap_err()
            .to_string();
        assert!(error.contains("held back already (Undone)"), "{error}");
        assert!(undo_target("c", &current, None).is_err());
    }

    /// A status that lags the spec names a revision that may no longer be the newest: the
    /// default is refused rather than an undo that would do nothing.
    #[test]
    fn undo_refuses_a_default_from_a_stale_status() {
        let serving: RolloutStatus =
            serde_json::from_value(json!({"strategy": "Canary", "serving": "bbb"})).unwrap();
        for stale in [
            json!({"metadata": {"generation": 4}, "status": {"observedGeneration": 3}}),
            json!({"metadata": {"generation": 4}, "status": {}}),
        ] {
            let error = undo_target("c", &stale, Some(&serving))
                .unwrap_err()
                .to_string();
            assert!(error.contains("not of the newest (4)"), "{error}");
            assert!(error.contains("--revision"), "{error}");
        }
    }

    #[test]
    fn a_controller_is_named_by_any_spelling_of_its_kind() {
        for text in [
            "dec/web",
            "decorator/web",
            "DecoratorController/web",
            "decoratorcontrollers/web",
        ] {
            let (kind, name) = controller_named(text).unwrap();
            assert_eq!(kind.name().object_kind(), "DecoratorController", "{text}");
            assert_eq!(name, "web");
        }
        assert_eq!(
            controller_named("cc/x").unwrap().0.name().object_kind(),
            "CompositeController"
        );
        let error = controller_named("deployment/x").err().unwrap().to_string();
        assert!(
            error.contains("not a metascript controller kind"),
            "{error}"
        );
        assert!(controller_named("dec").is_err());
        assert!(controller_named("dec/").is_err());
    }

    #[test]
    fn the_status_says_what_serves_and_what_waits() {
        let status: RolloutStatus = serde_json::from_value(json!({
            "strategy": "Canary", "serving": "aaa", "candidate": "bbb", "step": 0,
            "stepStartedAt": "2026-01-01T00:00:00Z", "canary": {"serving": 20, "failing": 1}
        }))
        .unwrap();
        let object = json!({
            "spec": {"rollout": {"steps": [{"percent": 10}, {"percent": 50}]}},
            "status": {"conditions": [{"type": "Rollout", "status": "False", "reason": "CanaryInProgress", "message": "m"}]}
        });
        let text = describe("DecoratorController/web", &object, Some(&status));
        assert!(text.contains("serving: revision aaa"), "{text}");
        assert!(
            text.contains("candidate: revision bbb, step 1 of 2 since 2026-01-01T00:00:00Z; serves 20 work item(s), 1 failing"),
            "{text}"
        );
        assert!(
            text.contains("condition Rollout: False CanaryInProgress: m"),
            "{text}"
        );
        let none = describe("DecoratorController/web", &object, None);
        assert!(none.contains("no staged rollout"), "{none}");
    }
}
