//! Who may make a controller run as whom. A controller acts with its ServiceAccount's rights, so
//! creating, changing or deleting one is acting as that account: the person asking must be
//! allowed the verb `use` on `serviceaccounts` in the `metascript.dev` group, in the account's
//! namespace (the ClusterRole `metascript-author`, bound there). A controller without an account
//! writes as the operator, which can do more than any one account: that needs `use` on every
//! account, cluster-wide. The operator's own account is never usable.
//!
//! This is the pure side (what a request needs checked); the admission webhook asks the API
//! server (SubjectAccessReviews for the requesting user) and the runtime refuses to load what
//! admission would refuse.

use crate::api::{GROUP, InvalidAccount, ServiceAccountRef};
use serde_json::Value;
use std::fmt;

/// The verb that lets a user make controllers run as an account.
pub(crate) const USE_VERB: &str = "use";

/// The resource (in [`GROUP`]) the verb is granted on: RBAC's own `serviceaccounts`, in the
/// operator's API group, so granting it gives nothing else (neither `kubectl --as` nor tokens).
pub(crate) const ACCOUNTS_RESOURCE: &str = "serviceaccounts";

/// Whom a controller's writes go as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum RunsAs {
    Account(ServiceAccountRef),
    /// No account: the operator itself (only where `--allow-unimpersonated` allows it).
    Operator,
}

impl RunsAs {
    /// From a controller object's spec.
    pub(crate) fn of(controller: &Value) -> Result<RunsAs, InvalidAccount> {
        let (name, namespace) = account_fields(controller);
        Ok(
            ServiceAccountRef::from_spec(name, namespace)?
                .map_or(RunsAs::Operator, RunsAs::Account),
        )
    }

    /// Whom an existing controller runs as: a controller saved before accounts needed their
    /// namespace ran as its account in the namespace that used to be the default, and whoever
    /// may use that account owns it.
    pub(crate) fn as_it_ran(controller: &Value) -> RunsAs {
        RunsAs::of(controller).unwrap_or_else(|_| {
            let (name, namespace) = account_fields(controller);
            ServiceAccountRef::as_it_ran(name, namespace).map_or(RunsAs::Operator, RunsAs::Account)
        })
    }

    /// What a SubjectAccessReview asks to allow using it: the namespace and name of the
    /// account, or (the operator) every account everywhere.
    pub(crate) fn use_attributes(&self) -> (Option<&str>, Option<&str>) {
        match self {
            RunsAs::Account(account) => (Some(&account.namespace), Some(&account.name)),
            RunsAs::Operator => (None, None),
        }
    }
}

impl fmt::Display for RunsAs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunsAs::Account(account) => {
                write!(f, "ServiceAccount {}/{}", account.namespace, account.name)
            }
            RunsAs::Operator => f.write_str("the operator itself (no serviceAccountName)"),
        }
    }
}

/// A controller spec's `serviceAccountName` and `serviceAccountNamespace`.
fn account_fields(controller: &Value) -> (Option<&str>, Option<&str>) {
    let field = |name: &str| controller["spec"].get(name).and_then(Value::as_str);
    (
        field("serviceAccountName"),
        field("serviceAccountNamespace"),
    )
}

/// What an admission request asks of a controller object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Operation {
    Create,
    Update,
    Delete,
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Operation::Create => "a creation",
            Operation::Update => "an update",
            Operation::Delete => "a deletion",
        })
    }
}

/// What a request must be checked for.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Checks {
    /// Whom the controller runs as now: changing or deleting it is acting as that account, so
    /// the requester must be allowed to use it.
    pub now: Option<RunsAs>,
    /// Whom it will run as: the requester must be allowed to use it, and it may not be the
    /// operator's own account.
    pub next: Option<RunsAs>,
    /// The spec changed: its scripts compile and its `spec.tests` pass before it is stored.
    pub scripts: bool,
}

impl Checks {
    /// The accounts the requester must be allowed to use, each once.
    pub(crate) fn accounts(&self) -> Vec<&RunsAs> {
        let mut accounts: Vec<&RunsAs> = self.now.iter().collect();
        if let Some(next) = &self.next
            && !accounts.contains(&next)
        {
            accounts.push(next);
        }
        accounts
    }
}

/// The annotations on a controller that make it act: a change to one is a change of what runs.
const ACTING_PREFIX: &str = "metascript.dev/";

/// Finalizers the API server and its garbage collector set and clear on any object: never a
/// change of what runs.
const KUBERNETES_FINALIZERS: [&str; 2] = ["orphan", "foregroundDeletion"];

/// What must be checked before `operation` takes a controller from `old` to `new`. Status
/// never needs a check, nor do the garbage collector's finalizers or other metadata; the spec,
/// labels (they decide which operator and which shard serves it), the operator's annotations
/// (sync now, promote, abort) and any other finalizer (removing the operator's mid-release
/// would leave the targets' finalizers behind) do. The operator itself may use every account,
/// so its own finalizer writes pass. `Err` when the new object names no usable account.
pub(crate) fn checks(
    operation: Operation,
    old: Option<&Value>,
    new: Option<&Value>,
) -> Result<Checks, InvalidAccount> {
    match (operation, old, new) {
        (Operation::Create, _, Some(new)) => Ok(Checks {
            now: None,
            next: Some(RunsAs::of(new)?),
            scripts: true,
        }),
        (Operation::Update, Some(old), Some(new)) => {
            let spec_changed = old.get("spec") != new.get("spec");
            if !spec_changed && !acting_metadata_changed(old, new) {
                return Ok(Checks::default());
            }
            // Metadata alone leaves the account as it is: only its owner's right is asked, so
            // a controller saved before accounts needed a namespace (or naming the operator's
            // own) can still have its finalizer released and be deleted.
            Ok(Checks {
                now: Some(RunsAs::as_it_ran(old)),
                next: match spec_changed {
                    true => Some(RunsAs::of(new)?),
                    false => None,
                },
                scripts: spec_changed,
            })
        }
        (Operation::Delete, Some(old), _) => Ok(Checks {
            now: Some(RunsAs::as_it_ran(old)),
            next: None,
            scripts: false,
        }),
        // An update or deletion without the stored object cannot be judged; the caller
        // refuses it (see `incomplete`).
        _ => Ok(Checks::default()),
    }
}

/// Whether a request lacks the object a check needs (an update or deletion without the stored
/// object, a creation or update without the new one): refused rather than waved through.
pub(crate) fn incomplete(operation: Operation, old: Option<&Value>, new: Option<&Value>) -> bool {
    match operation {
        Operation::Create => new.is_none(),
        Operation::Update => old.is_none() || new.is_none(),
        Operation::Delete => old.is_none(),
    }
}

fn acting_metadata_changed(old: &Value, new: &Value) -> bool {
    let labels = |object: &Value| object.pointer("/metadata/labels").cloned();
    let acting = |object: &Value| -> Vec<(String, Value)> {
        object
            .pointer("/metadata/annotations")
            .and_then(Value::as_object)
            .map(|annotations| {
                annotations
                    .iter()
                    .filter(|(key, _)| key.starts_with(ACTING_PREFIX))
                    .map(|(key, value)| (key.clone(), value.clone()))
                    .collect()
            })
            .unwrap_or_default()
    };
    let finalizers = |object: &Value| -> Vec<Value> {
        object
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .map(|finalizers| {
                finalizers
                    .iter()
                    .filter(|f| {
                        !f.as_str()
                            .is_some_and(|f| KUBERNETES_FINALIZERS.contains(&f))
                    })
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    };
    labels(old) != labels(new) || acting(old) != acting(new) || finalizers(old) != finalizers(new)
}

/// Why a requester may not make a controller run as `runs_as`, said so that they (or an
/// admin) know what to grant.
pub(crate) fn refusal(user: &str, runs_as: &RunsAs) -> String {
    match runs_as {
        RunsAs::Account(account) => format!(
            "user {user:?} may not use ServiceAccount {}/{}: a controller acts with its \
             account's rights, so creating, changing or deleting one needs the verb \"{USE_VERB}\" \
             on {ACCOUNTS_RESOURCE}.{GROUP} in namespace {} (bind the ClusterRole \
             metascript-author there)",
            account.namespace, account.name, account.namespace
        ),
        RunsAs::Operator => format!(
            "user {user:?} may not write a controller without spec.serviceAccountName: such a \
             controller writes as the operator itself, so it needs the verb \"{USE_VERB}\" on \
             every {ACCOUNTS_RESOURCE}.{GROUP}, cluster-wide (cluster admins); name a \
             ServiceAccount you may use instead"
        ),
    }
}

/// Why an undo may not serve `earlier` (a revision's snapshot of the controller) again, when
/// it ran as someone other than `now` (the controller as it is). The undo annotation skips the
/// webhook, and the brake's check asks `use` of the current account only: an undo that changed
/// the account would let a user of one account bring back a revision that ran as another.
pub(crate) fn undo_refusal(earlier: &Value, now: &Value) -> Option<String> {
    let (ran, runs) = (RunsAs::of(earlier), RunsAs::of(now));
    if let (Ok(ran), Ok(runs)) = (&ran, &runs)
        && ran == runs
    {
        return None;
    }
    let said = |runs_as: &Result<RunsAs, InvalidAccount>| match runs_as {
        Ok(runs_as) => runs_as.to_string(),
        Err(invalid) => format!("an account that is not valid ({invalid})"),
    };
    Some(format!(
        "ran as {}, and the controller now runs as {}: an undo never changes whom a \
         controller runs as, since the undo annotation is not checked by the admission webhook. \
         To run that revision again, apply its spec (serviceAccountName included) as a change: \
         admission then checks that you may use its account",
        said(&ran),
        said(&runs)
    ))
}

/// Why no controller may run as the operator's own account.
pub(crate) fn own_account_refusal(account: &ServiceAccountRef) -> String {
    format!(
        "ServiceAccount {}/{} is the operator's own: no controller may run as it (it can read \
         what every controller reads, write their status and the operator's leases); name an \
         account of the namespace the controller works for",
        account.namespace, account.name
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn controller(account: Option<(&str, &str)>, code: &str) -> Value {
        let mut object = json!({
            "apiVersion": "metascript.dev/v1alpha1", "kind": "DecoratorController",
            "metadata": {"name": "c", "labels": {"team": "a"}, "annotations": {"note": "x"}},
            "spec": {"hooks": {"sync": {"script": {"inline": code}}}},
        });
        if let Some((namespace, name)) = account {
            object["spec"]["serviceAccountName"] = name.into();
            object["spec"]["serviceAccountNamespace"] = namespace.into();
        }
        object
    }

    fn account(namespace: &str, name: &str) -> RunsAs {
        RunsAs::Account(ServiceAccountRef {
            namespace: namespace.into(),
            name: name.into(),
        })
    }

    #[test]
    fn creating_needs_the_new_account_and_the_scripts_checked() {
        let new = controller(Some(("team-a", "bot")), "#{}");
        let checks = checks(Operation::Create, None, Some(&new)).unwrap();
        assert_eq!(checks.accounts(), vec![&account("team-a", "bot")]);
        assert!(checks.scripts);
        let none = controller(None, "#{}");
        let checks = super::checks(Operation::Create, None, Some(&none)).unwrap();
        assert_eq!(checks.accounts(), vec![&RunsAs::Operator]);
    }

    #[test]
    fn changing_the_account_needs_both_and_deleting_needs_the_old_one() {
        let old = controller(Some(("team-b", "bot")), "#{}");
        let new = controller(Some(("team-a", "bot")), "#{}");
        let checks = checks(Operation::Update, Some(&old), Some(&new)).unwrap();
        assert_eq!(checks.now, Some(account("team-b", "bot")));
        assert_eq!(checks.next, Some(account("team-a", "bot")));
        assert_eq!(checks.accounts().len(), 2);
        assert!(checks.scripts);
        let checks = super::checks(Operation::Delete, Some(&old), None).unwrap();
        assert_eq!(checks.accounts(), vec![&account("team-b", "bot")]);
        assert_eq!(checks.next, None);
        assert!(!checks.scripts);
    }

    #[test]
    fn status_the_collectors_finalizers_and_other_metadata_need_no_check() {
        let old = controller(Some(("team-a", "bot")), "#{}");
        let mut new = old.clone();
        new["status"] = json!({"observedGeneration": 2});
        new["metadata"]["finalizers"] = json!(["foregroundDeletion", "orphan"]);
        new["metadata"]["annotations"]["note"] = "y".into();
        new["metadata"]["resourceVersion"] = "7".into();
        assert_eq!(
            checks(Operation::Update, Some(&old), Some(&new)).unwrap(),
            Checks::default()
        );
    }

    #[test]
    fn labels_annotations_and_finalizers_need_the_account_but_no_script_check() {
        let old = controller(Some(("team-a", "bot")), "#{}");
        for change in [
            json!({"metadata": {"labels": {"team": "b"}}}),
            json!({"metadata": {"annotations": {"metascript.dev/promote": "true"}}}),
            json!({"metadata": {"annotations": {"metascript.dev/sync-requested-at": "now"}}}),
            // Removing the operator's finalizer mid-release would leave targets' behind.
            json!({"metadata": {"finalizers": ["metascript.dev/release-targets"]}}),
        ] {
            let mut new = old.clone();
            json_patch::merge(&mut new, &change);
            let checks = checks(Operation::Update, Some(&old), Some(&new)).unwrap();
            assert_eq!(
                checks.accounts(),
                vec![&account("team-a", "bot")],
                "{change}"
            );
            assert!(!checks.scripts, "{change}");
        }
    }

    #[test]
    fn an_account_without_its_namespace_is_refused_but_its_owner_can_fix_or_delete_it() {
        let mut legacy = controller(None, "#{}");
        legacy["spec"]["serviceAccountName"] = "bot".into();
        assert_eq!(
            checks(Operation::Create, None, Some(&legacy)),
            Err(InvalidAccount::NoNamespace { name: "bot".into() })
        );
        // It ran as the account in the namespace that used to be the default: whoever may
        // use that one owns it.
        let ran_as = account(crate::api::LEGACY_SERVICE_ACCOUNT_NAMESPACE, "bot");
        let fixed = controller(Some(("team-a", "bot")), "#{}");
        let checks = checks(Operation::Update, Some(&legacy), Some(&fixed)).unwrap();
        assert_eq!(checks.now, Some(ran_as.clone()));
        assert_eq!(checks.next, Some(account("team-a", "bot")));
        let deleted = super::checks(Operation::Delete, Some(&legacy), None).unwrap();
        assert_eq!(deleted.accounts(), vec![&ran_as]);
        // Its finalizer released while it is deleted: the spec is not judged again.
        let mut released = legacy.clone();
        legacy["metadata"]["finalizers"] = json!(["metascript.dev/release-targets"]);
        released["metadata"]["finalizers"] = json!([]);
        let release = super::checks(Operation::Update, Some(&legacy), Some(&released)).unwrap();
        assert_eq!(release.accounts(), vec![&ran_as]);
        assert_eq!(release.next, None);
    }

    #[test]
    fn a_request_without_the_object_a_check_needs_is_incomplete() {
        let object = controller(Some(("team-a", "bot")), "#{}");
        assert!(incomplete(Operation::Update, None, Some(&object)));
        assert!(incomplete(Operation::Delete, None, None));
        assert!(incomplete(Operation::Create, None, None));
        assert!(!incomplete(Operation::Delete, Some(&object), None));
        assert!(!incomplete(Operation::Update, Some(&object), Some(&object)));
    }

    #[test]
    fn a_qualified_name_says_how_to_split_it() {
        let mut object = controller(None, "#{}");
        object["spec"]["serviceAccountName"] = "team-a/bot".into();
        let error = RunsAs::of(&object).unwrap_err().to_string();
        assert!(
            error.contains(r#"serviceAccountName: "bot" and serviceAccountNamespace: "team-a""#),
            "{error}"
        );
    }

    #[test]
    fn an_undo_keeps_whom_the_controller_runs_as() {
        let bot_a = controller(Some(("team-a", "bot")), "#{}");
        let edited = controller(Some(("team-a", "bot")), "#{ labels: #{} }");
        assert_eq!(undo_refusal(&bot_a, &edited), None);
        let operator = controller(None, "#{}");
        assert_eq!(undo_refusal(&operator, &controller(None, "x")), None);
        let bot_b = controller(Some(("team-b", "bot")), "#{}");
        for (earlier, now, ran) in [
            (&bot_a, &bot_b, "ServiceAccount team-a/bot"),
            (&operator, &bot_b, "the operator itself"),
            (&bot_b, &operator, "ServiceAccount team-b/bot"),
        ] {
            let why = undo_refusal(earlier, now).expect("another account is refused");
            assert!(why.starts_with(&format!("ran as {ran}")), "{why}");
            assert!(why.contains("apply its spec"), "{why}");
        }
        let mut legacy = controller(None, "#{}");
        legacy["spec"]["serviceAccountName"] = "bot".into();
        let why = undo_refusal(&legacy, &bot_a).expect("an invalid account is refused");
        assert!(why.contains("not valid"), "{why}");
    }

    #[test]
    fn refusals_say_what_to_grant_and_where() {
        let message = refusal("alice", &account("team-b", "bot"));
        for part in [
            "\"alice\"",
            "team-b/bot",
            "\"use\" on serviceaccounts.metascript.dev in namespace team-b",
            "metascript-author",
        ] {
            assert!(message.contains(part), "{part:?} in {message}");
        }
        assert!(refusal("alice", &RunsAs::Operator).contains("cluster-wide"));
    }
}
