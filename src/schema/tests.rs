use super::*;
use serde_json::json;
use std::cell::Cell;

/// [`super::check`] with the object as it is now given, not looked up.
fn check(
    schemas: &dyn SchemaSource,
    object: &Value,
    old: Option<&Value>,
    part: Part,
) -> Vec<Violation> {
    super::check(schemas, object, || old, part)
}

/// A CRD in the shape of the e2e suite's: a pruning schema with bounds, an enum, a pattern, a
/// list-map, an embedded resource, a preserved free-form field and CEL rules, one of them a
/// transition rule with a `messageExpression`.
fn widgets() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "names": {"kind": "Widget", "plural": "widgets"},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {
                            "type": "object",
                            "required": ["size"],
                            "x-kubernetes-validations": [
                                {"rule": "self.replicas <= self.maxReplicas",
                                 "message": "replicas may not exceed maxReplicas",
                                 "fieldPath": ".replicas"},
                                {"rule": "self.size == oldSelf.size",
                                 "messageExpression": "'size is immutable: it was ' + oldSelf.size"}
                            ],
                            "properties": {
                                "size": {"type": "string", "enum": ["small", "large"]},
                                "replicas": {"type": "integer", "minimum": 0, "default": 1},
                                "maxReplicas": {"type": "integer", "default": 10},
                                "owner": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 8},
                                "ports": {
                                    "type": "array",
                                    "x-kubernetes-list-type": "map",
                                    "x-kubernetes-list-map-keys": ["name"],
                                    "items": {"type": "object", "required": ["name"], "properties": {
                                        "name": {"type": "string"},
                                        "port": {"x-kubernetes-int-or-string": true}
                                    }}
                                },
                                "template": {
                                    "type": "object",
                                    "x-kubernetes-embedded-resource": true,
                                    "x-kubernetes-preserve-unknown-fields": true
                                },
                                "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                                "tags": {"type": "object", "additionalProperties": {"type": "string"}}
                            }
                        },
                        "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}}
                    }
                }}
            }]
        }
    })
}

fn schemas() -> Schemas {
    let schemas = Schemas::with_builtins();
    schemas.add_crd(&widgets());
    schemas
}

fn widget(spec: Value) -> Value {
    json!({
        "apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "w", "namespace": "ns", "labels": {"app": "w"}},
        "spec": spec
    })
}

fn said(violations: &[Violation]) -> Vec<String> {
    violations.iter().map(ToString::to_string).collect()
}

#[test]
fn a_valid_custom_resource_passes_with_defaults_filling_what_rules_read() {
    let object = widget(json!({
        "size": "small",
        "owner": "ops",
        "ports": [{"name": "http", "port": 80}, {"name": "admin", "port": "admin"}],
        "template": {"apiVersion": "v1", "kind": "Pod", "anything": {"goes": true}},
        "extra": {"free": ["form"]},
        "tags": {"team": "a"}
    }));
    assert_eq!(
        said(&check(&schemas(), &object, None, Part::Resource)),
        Vec::<String>::new()
    );
}

#[test]
fn structural_violations_name_the_field_and_what_was_wrong() {
    let object = widget(json!({
        "size": "medium",
        "replicas": "three",
        "owner": "Ops-Team-Nine",
        "ports": [{"name": "http", "port": 80}, {"name": "http", "port": true}, {"port": 1}],
        "template": {"spec": {}},
        "tags": {"team": 7},
        "replcias": 2
    }));
    let found = said(&check(&schemas(), &object, None, Part::Resource));
    let expected = [
        r#"spec.size: must be one of "small", "large", not "medium""#,
        r#"spec.replicas: must be an integer, not a string ("three")"#,
        r#"spec.owner: may not be longer than 8 characters (it has 13)"#,
        r#"spec.owner: "Ops-Team-Nine" must match the pattern "^[a-z]+$""#,
        r#"spec.ports[1]: duplicate entry for the list's keys [name="http"]"#,
        r#"spec.ports[1].port: must be an integer or a string, not a boolean (true)"#,
        r#"spec.ports[2].name: is required"#,
        r#"spec.template.apiVersion: is required in an embedded resource"#,
        r#"spec.template.kind: is required in an embedded resource"#,
        r#"spec.tags[team]: must be a string, not an integer (7)"#,
        r#"spec.replcias: unknown field, not in the schema (did you mean "replicas"?)"#,
    ];
    for line in expected {
        assert!(
            found.contains(&line.to_string()),
            "missing {line:?} in {found:#?}"
        );
    }
    assert_eq!(found.len(), expected.len(), "{found:#?}");
    assert!(
        check(&schemas(), &widget(json!({})), None, Part::Resource)
            .iter()
            .any(|v| v.to_string() == "spec.size: is required")
    );
}

#[test]
fn rules_run_once_the_structure_holds_with_their_messages_and_field_paths() {
    let object = widget(json!({"size": "small", "replicas": 20}));
    let violations = check(&schemas(), &object, None, Part::Resource);
    assert_eq!(
        said(&violations),
        [
            "spec.replicas: replicas may not exceed maxReplicas (rule: self.replicas <= self.maxReplicas)"
        ]
    );
    assert_eq!(violations[0].kind, ViolationKind::Rule);
    // A structural violation holds the rules back, as in the API server.
    let broken = widget(json!({"size": "small", "replicas": 20, "maxReplicas": "ten"}));
    assert_eq!(
        said(&check(&schemas(), &broken, None, Part::Resource)),
        [r#"spec.maxReplicas: must be an integer, not a string ("ten")"#]
    );
}

#[test]
fn a_transition_rule_judges_the_change_from_the_observed_object() {
    let old = widget(json!({"size": "small"}));
    let new = widget(json!({"size": "large"}));
    assert!(
        check(&schemas(), &new, None, Part::Resource).is_empty(),
        "no old object: skipped"
    );
    assert!(check(&schemas(), &old, Some(&old), Part::Resource).is_empty());
    assert_eq!(
        said(&check(&schemas(), &new, Some(&old), Part::Resource)),
        ["spec: size is immutable: it was small (rule: self.size == oldSelf.size)"]
    );
}

#[test]
fn a_rule_this_check_cannot_evaluate_is_said_and_does_not_block() {
    let crd = json!({
        "metadata": {"name": "gadgets.example.com"},
        "spec": {"group": "example.com", "names": {"kind": "Gadget"}, "versions": [{
            "name": "v1", "served": true,
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {
                "type": "object",
                "properties": {"names": {"type": "array", "items": {"type": "string"}}},
                "x-kubernetes-validations": [{"rule": "self.names.sortBy(n, n) == self.names"}]
            }}}}
        }]}
    });
    let schemas = Schemas::default();
    schemas.add_crd(&crd);
    let object = json!({"apiVersion": "example.com/v1", "kind": "Gadget",
                        "metadata": {"name": "g"}, "spec": {"names": ["b", "a"]}});
    let violations = check(&schemas, &object, None, Part::Resource);
    assert_eq!(violations.len(), 1, "{violations:#?}");
    assert_eq!(violations[0].kind, ViolationKind::Unchecked);
    assert!(!violations[0].blocks());
    assert!(
        violations[0].message.contains("sortBy"),
        "{}",
        violations[0]
    );
}

#[test]
fn built_in_types_are_checked_against_the_bundled_schemas() {
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "labels": {"app": "web"}, "annotations": {"a": "b"}},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{
                    "name": "web", "image": "nginx",
                    "ports": [{"containerPort": 80, "protocol": "TCP"}],
                    "resources": {"limits": {"cpu": "500m", "memory": 1000000}}
                }]}
            },
            "strategy": {"rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 1}}
        }
    });
    let schemas = Schemas::with_builtins();
    assert_eq!(
        said(&check(&schemas, &deployment, None, Part::Resource)),
        Vec::<String>::new()
    );

    let mut wrong = deployment.clone();
    wrong["spec"]["replicas"] = json!("2");
    wrong["spec"]["template"]["spec"]["containers"][0]["imagePullPolice"] = json!("Always");
    wrong["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = json!("http");
    wrong["metadata"]["labels"]["app"] = json!(1);
    wrong["spec"]["selector"] = Value::Null;
    let found = said(&check(&schemas, &wrong, None, Part::Resource));
    let expected = [
        r#"metadata.labels[app]: must be a string, not an integer (1)"#,
        r#"spec.replicas: must be an integer, not a string ("2")"#,
        r#"spec.selector: is required"#,
        r#"spec.template.spec.containers[0].imagePullPolice: unknown field, not in the schema (did you mean "imagePullPolicy"?)"#,
        r#"spec.template.spec.containers[0].ports[0].containerPort: must be an integer, not a string ("http")"#,
    ];
    for line in expected {
        assert!(
            found.contains(&line.to_string()),
            "missing {line:?} in {found:#?}"
        );
    }
    assert_eq!(found.len(), expected.len(), "{found:#?}");
}

#[test]
fn free_form_built_in_fields_and_unknown_types_pass() {
    let schemas = Schemas::with_builtins();
    let config = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
                        "data": {"any-key": "text"}});
    assert!(check(&schemas, &config, None, Part::Resource).is_empty());
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
                        "data": {"token": "not base64!"}});
    // A Secret's value stays out of the message; a format is said, not held against it.
    let found = check(&schemas, &secret, None, Part::Resource);
    assert_eq!(
        said(&found),
        ["data[token]: the value is not a valid byte: expected base64 (standard alphabet, padded)"]
    );
    assert!(!found[0].blocks());
    let unknown = json!({"apiVersion": "example.com/v9", "kind": "Nope", "spec": {"x": 1}});
    assert!(
        check(&schemas, &unknown, None, Part::Resource).is_empty(),
        "no schema, no check"
    );
    assert!(check(&NoSchemas, &config, None, Part::Resource).is_empty());
}

#[test]
fn a_crd_replaced_or_removed_changes_what_is_checked() {
    let schemas = schemas();
    let object = widget(json!({"size": "medium"}));
    assert!(!check(&schemas, &object, None, Part::Resource).is_empty());
    let mut relaxed = widgets();
    relaxed["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"] =
        json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
    schemas.add_crd(&relaxed);
    assert!(check(&schemas, &object, None, Part::Resource).is_empty());
    schemas.remove_crd("widgets.example.com");
    assert!(schemas.schema("example.com/v1", "Widget").is_none());
}

#[test]
fn a_status_is_checked_alone_and_a_resource_without_its_status() {
    let mut object = widget(json!({"size": "small"}));
    object["status"] = json!({"ready": "yes"});
    assert!(check(&schemas(), &object, None, Part::Resource).is_empty());
    assert_eq!(
        said(&check(&schemas(), &object, None, Part::Status)),
        [r#"status.ready: must be a boolean, not a string ("yes")"#]
    );
}

#[test]
fn what_the_object_has_now_is_left_to_the_api_server() {
    // Ratcheting: an invalid value the output does not change does not block it.
    let old = widget(json!({"size": "medium", "replicas": 20}));
    let same = widget(json!({"size": "medium", "replicas": 20, "owner": "ops"}));
    let found = check(&schemas(), &same, Some(&old), Part::Resource);
    assert_eq!(
        said(&found),
        [
            r#"spec.size: must be one of "small", "large", not "medium" (as it is now, so left to the API server)"#
        ]
    );
    assert!(!found[0].blocks());
    // A required field another manager set stays in place through an apply.
    let old = widget(json!({"size": "small"}));
    let without = widget(json!({"owner": "ops"}));
    let found = check(&schemas(), &without, Some(&old), Part::Resource);
    assert!(found.iter().all(|v| !v.blocks()), "{found:#?}");
    // A changed value is held against the output as ever.
    let changed = widget(json!({"size": "huge"}));
    assert!(check(&schemas(), &changed, Some(&old), Part::Resource)[0].blocks());
}

#[test]
fn only_a_false_rule_blocks_and_an_evaluation_error_is_said() {
    let crd = json!({
        "metadata": {"name": "ratios.example.com"},
        "spec": {"group": "example.com", "names": {"kind": "Ratio"}, "versions": [{
            "name": "v1", "served": true,
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {
                "type": "object",
                "properties": {"ratio": {"type": "number", "multipleOf": 0.1}},
                "x-kubernetes-validations": [{"rule": "self.ratio * 100.0 <= 50.0"}]
            }}}}
        }]}
    });
    let schemas = Schemas::default();
    schemas.add_crd(&crd);
    let ratio = |value: Value| {
        json!({"apiVersion": "example.com/v1", "kind": "Ratio", "metadata": {"name": "r"},
               "spec": {"ratio": value}})
    };
    // 0.3 is a multiple of 0.1, rounding aside, and the rule holds.
    assert_eq!(
        said(&check(&schemas, &ratio(json!(0.3)), None, Part::Resource)),
        Vec::<String>::new()
    );
    let found = check(&schemas, &ratio(json!(0.7)), None, Part::Resource);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(found[0].blocks(), "a false rule blocks");
    // `1` reads as an int to kube-cel, and int * double fails where the API server's typed
    // CEL passes: said, not held against the object.
    let found = check(&schemas, &ratio(json!(1)), None, Part::Resource);
    assert!(found.iter().all(|v| !v.blocks()), "{found:#?}");
}

#[test]
fn a_null_is_a_value_only_where_the_schema_keeps_it() {
    let crd = json!({
        "metadata": {"name": "nulls.example.com"},
        "spec": {"group": "example.com", "names": {"kind": "Null"}, "versions": [{
            "name": "v1", "served": true,
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {
                "type": "object", "required": ["kept", "dropped"],
                "properties": {
                    "kept": {"type": "string", "nullable": true},
                    "dropped": {"type": "string"}
                }
            }}}}
        }]}
    });
    let schemas = Schemas::default();
    schemas.add_crd(&crd);
    let object = json!({"apiVersion": "example.com/v1", "kind": "Null", "metadata": {"name": "n"},
                        "spec": {"kept": null, "dropped": null}});
    assert_eq!(
        said(&check(&schemas, &object, None, Part::Resource)),
        ["spec.dropped: is required"]
    );
}

#[test]
fn on_another_kubernetes_version_unknown_built_in_fields_are_left_to_the_api_server() {
    let service = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
                         "spec": {"trafficDistribution": "PreferClose", "newField": 1}});
    let same = check(
        &Schemas::for_server(Some("v1.36.0-gke.1")),
        &service,
        None,
        Part::Resource,
    );
    assert!(same.iter().any(Violation::blocks), "{same:#?}");
    let newer = check(
        &Schemas::for_server(Some("v1.37.2")),
        &service,
        None,
        Part::Resource,
    );
    assert_eq!(newer.len(), 1, "{newer:#?}");
    assert!(!newer[0].blocks());
    assert!(
        newer[0]
            .message
            .contains("the cluster runs another version"),
        "{}",
        newer[0]
    );
    assert!(Schemas::for_server(None).schema("v1", "Service").is_some());
    assert!(!Schemas::for_server(None).builtins_elsewhere());
}

#[test]
fn the_observed_object_is_read_only_when_a_check_needs_it() {
    let builtins = Schemas::with_builtins();
    let service = |port: Value| {
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "namespace": "n"},
               "spec": {"ports": [{"port": port}]}})
    };
    let old = service(json!("eighty"));
    let reads = Cell::new(0);
    let observed = || {
        reads.set(reads.get() + 1);
        Some(&old)
    };
    // Valid, and Services have no transition rules: the observed Service is not read.
    let valid = super::check(&builtins, &service(json!(80)), observed, Part::Resource);
    assert!(valid.is_empty(), "{valid:#?}");
    assert_eq!(reads.get(), 0);
    // Invalid as it already is: read, and the violation does not block (ratcheting).
    let found = super::check(&builtins, &old, observed, Part::Resource);
    assert_eq!(reads.get(), 1);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(found[0].unchanged && !found[0].blocks());

    // A CRD with a transition rule reads it before the rules run: a valid object's rule
    // compares with it.
    let now = widget(json!({"size": "large"}));
    let reads = Cell::new(0);
    let before = widget(json!({"size": "small"}));
    let found = super::check(
        &schemas(),
        &now,
        || {
            reads.set(reads.get() + 1);
            Some(&before)
        },
        Part::Resource,
    );
    assert_eq!(reads.get(), 1);
    assert!(
        found.iter().any(|v| v.kind == ViolationKind::Rule),
        "{found:#?}"
    );
}
