//! What an RBAC change can alter, and how changes are gathered before their answers are
//! forgotten.
//!
//! Cached answers ([`crate::runtime::reads::access`]) are keyed by account, verb, type and namespace. A change
//! to a Role, ClusterRole or binding can only alter some of them: [`reach`] says which (pure,
//! from the object before and after), and [`RbacChanges`] gathers the changes of a second into
//! one [`Batch`], so a busy cluster (namespaces created with their RoleBindings all day) costs
//! one forget a second, of only the answers those changes can alter.
//!
//! What each change reaches:
//! - a **Role** or **RoleBinding** in namespace N: reads in N only (neither grants anything
//!   elsewhere, nor cluster-wide). A Role, whoever it is bound to: every account there. A
//!   RoleBinding: the accounts its subjects cover.
//! - a **ClusterRoleBinding**: the accounts its subjects cover, in every namespace and
//!   cluster-wide.
//! - a **ClusterRole**: everything. It may be bound by any binding anywhere, and aggregation
//!   rewrites ClusterRoles; finding its bindings would cost more than it saves for a change that
//!   is rare beside namespaces and their bindings.
//!
//! A change that leaves a role's rules, or a binding's role and subjects, as they were (labels,
//! annotations) reaches nothing. What the watch does not see (a version missed between two
//! lists, authorizers other than RBAC) is left to the answers' expiry.

use crate::api::ServiceAccountRef;
use crate::object;
use crate::resources::ResourceType;
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// The API version of the RBAC types.
const RBAC_API_VERSION: &str = "rbac.authorization.k8s.io/v1";

/// The types whose changes may change an answer, as the operator watches them.
pub(crate) const RBAC_TYPES: [(&str, &str); 4] = [
    (RBAC_API_VERSION, "roles"),
    (RBAC_API_VERSION, "rolebindings"),
    (RBAC_API_VERSION, "clusterroles"),
    (RBAC_API_VERSION, "clusterrolebindings"),
];

/// How long RBAC changes are gathered before their answers are forgotten together: at most one
/// forget (and one retry of refused work) per window, however many changes it saw.
pub(crate) const RBAC_WINDOW: Duration = Duration::from_secs(1);

/// How long after a window closes its answers are forgotten: the API server's authorizer learns
/// of a change through a watch of its own, a moment after ours, so a question asked before then
/// could get the old answer again.
pub(crate) const RBAC_SETTLE: Duration = Duration::from_millis(500);

/// Which RBAC type an object is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RbacKind {
    Role,
    ClusterRole,
    RoleBinding,
    ClusterRoleBinding,
}

impl RbacKind {
    /// The RBAC type of a resource type; `None` for every other type.
    pub(crate) fn of(resource: &ResourceType) -> Option<RbacKind> {
        if resource.api_version != RBAC_API_VERSION {
            return None;
        }
        match resource.plural.as_str() {
            "roles" => Some(RbacKind::Role),
            "clusterroles" => Some(RbacKind::ClusterRole),
            "rolebindings" => Some(RbacKind::RoleBinding),
            "clusterrolebindings" => Some(RbacKind::ClusterRoleBinding),
            _ => None,
        }
    }
}

/// Accounts an RBAC subject covers, among those whose reads are checked.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Covered {
    /// One ServiceAccount (a `ServiceAccount` subject, or a `User` named as its username).
    Account { namespace: String, name: String },
    /// Every ServiceAccount of a namespace (group `system:serviceaccounts:<namespace>`).
    AccountsIn(String),
}

/// Whose answers a change can alter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Whose {
    /// Every account's.
    Every,
    /// Those of the accounts covered (never empty).
    Of(BTreeSet<Covered>),
}

impl Whose {
    fn merge(&mut self, other: Whose) {
        match (&mut *self, other) {
            (Whose::Every, _) => {}
            (_, Whose::Every) => *self = Whose::Every,
            (Whose::Of(mine), Whose::Of(theirs)) => mine.extend(theirs),
        }
    }

    /// Whether `account`'s answers are among them (`None`: an account not known, so maybe).
    fn covers(&self, account: Option<&ServiceAccountRef>) -> bool {
        match (self, account) {
            (Whose::Every, _) | (Whose::Of(_), None) => true,
            (Whose::Of(covered), Some(account)) => covered.iter().any(|c| match c {
                Covered::Account { namespace, name } => {
                    *namespace == account.namespace && *name == account.name
                }
                Covered::AccountsIn(namespace) => *namespace == account.namespace,
            }),
        }
    }
}

/// The answers one RBAC change can alter: some accounts' (or every one's), in one namespace or
/// everywhere.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Reach {
    pub whose: Whose,
    /// `Some(namespace)`: reads in that namespace only; `None`: reads in every namespace and
    /// cluster-wide ones.
    pub namespace: Option<String>,
}

/// What a change of an RBAC object can alter: `old` is the object before (`None` when it was
/// added, or first seen), `new` after (`None` when it was deleted). `None` when it alters no
/// answer (see the module's documentation for what each kind reaches).
pub(crate) fn reach(kind: RbacKind, old: Option<&Value>, new: Option<&Value>) -> Option<Reach> {
    let object = new.or(old)?;
    // A Role or RoleBinding always has a namespace; without one, assume the widest.
    let namespace = match kind {
        RbacKind::Role | RbacKind::RoleBinding => object::namespace(object).map(str::to_string),
        RbacKind::ClusterRole | RbacKind::ClusterRoleBinding => None,
    };
    match kind {
        RbacKind::Role | RbacKind::ClusterRole => {
            let same = matches!((old, new), (Some(old), Some(new)) if old.get("rules") == new.get("rules"));
            (!same).then_some(Reach {
                whose: Whose::Every,
                namespace,
            })
        }
        RbacKind::RoleBinding | RbacKind::ClusterRoleBinding => {
            let whose = whose(&changed_subjects(old, new), namespace.as_deref())?;
            Some(Reach { whose, namespace })
        }
    }
}

/// The subjects whose grant a binding's change can alter: those added or removed when the role
/// it binds stays (it cannot change in place, but a delete and create may come as one change
/// after a re-list), else all of both versions'.
fn changed_subjects<'a>(old: Option<&'a Value>, new: Option<&'a Value>) -> Vec<&'a Value> {
    let subjects = |binding: Option<&'a Value>| -> Vec<&'a Value> {
        binding
            .and_then(|b| b.get("subjects"))
            .and_then(Value::as_array)
            .map(|subjects| subjects.iter().collect())
            .unwrap_or_default()
    };
    let (before, after) = (subjects(old), subjects(new));
    let same_role =
        matches!((old, new), (Some(old), Some(new)) if old.get("roleRef") == new.get("roleRef"));
    if !same_role {
        return before.into_iter().chain(after).collect();
    }
    let gone = before.iter().filter(|s| !after.contains(s));
    let added = after.iter().filter(|s| !before.contains(s));
    gone.chain(added).copied().collect()
}

/// The accounts `subjects` cover, as the API server's RBAC authorizer matches them against the
/// ServiceAccounts reviews ask about (their username and groups: see `access::review`); `None`
/// when they cover none. A ServiceAccount subject without a namespace takes the binding's.
fn whose(subjects: &[&Value], binding_namespace: Option<&str>) -> Option<Whose> {
    let mut covered = BTreeSet::new();
    for subject in subjects {
        let text = |field: &str| subject.get(field).and_then(Value::as_str).unwrap_or("");
        let name = text("name");
        match text("kind") {
            "ServiceAccount" => {
                let namespace = Some(text("namespace"))
                    .filter(|ns| !ns.is_empty())
                    .or(binding_namespace);
                if let Some(namespace) = namespace {
                    covered.insert(Covered::Account {
                        namespace: namespace.to_string(),
                        name: name.to_string(),
                    });
                }
            }
            "User" => {
                let account = name.strip_prefix("system:serviceaccount:");
                if let Some((namespace, name)) = account.and_then(|a| a.split_once(':')) {
                    covered.insert(Covered::Account {
                        namespace: namespace.to_string(),
                        name: name.to_string(),
                    });
                }
            }
            "Group" => match name {
                "system:serviceaccounts" | "system:authenticated" => return Some(Whose::Every),
                group => {
                    if let Some(namespace) = group.strip_prefix("system:serviceaccounts:") {
                        covered.insert(Covered::AccountsIn(namespace.to_string()));
                    }
                }
            },
            // Other kinds never match a ServiceAccount.
            _ => {}
        }
    }
    (!covered.is_empty()).then_some(Whose::Of(covered))
}

/// The changes of one window, merged: what their forget covers.
#[derive(Debug, Default)]
pub struct Batch {
    /// Whose answers changes reached everywhere.
    everywhere: Option<Whose>,
    /// Per namespace, whose answers there changes reached.
    namespaces: HashMap<String, Whose>,
    /// How many changes were merged (for the log).
    changes: usize,
}

impl Batch {
    pub(crate) fn add(&mut self, reach: Reach) {
        self.changes += 1;
        let whose = match reach.namespace {
            None => self.everywhere.as_mut(),
            Some(ref namespace) => self.namespaces.get_mut(namespace),
        };
        match (whose, reach.namespace) {
            (Some(whose), _) => whose.merge(reach.whose),
            (None, None) => self.everywhere = Some(reach.whose),
            (None, Some(namespace)) => {
                self.namespaces.insert(namespace, reach.whose);
            }
        }
    }

    /// Whether the changes may have altered whether `account` may make a read in `namespace`
    /// (`None`: a cluster-wide read). An `account` of `None` stands for any account.
    pub(crate) fn covers(
        &self,
        account: Option<&ServiceAccountRef>,
        namespace: Option<&str>,
    ) -> bool {
        let reached = |whose: Option<&Whose>| whose.is_some_and(|whose| whose.covers(account));
        reached(self.everywhere.as_ref())
            || namespace.is_some_and(|namespace| reached(self.namespaces.get(namespace)))
    }

    /// How many changes it merges.
    pub(crate) fn changes(&self) -> usize {
        self.changes
    }

    /// Whether it reaches every answer.
    pub(crate) fn is_everything(&self) -> bool {
        self.everywhere == Some(Whose::Every)
    }
}

/// Where the watch reports what each RBAC change reaches.
#[derive(Clone, Debug)]
pub(crate) struct RbacSender(mpsc::UnboundedSender<(Instant, Reach)>);

impl RbacSender {
    pub(crate) fn changed(&self, reach: Reach) {
        // A closed channel means the operator is shutting down.
        let _ = self.0.send((Instant::now(), reach));
    }
}

/// The changes the watch reported, gathered into batches (see [`RbacChanges::next`]).
pub(crate) struct RbacChanges {
    changes: mpsc::UnboundedReceiver<(Instant, Reach)>,
    /// A change received while gathering a window that closed before it came: the first of the
    /// next window.
    early: Option<(Instant, Reach)>,
}

/// A channel for RBAC changes: the watch sends, [`RbacChanges::next`] gathers.
pub(crate) fn rbac_changes() -> (RbacSender, RbacChanges) {
    let (sender, changes) = mpsc::unbounded_channel();
    (
        RbacSender(sender),
        RbacChanges {
            changes,
            early: None,
        },
    )
}

impl RbacChanges {
    /// The next batch: every change that came within [`RBAC_WINDOW`] of the first, returned
    /// [`RBAC_SETTLE`] after the window closed. So batches are at least a window apart, and a
    /// change is acted on at most a window and a settle after it came. `None` once the sender
    /// is gone.
    pub(crate) async fn next(&mut self) -> Option<Batch> {
        let (came, first) = match self.early.take() {
            Some(early) => early,
            None => self.changes.recv().await?,
        };
        let closes = came + RBAC_WINDOW;
        let mut batch = Batch::default();
        batch.add(first);
        let closed = tokio::time::sleep_until(closes);
        tokio::pin!(closed);
        loop {
            tokio::select! {
                // What already came is taken before the window is seen to close.
                biased;
                change = self.changes.recv() => match change {
                    Some((came, reach)) if came < closes => batch.add(reach),
                    Some(later) => {
                        self.early = Some(later);
                        break;
                    }
                    None => break,
                },
                () = &mut closed => break,
            }
        }
        tokio::time::sleep_until(closes + RBAC_SETTLE).await;
        Some(batch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn account(namespace: &str, name: &str) -> ServiceAccountRef {
        ServiceAccountRef {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    fn binding(kind: &str, namespace: Option<&str>, subjects: Value) -> Value {
        let mut binding = json!({
            "apiVersion": RBAC_API_VERSION, "kind": kind,
            "metadata": {"name": "b"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
            "subjects": subjects,
        });
        if let Some(namespace) = namespace {
            binding["metadata"]["namespace"] = json!(namespace);
        }
        binding
    }

    /// What reaches every answer.
    fn everything() -> Reach {
        Reach {
            whose: Whose::Every,
            namespace: None,
        }
    }

    fn sa(namespace: &str, name: &str) -> Value {
        json!({"kind": "ServiceAccount", "name": name, "namespace": namespace})
    }

    fn of(covered: impl IntoIterator<Item = Covered>) -> Whose {
        Whose::Of(covered.into_iter().collect())
    }

    fn one(namespace: &str, name: &str) -> Covered {
        Covered::Account {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    #[test]
    fn a_role_binding_reaches_its_subjects_in_its_namespace_only() {
        let added = binding(
            "RoleBinding",
            Some("shop"),
            json!([sa("team", "app"), {"kind": "ServiceAccount", "name": "local"}]),
        );
        assert_eq!(
            reach(RbacKind::RoleBinding, None, Some(&added)),
            Some(Reach {
                whose: of([one("team", "app"), one("shop", "local")]),
                namespace: Some("shop".into()),
            })
        );
        // Deleted: the same, from the object the delete carries.
        assert_eq!(
            reach(RbacKind::RoleBinding, Some(&added), None),
            reach(RbacKind::RoleBinding, None, Some(&added))
        );
    }

    #[test]
    fn a_cluster_role_binding_reaches_its_subjects_everywhere() {
        let added = binding(
            "ClusterRoleBinding",
            None,
            json!([{"kind": "User", "name": "system:serviceaccount:team:app", "apiGroup": "rbac.authorization.k8s.io"}]),
        );
        assert_eq!(
            reach(RbacKind::ClusterRoleBinding, None, Some(&added)),
            Some(Reach {
                whose: of([one("team", "app")]),
                namespace: None,
            })
        );
    }

    #[test]
    fn groups_cover_every_account_or_those_of_a_namespace() {
        let group = |name: &str| json!({"kind": "Group", "name": name, "apiGroup": "rbac.authorization.k8s.io"});
        for every in ["system:serviceaccounts", "system:authenticated"] {
            let added = binding("RoleBinding", Some("shop"), json!([group(every)]));
            assert_eq!(
                reach(RbacKind::RoleBinding, None, Some(&added)).map(|r| r.whose),
                Some(Whose::Every),
                "{every}"
            );
        }
        let added = binding(
            "RoleBinding",
            Some("shop"),
            json!([group("system:serviceaccounts:team")]),
        );
        assert_eq!(
            reach(RbacKind::RoleBinding, None, Some(&added)).map(|r| r.whose),
            Some(of([Covered::AccountsIn("team".into())]))
        );
    }

    #[test]
    fn subjects_no_account_can_be_reach_nothing() {
        let added = binding(
            "ClusterRoleBinding",
            None,
            json!([
                {"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"},
                {"kind": "Group", "name": "developers", "apiGroup": "rbac.authorization.k8s.io"},
                {"kind": "ServiceAccount", "name": "no-namespace"},
            ]),
        );
        assert_eq!(
            reach(RbacKind::ClusterRoleBinding, None, Some(&added)),
            None
        );
    }

    #[test]
    fn a_binding_edit_reaches_the_subjects_added_or_removed() {
        let before = binding(
            "RoleBinding",
            Some("shop"),
            json!([sa("team", "kept"), sa("team", "gone")]),
        );
        let after = binding(
            "RoleBinding",
            Some("shop"),
            json!([sa("team", "kept"), sa("team", "new")]),
        );
        assert_eq!(
            reach(RbacKind::RoleBinding, Some(&before), Some(&after)).map(|r| r.whose),
            Some(of([one("team", "gone"), one("team", "new")]))
        );
        // Only labels changed: nothing.
        let mut labelled = before.clone();
        labelled["metadata"]["labels"] = json!({"team": "a"});
        assert_eq!(
            reach(RbacKind::RoleBinding, Some(&before), Some(&labelled)),
            None
        );
        // Another role (a delete and a create seen as one change): every subject of both.
        let mut rebound = after.clone();
        rebound["roleRef"]["name"] = json!("edit");
        assert_eq!(
            reach(RbacKind::RoleBinding, Some(&before), Some(&rebound)).map(|r| r.whose),
            Some(of([
                one("team", "kept"),
                one("team", "gone"),
                one("team", "new")
            ]))
        );
    }

    #[test]
    fn a_role_reaches_every_account_in_its_namespace_and_a_cluster_role_everything() {
        let role = |kind: &str, namespace: Option<&str>, verbs: Value| {
            let mut role = json!({"apiVersion": RBAC_API_VERSION, "kind": kind, "metadata": {"name": "r"},
                "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": verbs}]});
            if let Some(namespace) = namespace {
                role["metadata"]["namespace"] = json!(namespace);
            }
            role
        };
        let before = role("Role", Some("shop"), json!(["get"]));
        let after = role("Role", Some("shop"), json!(["get", "list"]));
        assert_eq!(
            reach(RbacKind::Role, Some(&before), Some(&after)),
            Some(Reach {
                whose: Whose::Every,
                namespace: Some("shop".into()),
            })
        );
        let mut annotated = before.clone();
        annotated["metadata"]["annotations"] = json!({"note": "x"});
        assert_eq!(reach(RbacKind::Role, Some(&before), Some(&annotated)), None);
        let cluster_role = role("ClusterRole", None, json!(["get"]));
        assert_eq!(
            reach(RbacKind::ClusterRole, None, Some(&cluster_role)),
            Some(everything())
        );
    }

    #[test]
    fn a_batch_covers_what_its_changes_reach() {
        let mut batch = Batch::default();
        batch.add(Reach {
            whose: of([one("team", "app")]),
            namespace: Some("shop".into()),
        });
        batch.add(Reach {
            whose: of([Covered::AccountsIn("ops".into())]),
            namespace: None,
        });
        let (app, other, ops) = (
            account("team", "app"),
            account("team", "other"),
            account("ops", "x"),
        );
        assert!(batch.covers(Some(&app), Some("shop")));
        assert!(!batch.covers(Some(&app), Some("dev")), "another namespace");
        assert!(!batch.covers(Some(&app), None), "cluster-wide");
        assert!(!batch.covers(Some(&other), Some("shop")), "another account");
        assert!(batch.covers(Some(&ops), Some("dev")), "everywhere");
        assert!(batch.covers(Some(&ops), None));
        assert!(
            batch.covers(None, None),
            "an account not known, cluster-wide"
        );
        assert!(!batch.is_everything());
        batch.add(everything());
        assert!(batch.is_everything());
        assert!(batch.covers(Some(&other), Some("dev")));
        assert_eq!(batch.changes(), 3);
    }

    fn in_shop(name: &str) -> Reach {
        Reach {
            whose: of([one("team", name)]),
            namespace: Some("shop".into()),
        }
    }

    /// Sends `reach` `after` the start.
    fn send_at(sender: &RbacSender, after: Duration, reach: Reach) {
        let sender = sender.clone();
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            sender.changed(reach);
        });
    }

    #[tokio::test(start_paused = true)]
    async fn changes_within_a_window_are_forgotten_together_after_it_settles() {
        let (sender, mut changes) = rbac_changes();
        let start = Instant::now();
        let ms = Duration::from_millis;
        send_at(&sender, ms(0), in_shop("a"));
        send_at(&sender, ms(300), in_shop("b"));
        send_at(&sender, ms(900), in_shop("c"));
        // After the window closed, before it settled: the next window's.
        send_at(&sender, ms(1200), in_shop("d"));
        let first = changes.next().await.unwrap();
        assert_eq!(start.elapsed(), RBAC_WINDOW + RBAC_SETTLE);
        assert_eq!(first.changes(), 3);
        let [a, d] = [account("team", "a"), account("team", "d")];
        assert!(first.covers(Some(&a), Some("shop")));
        assert!(!first.covers(Some(&d), Some("shop")));
        let second = changes.next().await.unwrap();
        // From the change it starts with, not from when it was taken.
        assert_eq!(start.elapsed(), ms(1200) + RBAC_WINDOW + RBAC_SETTLE);
        assert_eq!(second.changes(), 1);
        assert!(second.covers(Some(&d), Some("shop")));
        drop(sender);
        assert!(changes.next().await.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_flood_of_changes_is_forgotten_at_most_once_a_window() {
        let (sender, mut changes) = rbac_changes();
        let start = Instant::now();
        let flood = {
            let sender = sender.clone();
            tokio::spawn(async move {
                for i in 0..500 {
                    sender.changed(in_shop(&format!("a{i}")));
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            })
        };
        drop(sender);
        let mut forgotten = Vec::new();
        let mut changed = 0;
        while let Some(batch) = changes.next().await {
            forgotten.push(start.elapsed());
            changed += batch.changes();
        }
        flood.await.unwrap();
        assert_eq!(changed, 500);
        assert!(forgotten.len() <= 6, "{forgotten:?}");
        for pair in forgotten.windows(2) {
            assert!(pair[1] - pair[0] >= RBAC_WINDOW, "{forgotten:?}");
        }
        // The last change (at 4.99 s) is acted on within a window and a settle.
        let last = *forgotten.last().unwrap();
        assert!(
            last <= Duration::from_millis(4990) + RBAC_WINDOW + RBAC_SETTLE,
            "{last:?}"
        );
    }
}
