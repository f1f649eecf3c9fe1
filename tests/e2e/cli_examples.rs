//! The examples in `scripts/`, through the built binary: their `*.test.yaml` files pass in both
//! languages, and `metascript render` prints the expected plan for each, deterministically and
//! identically whether the controller runs the Rhai or the Lua scripts.

use crate::support::cli::{metascript, root, stdout_of};
use metascript::object::label;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// The repository root, so paths like `scripts/...` work whatever the test's working directory.
/// `metascript render -f FILE... --scripts-dir DIR --now NOW -o json`: the raw JSON text.
fn render_text(files: &[PathBuf], scripts_dir: &Path, now: &str) -> String {
    render_text_with(files, scripts_dir, now, &[])
}

fn render_text_with(files: &[PathBuf], scripts_dir: &Path, now: &str, extra: &[&str]) -> String {
    let mut args: Vec<String> = vec!["render".into()];
    args.extend(extra.iter().map(|arg| arg.to_string()));
    for file in files {
        args.push("-f".into());
        args.push(file.display().to_string());
    }
    args.extend([
        "--scripts-dir".into(),
        scripts_dir.display().to_string(),
        "--now".into(),
        now.into(),
        "-o".into(),
        "json".into(),
    ]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let what = format!("metascript render {}", args.join(" "));
    stdout_of(&metascript(&args), &what)
}

/// One example rendered with a single controller manifest (`controller.rhai.yaml` or
/// `controller.lua.yaml`), plus its CRDs when it has any and its `cluster.yaml`.
fn render_with(example: &str, controller: &str, now: &str) -> String {
    render_with_flags(example, controller, now, &[])
}

fn render_with_flags(example: &str, controller: &str, now: &str, extra: &[&str]) -> String {
    let dir = root().join("scripts").join(example);
    let mut files = Vec::new();
    if dir.join("crds.yaml").is_file() {
        files.push(dir.join("crds.yaml"));
    }
    files.push(dir.join("cluster.yaml"));
    files.push(dir.join(controller));
    render_text_with(&files, &dir, now, extra)
}

/// Renders an example with each language's controller twice, checks that all four outputs are
/// byte-identical, and that rendering the whole directory (both controllers) prints the same
/// entries once per controller. Returns the parsed plan entries.
fn render_example(example: &str, now: &str) -> Vec<Value> {
    let rhai = render_with(example, "controller.rhai.yaml", now);
    let rhai_again = render_with(example, "controller.rhai.yaml", now);
    let lua = render_with(example, "controller.lua.yaml", now);
    let lua_again = render_with(example, "controller.lua.yaml", now);
    assert_eq!(
        rhai, rhai_again,
        "{example}: the Rhai render is not deterministic"
    );
    assert_eq!(
        lua, lua_again,
        "{example}: the Lua render is not deterministic"
    );
    let entries = without_provenance(&rhai, "Rhai");
    assert_eq!(
        entries,
        without_provenance(&lua, "Lua"),
        "{example}: Rhai and Lua render different plans"
    );
    assert!(!entries.is_empty(), "{example}: render planned nothing");

    // The whole directory, as docs/examples.md shows it: both controllers, so every entry twice.
    let dir = root().join("scripts").join(example);
    let whole = render_text(std::slice::from_ref(&dir), &dir, now);
    let twice: Vec<Value> = entries.iter().chain(entries.iter()).cloned().collect();
    assert_eq!(
        without_provenance(&whole, "both"),
        twice,
        "{example}: rendering the directory differs"
    );
    entries
}

/// Render's JSON entries with the provenance annotation taken off every applied object (it
/// names the script, so it differs between the languages by design), after checking it is
/// there and names the hook and a script digest.
fn without_provenance(rendered: &str, language: &str) -> Vec<Value> {
    let mut entries: Vec<Value> =
        serde_json::from_str(rendered).expect("render -o json prints JSON");
    for entry in &mut entries {
        let applied_objects = entry.get_mut("apply").and_then(Value::as_array_mut);
        for applied in applied_objects.into_iter().flatten() {
            let shown = applied.to_string();
            let annotations = applied["metadata"]["annotations"]
                .as_object_mut()
                .expect("applied objects carry annotations");
            let provenance = annotations
                .remove("metascript.dev/provenance")
                .unwrap_or_else(|| panic!("{language}: no provenance on {shown}"));
            let parts: Vec<&str> = provenance.as_str().unwrap_or_default().split(' ').collect();
            assert!(
                parts.len() == 3
                    && ["sync", "finalize", "map"].contains(&parts[1])
                    && parts[2].len() == 12,
                "{language}: provenance {provenance}"
            );
            without_revision(applied);
        }
        let conditions = entry
            .pointer_mut("/status/replace/conditions")
            .and_then(Value::as_array_mut);
        for condition in conditions.into_iter().flatten() {
            if condition["type"] == "Updated" {
                condition["message"] = "<revision>".into();
            }
        }
    }
    entries
}

/// A composite rolling update's revision is the parent's fields and the sync hook's digest, so
/// its hash differs between the languages by design: blanked where it shows (the children's
/// label, the ControllerRevision's name, label and hook, the Updated condition).
fn without_revision(applied: &mut Value) {
    const LABEL: &str = "metascript.dev/revision";
    if applied["metadata"]["labels"].get(LABEL).is_some() {
        applied["metadata"]["labels"][LABEL] = "<revision>".into();
    }
    if applied["kind"] == "ControllerRevision" {
        applied["metadata"]["name"] = "<revision>".into();
        applied["data"]["syncHook"] = "<hook>".into();
    }
}

/// The entries about one object (`Kind.apiVersion namespace/name`) and, for map controllers,
/// one input (or `None` for detached groups and status).
fn entries_for<'a>(entries: &'a [Value], object: &str) -> Vec<&'a Value> {
    entries.iter().filter(|e| e["object"] == object).collect()
}

fn the_entry<'a>(entries: &'a [Value], pick: impl Fn(&Value) -> bool, what: &str) -> &'a Value {
    let found: Vec<&Value> = entries.iter().filter(|e| pick(e)).collect();
    assert_eq!(
        found.len(),
        1,
        "expected one entry for {what}, got {found:#?}"
    );
    found[0]
}

fn names(list: &Value) -> Vec<&str> {
    list.as_array()
        .map(|items| {
            items
                .iter()
                .map(|o| {
                    o.pointer("/metadata/name")
                        .or_else(|| o.get("name"))
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                })
                .collect()
        })
        .unwrap_or_default()
}

fn annotation<'a>(object: &'a Value, key: &str) -> Option<&'a str> {
    object.pointer("/metadata/annotations")?.get(key)?.as_str()
}

/// Asserts the object's only owner reference is the controller reference to `kind`/`name`.
fn assert_owned_by(object: &Value, kind: &str, name: &str) {
    let refs = object
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .unwrap_or_else(|| panic!("no ownerReferences on {object:#}"));
    assert_eq!(refs.len(), 1, "{refs:#?}");
    assert_eq!(refs[0]["kind"], kind);
    assert_eq!(refs[0]["name"], name);
    assert_eq!(refs[0]["controller"], true);
}

// ---------------------------------------------------------------------------------------------
// metascript test scripts/
// ---------------------------------------------------------------------------------------------

#[test]
fn every_example_test_passes_in_both_languages() {
    let stdout = stdout_of(
        &metascript(["test", "scripts/"]),
        "metascript test scripts/",
    );
    let summary = stdout.lines().last().unwrap_or_default();
    let (passed, failed) = summary
        .split_once(" passed, ")
        .unwrap_or_else(|| panic!("no summary line in:\n{stdout}"));
    let passed: usize = passed.parse().unwrap();
    assert_eq!(failed, "0 failed", "{stdout}");
    assert!(passed > 0, "{stdout}");

    let ok: Vec<&str> = stdout.lines().filter(|l| l.starts_with("ok ")).collect();
    assert_eq!(ok.len(), passed);
    let rhai = ok
        .iter()
        .filter(|l| l.ends_with(".rhai]") || l.ends_with(".rhai.yaml]"))
        .count();
    let lua = ok
        .iter()
        .filter(|l| l.ends_with(".lua]") || l.ends_with(".lua.yaml]"))
        .count();
    assert!(rhai > 0 && lua > 0, "{stdout}");
    assert_eq!(rhai, lua, "every case runs in both languages:\n{stdout}");
    assert_eq!(
        rhai + lua,
        passed,
        "every case names its language:\n{stdout}"
    );
    for example in [
        "service-per-pod",
        "snapshot-schedule",
        "configmap-propagation",
        "configmap-transform",
        "namespace-team",
        "catset",
        "bluegreen",
        "indexedjob",
        "namespace-as-a-service",
    ] {
        assert!(
            ok.iter()
                .any(|l| l.contains(&format!("scripts/{example}/"))),
            "no passing case for {example}:\n{stdout}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// metascript render, per example
// ---------------------------------------------------------------------------------------------

/// docs/testing.md's CI recipe: with `--no-provenance`, a hook's Rhai and Lua flavours render
/// byte for byte the same plan (a CompositeController's revisions name its sync script, so
/// those examples differ there by design, as docs/testing.md says).
#[test]
fn without_provenance_both_languages_render_the_same_text() {
    for example in [
        "configmap-propagation",
        "configmap-transform",
        "namespace-as-a-service",
        "namespace-team",
        "service-per-pod",
        "snapshot-schedule",
    ] {
        let flags = ["--no-provenance"];
        let rhai = render_with_flags(
            example,
            "controller.rhai.yaml",
            "2026-01-01T03:00:00Z",
            &flags,
        );
        let lua = render_with_flags(
            example,
            "controller.lua.yaml",
            "2026-01-01T03:00:00Z",
            &flags,
        );
        assert!(
            !rhai.contains("metascript.dev/provenance"),
            "{example}: --no-provenance still shows provenance"
        );
        let entries: Vec<Value> = serde_json::from_str(&rhai).expect("render -o json prints JSON");
        assert!(!entries.is_empty(), "{example}: render planned nothing");
        assert_eq!(rhai, lua, "{example}: Rhai and Lua render different text");
    }
}

#[test]
fn service_per_pod_renders_one_service_per_pod_and_finalizes() {
    let entries = render_example("service-per-pod", "2026-01-01T00:00:00Z");
    assert!(entries_for(&entries, "StatefulSet.apps/v1 default/cache").is_empty());
    assert_eq!(entries.len(), 2, "{entries:#?}");

    let web = the_entry(
        &entries,
        |e| e["object"] == "StatefulSet.apps/v1 default/web",
        "web",
    );
    assert_eq!(web["controller"], "DecoratorController/service-per-pod");
    assert_eq!(web["hook"], "sync");
    assert_eq!(names(&web["apply"]), ["web-0", "web-1", "web-2"]);
    for (i, service) in web["apply"].as_array().unwrap().iter().enumerate() {
        assert_eq!(service["kind"], "Service");
        assert_eq!(service["metadata"]["namespace"], "default");
        assert_owned_by(service, "StatefulSet", "web");
        assert_eq!(
            label(service, "metascript.dev/decorator"),
            Some("service-per-pod")
        );
        assert_eq!(
            service["spec"]["selector"]["statefulset.kubernetes.io/pod-name"],
            format!("web-{i}")
        );
        let ports: Vec<(i64, i64)> = service["spec"]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                (
                    p["port"].as_i64().unwrap(),
                    p["targetPort"].as_i64().unwrap(),
                )
            })
            .collect();
        assert_eq!(ports, [(80, 8080), (443, 8443)]);
    }
    assert_eq!(
        web["metadataPatch"]["metadata"]["labels"]["metascript.dev/service-per-pod"],
        "true"
    );
    assert_eq!(
        web["finalizer"]["add"],
        "metascript.dev/decorator-service-per-pod"
    );

    // Being deleted with legacy-0 still there: delete it, and keep the finalizer for now.
    let legacy = the_entry(
        &entries,
        |e| e["object"] == "StatefulSet.apps/v1 default/legacy",
        "legacy",
    );
    assert_eq!(legacy["hook"], "finalize");
    assert!(legacy.get("apply").is_none());
    assert_eq!(names(&legacy["delete"]), ["legacy-0"]);
    assert_eq!(
        legacy["delete"][0]["uid"],
        "5d1f0c7e-2f55-4c36-8a2b-legacy0svc01"
    );
    assert!(
        legacy.get("finalizer").is_none(),
        "finalized too early: {legacy:#}"
    );
}

#[test]
fn snapshot_schedule_renders_snapshots_per_interval_and_tombstones() {
    let entries = render_example("snapshot-schedule", "2026-01-01T03:00:00Z");
    let parent = "SnapshotSchedule.snapshot.example.com/v1 shop/web-snapshots";
    assert_eq!(entries_for(&entries, parent).len(), entries.len());
    assert!(
        !entries
            .iter()
            .any(|e| e["input"] == "PersistentVolumeClaim.v1 shop/data-cache-0"),
        "an unselected PVC was mapped: {entries:#?}"
    );

    // data-web-0: first snapshot of interval 81816 (2026-01-01T00:00:00Z).
    let web0 = the_entry(
        &entries,
        |e| e["input"] == "PersistentVolumeClaim.v1 shop/data-web-0",
        "data-web-0",
    );
    assert_eq!(web0["hook"], "map");
    assert_eq!(names(&web0["apply"]), ["data-web-0-81816"]);
    let snapshot = &web0["apply"][0];
    assert_eq!(snapshot["kind"], "VolumeSnapshot");
    assert_eq!(snapshot["metadata"]["namespace"], "shop");
    assert_eq!(
        snapshot["spec"]["source"]["persistentVolumeClaimName"],
        "data-web-0"
    );
    assert_eq!(
        annotation(snapshot, "snapshot.example.com/scheduled-at"),
        Some("2026-01-01T00:00:00Z")
    );
    assert_owned_by(snapshot, "SnapshotSchedule", "web-snapshots");
    assert_eq!(
        label(snapshot, "metascript.dev/map"),
        Some("snapshot-schedule")
    );
    assert_eq!(
        label(snapshot, "metascript.dev/map-key"),
        web0["mapKey"].as_str()
    );
    assert!(web0.get("delete").is_none());

    // data-web-1: this interval's snapshot exists (nothing new); the 11-day-old one goes.
    let web1 = the_entry(
        &entries,
        |e| e["input"] == "PersistentVolumeClaim.v1 shop/data-web-1",
        "data-web-1",
    );
    assert!(web1.get("apply").is_none(), "{web1:#}");
    assert_eq!(names(&web1["delete"]), ["data-web-1-81770"]);
    assert_eq!(
        web1["delete"][0]["reason"],
        "no longer returned by the map hook"
    );

    // data-web-2 is gone: the tombstone hook keeps the 7-day-old snapshot, not the 14-day-old.
    let tombstone = the_entry(&entries, |e| e["hook"] == "tombstone", "the tombstone");
    assert_eq!(tombstone["mapKey"], "c68d17c1f25fd3b9523df58dea4ae9d7");
    assert!(tombstone.get("input").is_none());
    assert_eq!(names(&tombstone["delete"]), ["data-web-2-81760"]);

    let status = the_entry(&entries, |e| e.get("status").is_some(), "the status");
    assert_eq!(
        status["status"]["merge"]["inputs"]["persistentvolumeclaims"]["total"],
        2
    );
    assert_eq!(
        status["status"]["merge"]["outputs"]["volumesnapshots"]["total"],
        4
    );
}

#[test]
fn configmap_propagation_renders_copies_into_labelled_namespaces() {
    let entries = render_example("configmap-propagation", "2026-01-01T00:00:00Z");
    for ignored in ["Namespace.v1 sandbox", "Namespace.v1 shared-config"] {
        assert!(
            entries_for(&entries, ignored).is_empty(),
            "{ignored} was synced"
        );
    }
    assert_eq!(entries.len(), 2, "{entries:#?}");

    for team in ["team-a", "team-b"] {
        let entry = the_entry(
            &entries,
            |e| e["object"] == format!("Namespace.v1 {team}"),
            team,
        );
        assert_eq!(
            entry["controller"],
            "DecoratorController/configmap-propagation"
        );
        assert_eq!(names(&entry["apply"]), ["ca-bundle", "logging"]);
        for copy in entry["apply"].as_array().unwrap() {
            assert_eq!(copy["metadata"]["namespace"], team.to_string());
            assert_owned_by(copy, "Namespace", team);
            assert_eq!(
                label(copy, "metascript.dev/decorator"),
                Some("configmap-propagation")
            );
        }
        let logging = &entry["apply"][1];
        assert_eq!(logging["data"]["level"], "info");
        assert_eq!(
            annotation(logging, "config.example.com/propagated-from"),
            Some("shared-config/logging")
        );
        assert_eq!(
            entry["metadataPatch"]["metadata"]["annotations"]["config.example.com/propagated-configmaps"],
            "2"
        );
    }

    // team-b's copy of feature-flags lost its source (no longer labelled): deleted.
    let team_b = the_entry(&entries, |e| e["object"] == "Namespace.v1 team-b", "team-b");
    assert_eq!(team_b["delete"][0]["namespace"], "team-b");
    assert_eq!(names(&team_b["delete"]), ["feature-flags"]);
    let team_a = the_entry(&entries, |e| e["object"] == "Namespace.v1 team-a", "team-a");
    assert!(team_a.get("delete").is_none());
}

#[test]
fn namespace_team_renders_labels_read_from_the_namespaces_given() {
    // `get` in the hook answers from the manifests passed to render.
    let entries = render_example("namespace-team", "2026-01-01T00:00:00Z");
    assert_eq!(entries.len(), 2, "{entries:#?}");
    let web = the_entry(
        &entries,
        |e| e["object"] == "Deployment.apps/v1 shop/web",
        "web",
    );
    assert_eq!(
        web["metadataPatch"]["metadata"]["labels"]["example.com/team"],
        "payments"
    );
    let scratch = the_entry(
        &entries,
        |e| e["object"] == "Deployment.apps/v1 sandbox/scratch",
        "scratch",
    );
    assert_eq!(
        scratch["metadataPatch"]["metadata"]["labels"]["example.com/team"],
        Value::Null
    );
    assert!(
        scratch["metadataPatch"]["metadata"]["labels"]
            .as_object()
            .is_some_and(|labels| labels.contains_key("example.com/team")),
        "{scratch:#}"
    );
}

#[test]
fn configmap_transform_renders_each_selected_configmap_once() {
    let entries = render_example("configmap-transform", "2026-01-01T00:00:00Z");
    let inputs: Vec<&str> = entries.iter().filter_map(|e| e["input"].as_str()).collect();
    // Not payments (not selected), not backend-rendered (controlled by the template itself).
    assert_eq!(
        inputs,
        ["ConfigMap.v1 shop/backend", "ConfigMap.v1 shop/frontend"]
    );
    let applied: Vec<&str> = entries.iter().flat_map(|e| names(&e["apply"])).collect();
    assert_eq!(applied, ["backend-rendered", "frontend-rendered"]);

    let backend = the_entry(
        &entries,
        |e| e["input"] == "ConfigMap.v1 shop/backend",
        "backend",
    );
    let rendered = &backend["apply"][0];
    assert_eq!(rendered["metadata"]["namespace"], "shop");
    assert_owned_by(rendered, "ConfigTemplate", "app-env");
    assert_eq!(
        label(rendered, "metascript.dev/map"),
        Some("configmap-transform")
    );
    assert_eq!(
        label(rendered, "metascript.dev/map-key"),
        Some("01c04bd3ac154f6ae9e11656f85533b9")
    );
    assert_eq!(label(rendered, "tier"), Some("backend"));
    assert_eq!(
        rendered["data"],
        serde_json::json!({
            "SHOP_DATABASE_HOST": "db.shop.svc",
            "SHOP_DATABASE_PORT": "5432",
            "SHOP_log-level": "info"
        })
    );
    assert_eq!(
        annotation(rendered, "config.example.com/source-checksum").map(str::len),
        Some(64)
    );

    // legacy is gone and there is no tombstone hook: its rendered copy is deleted.
    let detached = the_entry(
        &entries,
        |e| e.get("delete").is_some() && e.get("input").is_none(),
        "the detached group",
    );
    assert!(detached.get("hook").is_none());
    assert_eq!(names(&detached["delete"]), ["legacy-rendered"]);
    assert_eq!(detached["delete"][0]["reason"], "input is gone");
}

/// A typo that yields a name built from a missing field and an empty selector: `render` (the
/// same planning the operator runs) refuses the PodDisruptionBudget instead of planning one that
/// would match every pod; `metascript validate` refuses a broken script with its line.
#[test]
fn catset_renders_its_next_pod_its_claims_and_its_revision() {
    let entries = render_example("catset", "2026-01-01T00:00:00Z");
    let entry = the_entry(
        &entries,
        |e| e["object"] == "CatSet.ctl.enisoc.com/v1 shop/web",
        "web",
    );
    assert_eq!(entry["controller"], "CompositeController/catset");
    // The revision first, then web-1 (web-0 is Ready), web-0 relabelled with the revision
    // (its content is what the template asks for), and a PVC per ordinal.
    let kinds: Vec<&str> = entry["apply"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "ControllerRevision",
            "Pod",
            "Pod",
            "PersistentVolumeClaim",
            "PersistentVolumeClaim",
            "PersistentVolumeClaim"
        ]
    );
    assert_eq!(names(&entry["apply"])[1..3], ["web-1", "web-0"]);
    let revision = &entry["apply"][0];
    assert_eq!(revision["revision"], 1);
    assert_owned_by(revision, "CatSet", "web");
    for pod in &entry["apply"].as_array().unwrap()[1..3] {
        assert_owned_by(pod, "CatSet", "web");
        assert_eq!(label(pod, "metascript.dev/revision"), Some("<revision>"));
    }
    assert!(entry.get("delete").is_none(), "{entry:#}");
    let status = &entry["status"]["replace"];
    assert_eq!(status["replicas"], 1);
    assert_eq!(status["readyReplicas"], 1);
    assert_eq!(status["observedGeneration"], 1);
    assert_eq!(status["conditions"][0]["type"], "Updated");
    assert_eq!(status["conditions"][0]["status"], "True");
}

#[test]
fn bluegreen_renders_its_service_and_both_replica_sets() {
    let entries = render_example("bluegreen", "2026-01-01T00:00:00Z");
    let entry = the_entry(
        &entries,
        |e| e["object"] == "BlueGreenDeployment.ctl.enisoc.com/v1 shop/nginx",
        "nginx",
    );
    assert_eq!(
        names(&entry["apply"]),
        ["nginx-frontend", "nginx-blue", "nginx-green"]
    );
    assert_eq!(entry["apply"][0]["spec"]["selector"]["color"], "blue");
    assert_eq!(entry["apply"][1]["spec"]["replicas"], 3);
    assert_eq!(entry["apply"][2]["spec"]["replicas"], 0);
    assert_eq!(entry["status"]["replace"]["activeColor"], "blue");
}

/// docs/tutorial-namespaces.md: a Team owns its Namespace and, in it, a quota, its group's
/// RoleBinding and a default-deny NetworkPolicy, all claimed by the generated selector's label.
#[test]
fn namespace_as_a_service_renders_a_namespace_and_its_guard_rails_per_team() {
    let entries = render_example("namespace-as-a-service", "2026-01-01T00:00:00Z");
    for (team, cpu) in [("payments", "4"), ("search", "16")] {
        let entry = the_entry(
            &entries,
            |e| e["object"] == format!("Team.platform.example.com/v1 {team}"),
            team,
        );
        assert_eq!(
            entry["controller"],
            "CompositeController/namespace-as-a-service"
        );
        let applied = entry["apply"].as_array().unwrap();
        let kinds: Vec<&str> = applied
            .iter()
            .map(|o| o["kind"].as_str().unwrap())
            .collect();
        assert_eq!(
            kinds,
            ["Namespace", "ResourceQuota", "RoleBinding", "NetworkPolicy"]
        );
        for child in applied {
            assert_owned_by(child, "Team", team);
            assert!(label(child, "controller-uid").is_some(), "{child:#}");
        }
        assert!(applied[0]["metadata"].get("namespace").is_none());
        for child in &applied[1..] {
            assert_eq!(child["metadata"]["namespace"], team);
        }
        assert_eq!(applied[1]["spec"]["hard"]["requests.cpu"], cpu);
        assert_eq!(applied[2]["subjects"][0]["name"], format!("{team}-devs"));
        assert_eq!(applied[3]["spec"]["podSelector"], json!({}));
        let status = &entry["status"]["replace"];
        assert_eq!(
            (&status["namespace"], &status["phase"]),
            (&json!(team), &json!("Pending"))
        );
    }
}

#[test]
fn indexedjob_renders_the_next_index_with_the_generated_selectors_label() {
    let entries = render_example("indexedjob", "2026-01-01T00:00:00Z");
    let entry = the_entry(
        &entries,
        |e| e["object"] == "IndexedJob.ctl.enisoc.com/v1 batch/print-index",
        "print-index",
    );
    assert_eq!(names(&entry["apply"]), ["print-index-2"]);
    let pod = &entry["apply"][0];
    assert_eq!(
        label(pod, "controller-uid"),
        Some("9e0c1b55-ij-print-index")
    );
    assert_owned_by(pod, "IndexedJob", "print-index");
    assert_eq!(entry["status"]["replace"]["active"], 1);
    assert_eq!(entry["status"]["replace"]["succeeded"], 1);
}

#[test]
fn render_refuses_a_pdb_named_from_a_missing_field_and_validate_names_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let manifests = dir.path().join("manifests.yaml");
    std::fs::write(
        &manifests,
        r#"
apiVersion: metascript.dev/v1alpha1
kind: DecoratorController
metadata: {name: pdb}
spec:
  resources: [{apiVersion: apps/v1, resource: deployments}]
  attachments: [{apiVersion: policy/v1, resource: poddisruptionbudgets}]
  hooks:
    sync:
      script:
        language: rhai
        inline: |
          let d = request.object;
          #{ attachments: [#{
            apiVersion: "policy/v1", kind: "PodDisruptionBudget",
            metadata: #{ name: get_path(request, "objet.metadata.name", "") + "-pdb" },
            spec: #{ minAvailable: 1, selector: get_path(request, "objet.spec.selector", #{}) },
          }] }
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  selector: {matchLabels: {app: web}}
  template: {metadata: {labels: {app: web}}, spec: {containers: [{name: web, image: example.invalid/web}]}}
"#,
    )
    .unwrap();
    let path = manifests.display().to_string();
    let output = metascript(["render", "-f", &path]);
    assert_eq!(output.status.code(), Some(1), "render must fail");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("attachments[0].metadata.name") && stderr.contains("\"-pdb\""),
        "{stderr}"
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        !stdout.contains("PodDisruptionBudget"),
        "nothing planned: {stdout}"
    );

    let broken = std::fs::read_to_string(&manifests)
        .unwrap()
        .replace("let d = request.object;", "let d = ;");
    std::fs::write(&manifests, broken).unwrap();
    let output = metascript(["validate", "-f", &path]);
    assert_eq!(output.status.code(), Some(1), "validate must fail");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("DecoratorController/pdb: error: spec.hooks.sync")
            && stdout.contains("line 1"),
        "{stdout}"
    );
    // The script's line 1, column 9 is the file's line 13, column 19 (the block's indentation).
    assert!(
        stdout.contains(&format!("{path}:13:19 (document")),
        "the place in the file: {stdout}"
    );
    // The summary says what it covered: a hook that fails on every object still compiles.
    assert!(
        stdout.contains("1 error(s)") && stdout.contains("no hook ran on your objects"),
        "{stdout}"
    );

    // A hook that fails when it runs is named at its place in the file by render too.
    let failing = std::fs::read_to_string(&manifests).unwrap().replace(
        "let d = ;",
        "let d = request.object.metadata.name.bogus_fn();",
    );
    std::fs::write(&manifests, failing).unwrap();
    let output = metascript(["render", "-f", &path]);
    assert_eq!(output.status.code(), Some(1), "render must fail");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!(
            "error: {path}:13:48: DecoratorController/pdb: Deployment.apps/v1 shop/web: "
        )) && stderr.contains("line 1, column 38"),
        "the file's place first, the script's in the message: {stderr}"
    );
}
