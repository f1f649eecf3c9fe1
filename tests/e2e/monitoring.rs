//! What ships for monitoring (`deploy/components/monitoring`, and the chart's `metrics.*`
//! values): the Grafana dashboard's queries and the alert rules parse as PromQL (with the
//! `promql-parser` crate, whose grammar is Prometheus' own yacc grammar; building `promtool`
//! from the module proxy would pull Prometheus' whole service-discovery tree into CI), every
//! metric they name is one the operator exports, and each alert says what and how bad.

use crate::install::{find, name, render_dir};
use metascript::api::ServiceAccountRef;
use metascript::runtime::ControllerId;
use metascript::runtime::report::metrics::{
    ControllerLabels, HookLabels, Metrics, ResourceLabels, WatchLabels,
};
use promql_parser::parser::{self, Expr};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

fn monitoring() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/components/monitoring")
}

fn dashboard() -> Value {
    let text = std::fs::read_to_string(monitoring().join("metascript-dashboard.json"))
        .expect("the dashboard is in deploy/components/monitoring");
    serde_json::from_str(&text).expect("the dashboard is JSON")
}

pub(crate) fn rule_groups() -> Value {
    let text = std::fs::read_to_string(monitoring().join("prometheusrule.yaml"))
        .expect("the PrometheusRule is in deploy/components/monitoring");
    let rule: Value = serde_saphyr::from_str(&text).expect("the PrometheusRule is YAML");
    rule["spec"].clone()
}

/// Metrics with a series in every family: a family without one is not in the text at all.
fn with_every_series() -> Metrics {
    let metrics = Metrics::default();
    let id = ControllerId::new(metascript::kinds::decorator::KIND, "c");
    let labels = ControllerLabels::of(&id);
    metrics.count_write(&id);
    metrics.count_sync(&id, 0.1);
    let hook = HookLabels {
        kind: "decorator",
        controller: "c".into(),
        hook: "sync",
    };
    metrics.hook_seconds.get_or_create(&hook).observe(0.001);
    metrics.hook_failures.get_or_create(&hook).inc();
    metrics.count_failure(&id, "HookFailed");
    metrics.count_output_check(&id, Duration::from_millis(1));
    metrics
        .hook_cpu_seconds
        .get_or_create(&labels)
        .inc_by(0.001);
    metrics.count_usage_write(&id);
    metrics.count_resync_skipped(&id, 1);
    metrics.count_access_review(&ServiceAccountRef {
        namespace: "n".into(),
        name: "a".into(),
    });
    metrics.count_dropped_event("decorator", "c", "operator");
    for family in [
        &metrics.controller_queued,
        &metrics.controller_running,
        &metrics.controller_ready,
        &metrics.controller_throttled,
        &metrics.dependencies,
        &metrics.owned_items,
    ] {
        family.get_or_create(&labels).set(1);
    }
    let resource = ResourceLabels {
        resource: "ConfigMap.v1".into(),
    };
    metrics.undecodable_objects.get_or_create(&resource).inc();
    metrics.cached_objects.get_or_create(&resource).set(1);
    metrics
        .watches
        .get_or_create(&WatchLabels {
            resource: "ConfigMap.v1".into(),
            selection: "all",
        })
        .set(1);
    metrics
}

/// Every metric name the operator's `/metrics` can carry, as Prometheus stores them: a counter
/// `x` as `x_total`, a histogram as `x_bucket`, `x_sum` and `x_count`.
fn exported() -> BTreeSet<String> {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &with_every_series().registry())
        .expect("the registry encodes");
    let mut names = BTreeSet::new();
    for line in text.lines() {
        let Some(declared) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let (name, kind) = declared.split_once(' ').expect("# TYPE name kind");
        match kind {
            "counter" => {
                names.insert(format!("{name}_total"));
            }
            "histogram" => names.extend(["bucket", "sum", "count"].map(|s| format!("{name}_{s}"))),
            _ => {
                names.insert(name.to_string());
            }
        }
    }
    assert!(
        names.len() > 20,
        "the registry declares its metrics: {names:?}"
    );
    names
}

/// The metric names an expression selects.
fn selected(expr: &Expr, into: &mut BTreeSet<String>) {
    match expr {
        Expr::Aggregate(aggregate) => {
            selected(&aggregate.expr, into);
            if let Some(param) = &aggregate.param {
                selected(param, into);
            }
        }
        Expr::Unary(unary) => selected(&unary.expr, into),
        Expr::Binary(binary) => {
            selected(&binary.lhs, into);
            selected(&binary.rhs, into);
        }
        Expr::Paren(paren) => selected(&paren.expr, into),
        Expr::Subquery(subquery) => selected(&subquery.expr, into),
        Expr::VectorSelector(vector) => into.extend(vector.name.clone()),
        Expr::MatrixSelector(matrix) => into.extend(matrix.vs.name.clone()),
        Expr::Call(call) => {
            for argument in &call.args.args {
                selected(argument, into);
            }
        }
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) | Expr::Extension(_) => {}
    }
}

/// Parses a query as Prometheus would once Grafana has put in its variables, and names what it
/// selects; `Err` says why it does not parse.
fn metrics_of(query: &str) -> Result<BTreeSet<String>, String> {
    let query = query
        .replace("$__rate_interval", "5m")
        .replace("$controller", ".*")
        .replace("$job", ".*");
    let expr = parser::parse(&query)?;
    let mut names = BTreeSet::new();
    selected(&expr, &mut names);
    Ok(names)
}

#[test]
fn the_queries_parse_and_name_only_metrics_the_operator_exports() {
    let exported = exported();
    let dashboard = dashboard();
    let mut queries: Vec<(String, String)> = Vec::new();
    // A collapsed row keeps its panels inside it: they are checked too.
    let top = dashboard["panels"].as_array().expect("panels");
    let nested = top
        .iter()
        .flat_map(|row| row["panels"].as_array().into_iter().flatten());
    for panel in top.iter().chain(nested) {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let title = panel["title"].as_str().unwrap_or_default();
            queries.push((
                format!("panel {title:?}"),
                target["expr"].as_str().unwrap_or_default().to_string(),
            ));
        }
    }
    let groups = rule_groups();
    for group in groups["groups"].as_array().expect("groups") {
        for rule in group["rules"].as_array().expect("rules") {
            let alert = rule["alert"].as_str().unwrap_or_default();
            queries.push((
                format!("alert {alert}"),
                rule["expr"].as_str().unwrap_or_default().to_string(),
            ));
        }
    }
    assert!(
        queries.len() >= 25,
        "the dashboard and the alerts have queries: {queries:?}"
    );
    let mut used = BTreeSet::new();
    for (place, query) in &queries {
        let names = metrics_of(query).unwrap_or_else(|error| panic!("{place}: {query}: {error}"));
        assert!(!names.is_empty(), "{place}: {query} selects no metric");
        // `up` is Prometheus' own, one per scraped target.
        for metric in names.into_iter().filter(|name| name != "up") {
            assert!(
                exported.contains(&metric),
                "{place} queries {metric}, which the operator does not export"
            );
            used.insert(metric);
        }
    }
    // The cost, failure, queue and shard figures of docs/operations.md are all on the board.
    for metric in [
        "metascript_hook_duration_seconds_sum",
        "metascript_hook_cpu_seconds_total",
        "metascript_api_writes_total",
        "metascript_sync_failures_total",
        "metascript_queue_ready",
        "metascript_owned_items",
        "metascript_output_check_seconds_total",
    ] {
        assert!(used.contains(metric), "{metric} is on the dashboard");
    }
    // The check itself catches what it should: a misspelled metric, and a query that does not
    // parse.
    let misspelled = metrics_of("sum(rate(metascript_api_write_total[5m]))").expect("parses");
    assert!(
        misspelled.iter().any(|metric| !exported.contains(metric)),
        "{misspelled:?}: a misspelled metric is caught"
    );
    assert!(metrics_of("sum(rate(metascript_api_writes_total[5m])").is_err());

    // The variables are filled from metrics that exist too.
    for variable in dashboard["templating"]["list"]
        .as_array()
        .expect("variables")
    {
        let Some(definition) = variable["definition"].as_str() else {
            continue;
        };
        let selector = definition
            .strip_prefix("label_values(")
            .and_then(|rest| rest.rsplit_once(','))
            .map(|(selector, _)| selector)
            .unwrap_or_else(|| panic!("{definition}: label_values(selector, label)"));
        for metric in metrics_of(selector).unwrap_or_else(|e| panic!("{definition}: {e}")) {
            assert!(exported.contains(&metric), "{definition}: {metric}");
        }
    }
}

#[test]
fn every_alert_says_what_how_bad_and_for_how_long() {
    let groups = rule_groups();
    let mut seen = BTreeSet::new();
    for group in groups["groups"].as_array().expect("groups") {
        for rule in group["rules"].as_array().expect("rules") {
            let alert = rule["alert"].as_str().expect("every rule is an alert");
            assert!(seen.insert(alert.to_string()), "{alert} is defined twice");
            assert!(
                alert.starts_with("Metascript") && alert.chars().all(char::is_alphanumeric),
                "{alert}: alert names are CamelCase and start with Metascript"
            );
            let duration = rule["for"].as_str().unwrap_or_default();
            assert!(
                metrics_of(&format!("rate(metascript_syncs_total[{duration}])")).is_ok(),
                "{alert}: for {duration:?} is a Prometheus duration"
            );
            let severity = rule["labels"]["severity"].as_str().unwrap_or_default();
            assert!(
                matches!(severity, "critical" | "warning"),
                "{alert}: severity {severity:?}"
            );
            for field in ["summary", "description"] {
                assert!(
                    rule["annotations"][field]
                        .as_str()
                        .is_some_and(|s| !s.is_empty()),
                    "{alert}: annotations.{field}"
                );
            }
        }
    }
    assert!(seen.len() >= 10, "{seen:?}");
}

/// docs/operations.md's alert table gives each shipped alert by name with its expression as it
/// ships, so the page and the rules cannot drift.
#[test]
fn the_alert_table_shows_the_shipped_expressions() {
    let docs =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/operations.md"))
            .expect("docs/operations.md");
    let table = &docs[docs.find("## Alerts worth setting").expect("the section")..];
    for group in rule_groups()["groups"].as_array().expect("groups") {
        for rule in group["rules"].as_array().expect("rules") {
            let alert = rule["alert"].as_str().unwrap_or_default();
            let expr = rule["expr"].as_str().unwrap_or_default();
            assert!(
                table.contains(&format!("`{alert}`")),
                "{alert} is in the table"
            );
            assert!(
                table.contains(&format!("`{expr}`")),
                "{alert}: `{expr}` is in the table"
            );
        }
    }
}

/// The component as a user's overlay uses it: the ServiceMonitor selects the metrics Service,
/// and the dashboard ConfigMap carries the file and the label Grafana's sidecar loads it by.
#[test]
fn the_monitoring_component_adds_a_service_monitor_the_rules_and_the_dashboard() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir_in(root.join("target")).expect("a temp dir under target/");
    std::fs::write(
        dir.path().join("kustomization.yaml"),
        "resources: [../../deploy]\ncomponents: [../../deploy/components/monitoring]\n",
    )
    .unwrap();
    let (_, objects) = render_dir(dir.path());
    let service = find(&objects, "Service")
        .into_iter()
        .find(|s| name(s) == "metascript-metrics")
        .expect("deploy's metrics Service");
    let monitor = find(&objects, "ServiceMonitor");
    assert_eq!(monitor.len(), 1);
    let selector = monitor[0]["spec"]["selector"]["matchLabels"]
        .as_object()
        .expect("a label selector");
    for (label, value) in selector {
        assert_eq!(&service["metadata"]["labels"][label], value, "{label}");
    }
    assert_eq!(monitor[0]["spec"]["endpoints"][0]["port"], "metrics");
    assert_eq!(service["spec"]["ports"][0]["name"], "metrics");

    let rules = find(&objects, "PrometheusRule");
    assert_eq!(rules.len(), 1);
    assert_eq!(rules[0]["spec"], rule_groups());

    let dashboards: Vec<&Value> = find(&objects, "ConfigMap")
        .into_iter()
        .filter(|c| name(c) == "metascript-dashboard")
        .collect();
    assert_eq!(
        dashboards.len(),
        1,
        "one dashboard, its name without a hash"
    );
    assert_eq!(
        dashboards[0]["metadata"]["labels"]["grafana_dashboard"],
        "1"
    );
    let shipped: Value = serde_json::from_str(
        dashboards[0]["data"]["metascript-dashboard.json"]
            .as_str()
            .expect("the dashboard file"),
    )
    .unwrap();
    assert_eq!(shipped, dashboard());
}
