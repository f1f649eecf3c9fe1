//! The OpenAPI v3 schemas of Kubernetes' built-in types, bundled for the Kubernetes version the
//! project targets (the one `k8s-openapi`'s feature and the test plane name), so outputs of
//! built-in types are checked offline as well as live. `hack/builtin-schemas` writes the file
//! from the `k8s.io/kubernetes` module's `api/openapi-spec/v3`.

use serde_json::{Map, Value};
use std::collections::HashMap;
use std::sync::LazyLock;

/// The Kubernetes release the bundled schemas are of.
pub(crate) const KUBERNETES_VERSION: &str = "v1.36.3";

const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";

static DEFINITIONS: LazyLock<Map<String, Value>> = LazyLock::new(|| {
    serde_json::from_str(include_str!("builtin/kubernetes.json"))
        .expect("the bundled schemas are JSON (hack/builtin-schemas wrote them)")
});

/// apiVersion → kind → the name of its schema among the definitions (nested, so a lookup by
/// `&str` allocates nothing).
static BY_TYPE: LazyLock<HashMap<String, HashMap<String, String>>> = LazyLock::new(|| {
    let mut types: HashMap<String, HashMap<String, String>> = HashMap::new();
    for (name, schema) in DEFINITIONS.iter() {
        let kinds = schema
            .get("x-kubernetes-group-version-kind")
            .and_then(Value::as_array);
        for gvk in kinds.into_iter().flatten() {
            let field = |key: &str| gvk.get(key).and_then(Value::as_str).unwrap_or_default();
            let api_version = match field("group") {
                "" => field("version").to_string(),
                group => format!("{group}/{}", field("version")),
            };
            // A type listed under several names (a list kind, a shared options type) keeps
            // the schema that names only it.
            types
                .entry(api_version)
                .or_default()
                .entry(field("kind").to_string())
                .and_modify(|kept: &mut String| {
                    if kinds.is_some_and(|k| k.len() == 1) {
                        *kept = name.clone();
                    }
                })
                .or_insert_with(|| name.clone());
        }
    }
    types
});

/// Whether a Kubernetes `git_version` (`v1.36.3`, `v1.36.0-gke.1`) is of the bundle's minor
/// version.
pub(crate) fn same_minor(git_version: &str) -> bool {
    let minor = |version: &str| {
        let mut parts = version.trim_start_matches('v').split('.');
        let major = parts.next()?.parse::<u32>().ok()?;
        let minor: String = parts
            .next()?
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        Some((major, minor.parse::<u32>().ok()?))
    };
    minor(git_version).is_some_and(|found| minor(KUBERNETES_VERSION) == Some(found))
}

/// Parses the bundle and indexes its types now.
pub(crate) fn load() {
    LazyLock::force(&BY_TYPE);
}

/// Every bundled schema by name, what a `$ref` points into.
pub(crate) fn definitions() -> &'static Map<String, Value> {
    &DEFINITIONS
}

/// The schema of a built-in type, if it is one.
pub(crate) fn schema(api_version: &str, kind: &str) -> Option<&'static Value> {
    let name = BY_TYPE.get(api_version)?.get(kind)?;
    DEFINITIONS.get(name)
}

/// ObjectMeta's schema: every resource's `metadata`, built-in or custom.
pub(crate) fn object_meta() -> &'static Value {
    &DEFINITIONS[OBJECT_META]
}
