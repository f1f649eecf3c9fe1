//! One service-per-pod sync hook call for a 10-replica StatefulSet, in Rhai and in Lua,
//! including the JSON conversion both ways (request `Value` in, response `Value` out).
//! Figures go in `docs/performance.md`.

use criterion::{Criterion, black_box, criterion_group, criterion_main};
use metascript::api::{HookKind, Language};
use metascript::script::{CallContext, ScriptEngine, ScriptOrigin, ScriptSource};
use serde_json::{Value, json};
use std::path::PathBuf;

const REPLICAS: usize = 10;

/// A steady-state request: the StatefulSet and the ten Services the previous sync created.
fn request() -> Value {
    let services: serde_json::Map<String, Value> = (0..REPLICAS)
        .map(|i| {
            let name = format!("web-{i}");
            let service = json!({
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {
                    "name": name,
                    "namespace": "prod",
                    "uid": format!("00000000-0000-0000-0000-00000000000{i}"),
                    "resourceVersion": "12345",
                    "creationTimestamp": "2024-05-01T10:00:00Z"
                },
                "spec": {
                    "selector": {"statefulset.kubernetes.io/pod-name": name},
                    "ports": [
                        {"name": "port-80", "port": 80, "targetPort": 8080, "protocol": "TCP"},
                        {"name": "port-443", "port": 443, "targetPort": 8443, "protocol": "TCP"}
                    ],
                    "clusterIP": format!("10.0.0.{i}"),
                    "type": "ClusterIP"
                }
            });
            (name, service)
        })
        .collect();
    json!({
        "controller": {
            "apiVersion": "metascript.dev/v1alpha1",
            "kind": "DecoratorController",
            "metadata": {"name": "service-per-pod"}
        },
        "object": {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {
                "name": "web",
                "namespace": "prod",
                "uid": "11111111-2222-3333-4444-555555555555",
                "generation": 3,
                "labels": {"app": "web"},
                "annotations": {
                    "service-per-pod-label": "statefulset.kubernetes.io/pod-name",
                    "service-per-pod-ports": "80:8080,443:8443"
                }
            },
            "spec": {
                "replicas": REPLICAS,
                "serviceName": "web",
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{
                        "name": "web",
                        "image": "nginx:1.27",
                        "ports": [{"containerPort": 8080}, {"containerPort": 8443}]
                    }]}
                }
            },
            "status": {"replicas": REPLICAS, "readyReplicas": REPLICAS}
        },
        "attachments": {"Service.v1": services},
        "related": {},
        "finalizing": false
    })
}

fn hook_call(c: &mut Criterion) {
    let engine = ScriptEngine::new();
    let request = request();
    let call = CallContext::new("service-per-pod", HookKind::Sync);
    let mut group = c.benchmark_group("service_per_pod_sync_10_pods");
    for (language, file) in [(Language::Rhai, "sync.rhai"), (Language::Lua, "sync.lua")] {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("scripts/service-per-pod")
            .join(file);
        let code = std::fs::read_to_string(&path).expect("example script");
        let script = engine
            .compile(&ScriptSource::new(
                language,
                code,
                ScriptOrigin::File { path },
            ))
            .expect("example compiles");
        let response = engine.call(&script, &request, &call).expect("example runs");
        assert_eq!(
            response["attachments"].as_array().map(Vec::len),
            Some(REPLICAS)
        );
        group.bench_function(language.as_str(), |b| {
            b.iter(|| engine.call(&script, black_box(&request), &call).unwrap())
        });
    }
    group.finish();
}

/// The fixed cost of a call: an empty request and a script that returns null. For Lua this is
/// mostly creating and sandboxing the per-call state.
fn call_overhead(c: &mut Criterion) {
    let engine = ScriptEngine::new();
    let call = CallContext::new("empty", HookKind::Sync);
    let request = json!({});
    let mut group = c.benchmark_group("empty_hook");
    for (language, code) in [(Language::Rhai, "()"), (Language::Lua, "return nil")] {
        let script = engine
            .compile(&ScriptSource::new(
                language,
                code,
                ScriptOrigin::File {
                    path: PathBuf::from("empty"),
                },
            ))
            .expect("compiles");
        group.bench_function(language.as_str(), |b| {
            b.iter(|| engine.call(&script, black_box(&request), &call).unwrap())
        });
    }
    group.finish();
}

criterion_group!(benches, hook_call, call_overhead);
criterion_main!(benches);
