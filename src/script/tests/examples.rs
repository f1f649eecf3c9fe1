//! The example hooks in `scripts/service-per-pod/`: both languages return identical JSON.

use super::*;
use serde_json::json;

fn example(file: &str) -> ScriptSource {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("scripts/service-per-pod")
        .join(file);
    let code = std::fs::read_to_string(&path).unwrap();
    ScriptSource::new(
        Language::from_file_name(file).unwrap(),
        code,
        ScriptOrigin::File { path },
    )
}

fn statefulset(replicas: Option<u32>, ports: &str) -> Value {
    let mut spec = json!({"serviceName": "web"});
    if let Some(replicas) = replicas {
        spec["replicas"] = json!(replicas);
    }
    json!({
        "controller": {"metadata": {"name": "service-per-pod"}},
        "object": {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {
                "name": "web",
                "namespace": "prod",
                "annotations": {
                    "service-per-pod-label": "statefulset.kubernetes.io/pod-name",
                    "service-per-pod-ports": ports
                }
            },
            "spec": spec
        },
        "attachments": {"Service.v1": {}},
        "related": {},
        "finalizing": false
    })
}

fn run_both(request: &Value) -> [Result<Value, ScriptError>; 2] {
    let engine = ScriptEngine::new();
    ["sync.rhai", "sync.lua"].map(|file| {
        let script = engine.compile(&example(file))?;
        engine.call(&script, request, &context())
    })
}

#[test]
fn both_languages_emit_one_service_per_pod() {
    let request = statefulset(Some(3), "80:8080, 443:8443");
    let [rhai, lua] = run_both(&request);
    let rhai = rhai.unwrap_or_else(|e| panic!("{e}"));
    let lua = lua.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(rhai, lua);
    assert_eq!(
        rhai["labels"],
        json!({"metascript.dev/service-per-pod": "true"})
    );
    let services = rhai["attachments"].as_array().unwrap();
    assert_eq!(services.len(), 3);
    assert_eq!(
        services[2],
        json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "web-2", "namespace": "prod"},
            "spec": {
                "selector": {"statefulset.kubernetes.io/pod-name": "web-2"},
                "ports": [
                    {"name": "port-80", "port": 80, "targetPort": 8080},
                    {"name": "port-443", "port": 443, "targetPort": 8443}
                ]
            }
        })
    );
}

#[test]
fn zero_replicas_is_an_empty_list_and_unset_replicas_is_one() {
    let [rhai, lua] = run_both(&statefulset(Some(0), "80:8080"));
    assert_eq!(rhai.unwrap()["attachments"], json!([]));
    assert_eq!(lua.unwrap()["attachments"], json!([]));
    let [rhai, lua] = run_both(&statefulset(None, "80:8080"));
    let (rhai, lua) = (rhai.unwrap(), lua.unwrap());
    assert_eq!(rhai, lua);
    assert_eq!(rhai["attachments"].as_array().unwrap().len(), 1);
}

#[test]
fn finalizing_releases_everything() {
    let mut request = statefulset(Some(2), "80:8080");
    request["finalizing"] = json!(true);
    let [rhai, lua] = run_both(&request);
    let expected = json!({
        "labels": {"metascript.dev/service-per-pod": null},
        "attachments": [],
        "finalized": true
    });
    assert_eq!(rhai.unwrap(), expected);
    assert_eq!(lua.unwrap(), expected);
}

#[test]
fn a_bad_port_list_fails_with_the_same_message() {
    let [rhai, lua] = run_both(&statefulset(Some(1), "80:8080,http"));
    let (rhai, lua) = (rhai.unwrap_err(), lua.unwrap_err());
    let expected = "service-per-pod-ports: invalid entry 'http' (expected port:targetPort)";
    assert_eq!(rhai.message, expected, "{rhai}");
    assert_eq!(lua.message, expected, "{lua}");
}
