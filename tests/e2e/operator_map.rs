//! MapController end to end against a real kube-apiserver and controller-manager: the
//! snapshot-schedule and configmap-transform examples, selector changes on parents and inputs,
//! detached outputs with and without a tombstone hook, status aggregation and cascading
//! deletion.
//!
//! A MapController has no selector of its own: it maps every parent of its type. Each test
//! therefore gives its parent CRD a group of its own, so concurrent tests never share parents.

use crate::support::cluster::Cluster;
use crate::support::transform::{TRANSFORM_CRDS, config_map, map_controller};
use crate::support::{eventually, test_namespace, unique_name};
use kube::api::{Api, Patch, PatchParams};
use metascript::object;
use serde_json::{Value, json};

const SNAPSHOT_CRDS: &str = include_str!("../../scripts/snapshot-schedule/crds.yaml");

fn pvc(namespace: &str, name: &str, app: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": app}},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    })
}

fn names_with_prefix(objects: &[Value], prefix: &str) -> Vec<String> {
    let mut names: Vec<String> = objects
        .iter()
        .map(|o| object::name(o).to_string())
        .filter(|n| n.starts_with(prefix))
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn snapshot_schedule_runs_in_rhai_and_lua() {
    let mut cluster = Cluster::new().await;
    // One parent type for both languages, one after the other: the garbage collector discovers
    // a new CRD only every 30 s, which each new group would pay.
    let group = format!("{}.example.com", unique_name("snap"));
    cluster
        .install(SNAPSHOT_CRDS, "SnapshotSchedule", &group)
        .await;
    for language in ["rhai", "lua"] {
        let namespace = test_namespace(&cluster.client, &format!("snapshots-{language}")).await;
        let read = |file: &str| {
            std::fs::read_to_string(format!("scripts/snapshot-schedule/{file}")).unwrap()
        };
        // The example's hooks and library, the library with `edit` appended.
        let hooks = |edit: &str| {
            config_map(
                &namespace,
                "hooks",
                json!({}),
                json!({
                    format!("map.{language}"): read(&format!("map.{language}")),
                    format!("tombstone.{language}"): read(&format!("tombstone.{language}")),
                    format!("snapshots.{language}"): read(&format!("snapshots.{language}")) + edit,
                }),
            )
        };
        cluster.apply(&hooks("")).await;
        let by_ref = |key: String| json!({"script": {"configMapRef": {"namespace": namespace, "name": "hooks", "key": key}}});
        let name = unique_name(&format!("snapshots-{language}"));
        let mut controller = map_controller(
            &name,
            (&format!("{group}/v1"), "snapshotschedules"),
            "persistentvolumeclaims",
            ("snapshot.storage.k8s.io/v1", "volumesnapshots"),
            json!({"map": by_ref(format!("map.{language}")), "tombstone": by_ref(format!("tombstone.{language}"))}),
        );
        // Both hooks call the library the example ships (`snapshots.<language>`).
        controller["spec"]["libraries"] = json!([{
            "name": "snapshots",
            "configMapRef": {"namespace": namespace, "name": "hooks", "key": format!("snapshots.{language}")}
        }]);
        cluster.apply(&controller).await;
        for (claim, app) in [("data-0", "db"), ("data-1", "db"), ("other", "web")] {
            let claim = pvc(&namespace, claim, app);
            cluster.apply(&claim).await;
            // No volume controller runs here; mark the claims bound as one would.
            cluster
                .patch_status(&claim, json!({"phase": "Bound"}))
                .await;
        }
        let schedule = json!({
            "apiVersion": format!("{group}/v1"), "kind": "SnapshotSchedule",
            "metadata": {"name": "nightly", "namespace": namespace},
            "spec": {"selector": {"matchLabels": {"app": "db"}}, "snapshotInterval": "1h", "snapshotTTL": "10d"}
        });
        cluster.apply(&schedule).await;

        let snapshot_like = json!({"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot", "metadata": {"name": "x", "namespace": namespace}});
        let snapshots = eventually(
            &format!("{language}: one snapshot per selected claim"),
            || async {
                let all = cluster.list(&snapshot_like).await;
                (names_with_prefix(&all, "data-0-").len() == 1
                    && names_with_prefix(&all, "data-1-").len() == 1)
                    .then_some(all)
            },
        )
        .await;
        assert!(
            names_with_prefix(&snapshots, "other-").is_empty(),
            "an unselected claim got a snapshot"
        );
        for snapshot in &snapshots {
            let owner = &snapshot["metadata"]["ownerReferences"][0];
            assert_eq!(owner["kind"], "SnapshotSchedule");
            assert_eq!(owner["name"], "nightly");
            assert_eq!(
                snapshot["metadata"]["labels"]["metascript.dev/map"],
                name.as_str()
            );
            assert!(snapshot["metadata"]["labels"]["metascript.dev/map-key"].is_string());
        }
        cluster
            .wait_for(&schedule, "aggregated status", |s| {
                s["status"]["inputs"]["persistentvolumeclaims"]["total"] == 2
                    && s["status"]["outputs"]["volumesnapshots"]["total"] == 2
            })
            .await;
        // An output's condition turning True is counted (by the event that carries it: the
        // parent's counts are not read again from the cache meanwhile).
        cluster
            .patch_status(
                &snapshots[0],
                json!({"conditions": [{"type": "ReadyToUse", "status": "True"}]}),
            )
            .await;
        cluster
            .wait_for(&schedule, "the ready snapshot counted", |s| {
                s["status"]["outputs"]["volumesnapshots"]["readyToUse"] == 1
                    && s["status"]["outputs"]["volumesnapshots"]["total"] == 2
            })
            .await;

        // Editing the library reloads both hooks that use it: each runs a new program.
        let digests = |c: &Value| {
            ["map", "tombstone"].map(|hook| c["status"]["scripts"][hook]["digest"].clone())
        };
        let running = cluster
            .wait_for(&controller, "scripts published", |c| {
                digests(c).iter().all(Value::is_string)
            })
            .await;
        let comment = if language == "lua" { "--" } else { "//" };
        cluster
            .apply(&hooks(&format!("\n{comment} edited\n")))
            .await;
        cluster
            .wait_for(
                &controller,
                "both hooks reloaded with the edited library",
                |c| {
                    let now = digests(c);
                    now.iter().all(Value::is_string)
                        && now
                            .iter()
                            .zip(digests(&running).iter())
                            .all(|(a, b)| a != b)
                },
            )
            .await;

        // A deleted claim's snapshots are detached; the tombstone hook keeps them within TTL.
        let kept = names_with_prefix(&snapshots, "data-1-").remove(0);
        let gone = pvc(&namespace, "data-1", "db");
        cluster.delete(&gone).await;
        // The pvc-protection finalizer's controller does not run here; release it as it would.
        cluster
            .api(&gone)
            .patch(
                "data-1",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
            )
            .await
            .expect("releasing the pvc-protection finalizer");
        cluster
            .wait_for(&schedule, "one claim left", |s| {
                s["status"]["inputs"]["persistentvolumeclaims"]["total"] == 1
            })
            .await;
        let mut kept_like = snapshot_like.clone();
        kept_like["metadata"]["name"] = json!(kept);
        assert!(
            cluster.get(&kept_like).await.is_some(),
            "the tombstone hook keeps snapshots within their TTL"
        );

        // Deleting the schedule removes its snapshots through garbage collection.
        cluster.delete(&schedule).await;
        eventually(
            &format!("{language}: snapshots garbage-collected"),
            || async {
                let all = cluster.list(&snapshot_like).await;
                (names_with_prefix(&all, "data-").is_empty()).then_some(())
            },
        )
        .await;
        cluster.delete(&controller).await;
        cluster
            .wait_gone(
                &controller,
                "the controller removed before the next language",
            )
            .await;
    }
}

#[tokio::test]
async fn configmap_transform_follows_selectors_and_never_maps_its_own_outputs() {
    let mut cluster = Cluster::new().await;
    let group = format!("{}.example.com", unique_name("transform"));
    cluster
        .install(TRANSFORM_CRDS, "ConfigTemplate", &group)
        .await;
    let namespace = test_namespace(&cluster.client, "transform").await;
    let name = unique_name("transform");
    let map = include_str!("../../scripts/configmap-transform/map.rhai");
    cluster
        .apply(&map_controller(
            &name,
            (&format!("{group}/v1"), "configtemplates"),
            "configmaps",
            ("v1", "configmaps"),
            json!({"map": {"script": {"language": "rhai", "inline": map}}}),
        ))
        .await;
    cluster
        .apply(&config_map(
            &namespace,
            "web",
            json!({"app": "web"}),
            json!({"port": "80"}),
        ))
        .await;
    cluster
        .apply(&config_map(
            &namespace,
            "db",
            json!({"app": "db"}),
            json!({"port": "5432"}),
        ))
        .await;
    let template = |app: &str| {
        json!({
            "apiVersion": format!("{group}/v1"), "kind": "ConfigTemplate",
            "metadata": {"name": "app-env", "namespace": namespace},
            "spec": {"selector": {"matchLabels": {"app": app}}, "keyPrefix": "APP_"}
        })
    };
    cluster.apply(&template("web")).await;
    let rendered = |source: &str| {
        config_map(
            &namespace,
            &format!("{source}-rendered"),
            json!({}),
            json!({}),
        )
    };
    let web = cluster
        .wait_for(&rendered("web"), "web rendered", |_| true)
        .await;
    assert_eq!(web["data"], json!({"APP_port": "80"}));
    assert_eq!(
        web["metadata"]["ownerReferences"][0]["kind"],
        "ConfigTemplate"
    );
    // The rendered copy carries app=web too, but is the template's own output: never an input.
    cluster
        .wait_for(
            &template("web"),
            "status counts one input and one output",
            |t| {
                t["status"]["inputs"]["configmaps"]["total"] == 1
                    && t["status"]["outputs"]["configmaps"]["total"] == 1
            },
        )
        .await;
    assert!(
        cluster.get(&rendered("web-rendered")).await.is_none(),
        "an output was mapped again"
    );
    assert!(cluster.get(&rendered("db")).await.is_none());

    // An input edit is mapped again; an input that stops matching loses its output at once.
    cluster
        .apply(&config_map(
            &namespace,
            "web",
            json!({"app": "web"}),
            json!({"port": "8080"}),
        ))
        .await;
    cluster
        .wait_for(&rendered("web"), "web re-rendered", |o| {
            o["data"]["APP_port"] == "8080"
        })
        .await;
    cluster
        .apply(&config_map(
            &namespace,
            "web",
            json!({"app": "retired"}),
            json!({"port": "8080"}),
        ))
        .await;
    cluster
        .wait_gone(
            &rendered("web"),
            "web's output deleted when it stopped matching",
        )
        .await;

    // A parent's selector change moves the mapping to what it selects now.
    cluster.apply(&template("db")).await;
    let db = cluster
        .wait_for(&rendered("db"), "db rendered", |_| true)
        .await;
    assert_eq!(db["data"], json!({"APP_port": "5432"}));
    cluster
        .apply(&config_map(
            &namespace,
            "web",
            json!({"app": "web"}),
            json!({"port": "8080"}),
        ))
        .await;
    cluster
        .wait_for(&template("db"), "status follows the new selector", |t| {
            t["status"]["inputs"]["configmaps"]["total"] == 1
        })
        .await;
    assert!(
        cluster.get(&rendered("web")).await.is_none(),
        "web is no longer selected"
    );

    // Deleting the input deletes its output (no tombstone hook).
    cluster
        .delete(&config_map(&namespace, "db", json!({}), json!({})))
        .await;
    cluster
        .wait_gone(&rendered("db"), "db's output deleted with its input")
        .await;
}

/// A tombstone hook whose decision depends on the parent: it is asked again when things change,
/// so detached outputs are kept exactly as long as it says.
#[tokio::test]
async fn the_tombstone_hook_is_asked_again_until_it_lets_go() {
    let mut cluster = Cluster::new().await;
    let group = format!("{}.example.com", unique_name("retain"));
    cluster
        .install(TRANSFORM_CRDS, "ConfigTemplate", &group)
        .await;
    let namespace = test_namespace(&cluster.client, "retain").await;
    let name = unique_name("retain");
    let map = r#"return { outputs = { { apiVersion = "v1", kind = "ConfigMap",
        metadata = { name = name(request.input) .. "-copy" }, data = request.input.data } } }"#;
    let tombstone = r#"
        local keep = array()
        if request.parent.spec.keyPrefix == "keep" then
          for _, group in pairs(request.outputs) do
            for _, output in pairs(group) do table.insert(keep, output) end
          end
        end
        return { outputs = keep }"#;
    let mut controller = map_controller(
        &name,
        (&format!("{group}/v1"), "configtemplates"),
        "configmaps",
        ("v1", "configmaps"),
        json!({"map": {"script": {"language": "lua", "inline": map}}, "tombstone": {"script": {"language": "lua", "inline": tombstone}}}),
    );
    controller["spec"]["resyncPeriodSeconds"] = json!(1);
    cluster.apply(&controller).await;
    let template = |prefix: &str| {
        json!({
            "apiVersion": format!("{group}/v1"), "kind": "ConfigTemplate",
            "metadata": {"name": "retain", "namespace": namespace},
            "spec": {"selector": {"matchLabels": {"copy": "yes"}}, "keyPrefix": prefix}
        })
    };
    cluster.apply(&template("keep")).await;
    let source = config_map(
        &namespace,
        "source",
        json!({"copy": "yes"}),
        json!({"a": "1"}),
    );
    cluster.apply(&source).await;
    let copy = config_map(&namespace, "source-copy", json!({}), json!({}));
    cluster.wait_for(&copy, "the copy", |_| true).await;

    cluster.delete(&source).await;
    cluster
        .wait_for(&template("keep"), "the input gone from status", |t| {
            t["status"]["inputs"]["configmaps"]["total"] == 0
        })
        .await;
    // Through several resyncs (period 1 s) the tombstone hook keeps saying "keep".
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    assert!(
        cluster.get(&copy).await.is_some(),
        "the tombstone hook kept it"
    );

    cluster.apply(&template("drop")).await;
    cluster
        .wait_gone(&copy, "the copy deleted once the tombstone hook lets go")
        .await;
}

#[tokio::test]
async fn a_failing_map_hook_deletes_nothing_and_reports_on_the_parent() {
    let mut cluster = Cluster::new().await;
    let group = format!("{}.example.com", unique_name("failing"));
    cluster
        .install(TRANSFORM_CRDS, "ConfigTemplate", &group)
        .await;
    let namespace = test_namespace(&cluster.client, "failing").await;
    let name = unique_name("failing");
    let map = |broken: bool| {
        let guard = if broken {
            "if request.input.data.fail == \"yes\" then error(\"refusing \" .. name(request.input)) end\n"
        } else {
            ""
        };
        format!(
            "{guard}return {{ outputs = {{ {{ apiVersion = \"v1\", kind = \"ConfigMap\", metadata = {{ name = name(request.input) .. \"-out\" }}, data = request.input.data }} }} }}"
        )
    };
    let controller = |broken: bool| {
        map_controller(
            &name,
            (&format!("{group}/v1"), "configtemplates"),
            "configmaps",
            ("v1", "configmaps"),
            json!({"map": {"script": {"language": "lua", "inline": map(broken)}}}),
        )
    };
    cluster.apply(&controller(false)).await;
    cluster
        .apply(&json!({
            "apiVersion": format!("{group}/v1"), "kind": "ConfigTemplate",
            "metadata": {"name": "t", "namespace": namespace},
            "spec": {"selector": {"matchLabels": {"in": "yes"}}}
        }))
        .await;
    let source = |fail: &str| {
        config_map(
            &namespace,
            "src",
            json!({"in": "yes"}),
            json!({"fail": fail}),
        )
    };
    cluster.apply(&source("no")).await;
    let out = config_map(&namespace, "src-out", json!({}), json!({}));
    cluster.wait_for(&out, "the output", |_| true).await;

    let digest = |c: &Value| {
        c["status"]["scripts"]["map"]["digest"]
            .as_str()
            .map(str::to_string)
    };
    let working = cluster
        .wait_for(&controller(false), "the working script's digest", |c| {
            digest(c).is_some()
        })
        .await;
    cluster.apply(&controller(true)).await;
    // The broken version must be the one running before the input changes.
    cluster
        .wait_for(&controller(true), "the broken script loaded", |c| {
            digest(c).is_some() && digest(c) != digest(&working)
        })
        .await;
    cluster.apply(&source("yes")).await;
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(cluster.client.clone(), &namespace);
    let event = eventually("a HookFailed event on the parent", || async {
        events
            .list(&Default::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("HookFailed"))
    })
    .await;
    assert_eq!(
        event.regarding.as_ref().and_then(|r| r.kind.as_deref()),
        Some("ConfigTemplate")
    );
    assert!(event.note.unwrap_or_default().contains("refusing src"));
    let status = eventually("failing counted in the MapController status", || async {
        let controller = cluster.get(&controller(true)).await?;
        (controller["status"]["failing"] == 1).then_some(controller["status"].clone())
    })
    .await;
    assert_eq!(status["conditions"][0]["type"], "Ready");
    let kept = cluster
        .get(&out)
        .await
        .expect("a failing map hook must not delete outputs");
    assert_eq!(kept["data"]["fail"], "no", "nothing was applied either");

    // The parent says so itself, and says so no longer once the pair maps again.
    let parent = json!({"apiVersion": format!("{group}/v1"), "kind": "ConfigTemplate",
        "metadata": {"name": "t", "namespace": namespace}});
    let synced = |status: &'static str| {
        move |parent: &Value| {
            parent["status"]["conditions"]
                .as_array()
                .and_then(|c| c.iter().find(|c| c["type"] == "Synced"))
                .is_some_and(|c| c["status"] == status)
        }
    };
    let failing = cluster
        .wait_for(&parent, "the parent's Synced=False", synced("False"))
        .await;
    let condition = failing["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Synced"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(condition["reason"], "HookFailed", "{condition}");
    assert!(
        condition["message"]
            .as_str()
            .unwrap_or_default()
            .contains("refusing src"),
        "{condition}"
    );
    cluster.apply(&source("no")).await;
    cluster
        .wait_for(&parent, "the parent's Synced=True", synced("True"))
        .await;
}

/// Editing a MapController's inline map script re-runs every pair with the new version.
#[tokio::test]
async fn editing_the_map_script_remaps_every_input() {
    let mut cluster = Cluster::new().await;
    let group = format!("{}.example.com", unique_name("remap"));
    cluster
        .install(TRANSFORM_CRDS, "ConfigTemplate", &group)
        .await;
    let namespace = test_namespace(&cluster.client, "remap").await;
    let name = unique_name("remap");
    let controller = |version: &str| {
        let map = format!(
            "return {{ outputs = {{ {{ apiVersion = \"v1\", kind = \"ConfigMap\", metadata = {{ name = name(request.input) .. \"-out\" }}, data = {{ version = \"{version}\" }} }} }} }}"
        );
        map_controller(
            &name,
            (&format!("{group}/v1"), "configtemplates"),
            "configmaps",
            ("v1", "configmaps"),
            json!({"map": {"script": {"language": "lua", "inline": map}}}),
        )
    };
    cluster.apply(&controller("one")).await;
    cluster
        .apply(&json!({
            "apiVersion": format!("{group}/v1"), "kind": "ConfigTemplate",
            "metadata": {"name": "t", "namespace": namespace},
            "spec": {"selector": {"matchLabels": {"in": "yes"}}}
        }))
        .await;
    for source in ["a", "b", "c"] {
        cluster
            .apply(&config_map(
                &namespace,
                source,
                json!({"in": "yes"}),
                json!({}),
            ))
            .await;
    }
    for source in ["a", "b", "c"] {
        let out = config_map(&namespace, &format!("{source}-out"), json!({}), json!({}));
        cluster
            .wait_for(&out, "version one", |o| o["data"]["version"] == "one")
            .await;
    }
    cluster.apply(&controller("two")).await;
    for source in ["a", "b", "c"] {
        let out = config_map(&namespace, &format!("{source}-out"), json!({}), json!({}));
        cluster
            .wait_for(&out, "version two", |o| o["data"]["version"] == "two")
            .await;
    }
}

/// A deleted parent is forgotten: its pairs (a failing one included) leave the controller's
/// counts and stop being retried, while the other parents go on.
#[tokio::test]
async fn a_deleted_parent_is_forgotten_and_the_others_go_on() {
    let mut cluster = Cluster::new().await;
    let group = format!("{}.example.com", unique_name("forget-parent"));
    cluster
        .install(TRANSFORM_CRDS, "ConfigTemplate", &group)
        .await;
    let namespace = test_namespace(&cluster.client, "forget-parent").await;
    let name = unique_name("forget-parent");
    let map = r#"
        if request.input.data.fail == "yes" then error("refusing " .. name(request.input)) end
        return { outputs = { {
            apiVersion = "v1", kind = "ConfigMap",
            metadata = { name = name(request.parent) .. "-" .. name(request.input) },
            data = request.input.data,
        } } }
    "#;
    let controller = map_controller(
        &name,
        (&format!("{group}/v1"), "configtemplates"),
        "configmaps",
        ("v1", "configmaps"),
        json!({"map": {"script": {"language": "lua", "inline": map}}}),
    );
    cluster.apply(&controller).await;
    let parent = |which: &str| {
        json!({
            "apiVersion": format!("{group}/v1"), "kind": "ConfigTemplate",
            "metadata": {"name": which, "namespace": namespace},
            "spec": {"selector": {"matchLabels": {"for": which}}}
        })
    };
    let input = |input: &str, which: &str, fail: &str| {
        config_map(
            &namespace,
            input,
            json!({"for": which}),
            json!({"fail": fail}),
        )
    };
    cluster.apply(&input("a1", "a", "no")).await;
    cluster.apply(&input("a2", "a", "no")).await;
    cluster.apply(&input("b1", "b", "no")).await;
    cluster.apply(&input("b2", "b", "yes")).await;
    cluster.apply(&parent("a")).await;
    cluster.apply(&parent("b")).await;
    let counts = |status: &Value| {
        (
            status["targets"].as_u64(),
            status["synced"].as_u64(),
            status["failing"].as_u64(),
        )
    };
    eventually("4 pairs, one failing", || async {
        let controller = cluster.get(&controller).await?;
        (counts(&controller["status"]) == (Some(4), Some(3), Some(1))).then_some(())
    })
    .await;

    cluster
        .api(&parent("b"))
        .delete("b", &Default::default())
        .await
        .expect("deleting parent b");
    eventually("parent b's pairs forgotten", || async {
        let controller = cluster.get(&controller).await?;
        (counts(&controller["status"]) == (Some(2), Some(2), Some(0))).then_some(())
    })
    .await;
    cluster.apply(&input("a3", "a", "no")).await;
    cluster
        .wait_for(
            &config_map(&namespace, "a-a3", json!({}), json!({})),
            "parent a maps a new input",
            |_| true,
        )
        .await;
    eventually("parent a's three pairs counted", || async {
        let controller = cluster.get(&controller).await?;
        (counts(&controller["status"]) == (Some(3), Some(3), Some(0))).then_some(())
    })
    .await;
}
