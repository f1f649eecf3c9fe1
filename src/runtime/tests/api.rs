//! An in-memory Kubernetes API for the runtime's unit tests: objects in a map, served to a
//! real `kube::Client` through an axum router (a `tower::Service`, no socket), and every
//! request recorded so a test can assert what was written.
//!
//! It answers what the runtime sends and no more:
//! - discovery of one group/version (`/api/v1`, `/apis/<group>/<version>`), from the types
//!   a test serves;
//! - GET one, LIST (`labelSelector` of `key=value` and `key` terms only), WATCH from a
//!   resourceVersion (no bookmarks, no timeouts, no "too old");
//! - POST (with `generateName`), 409 when the name is taken;
//! - PATCH: server-side apply (fields a manager applied before and leaves out are removed;
//!   lists are replaced whole, not merged by key), JSON merge patch, JSON patch; a
//!   `metadata.resourceVersion` in a merge or apply patch is a precondition;
//! - DELETE with uid/resourceVersion preconditions; an object with finalizers only gets a
//!   `deletionTimestamp`, and goes once its last finalizer is removed;
//! - the `/status` subresource of types that have one (main writes keep the status, status
//!   writes keep the rest); resourceVersion bumps only on a real change, `generation` on a
//!   change outside metadata and status.
//!
//! Not done: garbage collection of owned objects, admission, defaulting, validation,
//! strategic merge patch, field ownership conflicts, PUT.

use crate::api::ResourceRef;
use crate::runtime::watch::cache::{CacheMetrics, Informers};
use crate::runtime::watch::discovery::{Discovery, ResolvedType};
use crate::runtime::watch::event::CacheEvent;
use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{Method, StatusCode};
use axum::response::Response;
use parking_lot::Mutex;
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use tokio::sync::watch;

/// A type the fake serves.
#[derive(Clone, Debug)]
pub(super) struct Served {
    pub api_version: &'static str,
    pub kind: &'static str,
    pub plural: &'static str,
    pub namespaced: bool,
    pub status: bool,
}

impl Served {
    pub(super) const fn namespaced(
        api_version: &'static str,
        kind: &'static str,
        plural: &'static str,
    ) -> Served {
        Served {
            api_version,
            kind,
            plural,
            namespaced: true,
            status: false,
        }
    }

    pub(super) const fn cluster(
        api_version: &'static str,
        kind: &'static str,
        plural: &'static str,
    ) -> Served {
        Served {
            namespaced: false,
            ..Served::namespaced(api_version, kind, plural)
        }
    }

    /// The type with a `/status` subresource.
    pub(super) const fn with_status(self) -> Served {
        Served {
            status: true,
            ..self
        }
    }
}

/// One request as the fake saw it.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Seen {
    pub method: Method,
    pub path: String,
    pub status: StatusCode,
}

impl std::fmt::Display for Seen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} -> {}",
            self.method,
            self.path,
            self.status.as_u16()
        )
    }
}

/// Where an object lives: apiVersion, plural, namespace ("" when cluster-scoped), name.
type Key = (String, String, String, String);

/// A change, as watches replay it.
struct Change {
    version: u64,
    api_version: String,
    plural: String,
    type_: &'static str,
    object: Value,
}

#[derive(Default)]
struct State {
    types: Vec<Served>,
    objects: BTreeMap<Key, Value>,
    /// What each field manager last applied to each object (server-side apply).
    applied: HashMap<(Key, String), Value>,
    changes: Vec<Change>,
    version: u64,
    requests: Vec<Seen>,
}

/// The fake API; clones share it.
#[derive(Clone)]
pub(super) struct FakeApi {
    state: Arc<Mutex<State>>,
    /// The newest resourceVersion, for open watches to wake on.
    changed: Arc<watch::Sender<u64>>,
}

/// The content type of a server-side apply.
const APPLY: &str = "application/apply-patch+yaml";

/// A refusal, answered as a `Status` object.
#[derive(Debug)]
struct Refused(StatusCode, &'static str, String);

type Answer = Result<(StatusCode, Value), Refused>;

impl FakeApi {
    pub(super) fn new(types: &[Served]) -> FakeApi {
        let state = State {
            types: types.to_vec(),
            ..State::default()
        };
        FakeApi {
            state: Arc::new(Mutex::new(state)),
            changed: Arc::new(watch::channel(0).0),
        }
    }

    /// A client whose every request this fake answers.
    pub(super) fn client(&self) -> kube::Client {
        let fake = self.clone();
        let router = axum::Router::new().fallback(move |request: Request| {
            let fake = fake.clone();
            async move { fake.answer(request).await }
        });
        kube::Client::new(router, "default")
    }

    /// Caches over this fake that report their changes to `events`, and the type `resource`
    /// of `v1` as discovery resolves it.
    pub(super) async fn informers(
        &self,
        resource: &str,
        events: tokio::sync::mpsc::UnboundedSender<CacheEvent>,
    ) -> (Arc<Informers>, ResolvedType) {
        let client = self.client();
        let informers = Informers::new(client.clone(), events, CacheMetrics::default());
        let resolved = Discovery::new(client)
            .resolve(&ResourceRef {
                api_version: "v1".into(),
                resource: resource.into(),
            })
            .await
            .expect("a served type");
        (informers, resolved)
    }

    /// Applies an object as a user would (server-side, as field manager `user`), outside the
    /// runtime (not recorded): what others set (finalizers, status) stays.
    pub(super) fn put(&self, object: Value) -> Value {
        let mut state = self.state.lock();
        let (key, served) = state.key_of(&object).expect("a served type");
        let answer = state.patch(&key, &served, false, APPLY, "user", object);
        drop(state);
        self.wake();
        answer.expect("an applied object").1
    }

    /// Deletes an object as a user would (finalizers hold it), outside the runtime.
    pub(super) fn remove(&self, api_version: &str, plural: &str, namespace: &str, name: &str) {
        let key = (
            api_version.into(),
            plural.into(),
            namespace.into(),
            name.into(),
        );
        let answer = self.state.lock().delete(&key, &Value::Null);
        assert!(
            answer.is_ok(),
            "{api_version} {plural} {namespace}/{name} exists"
        );
        self.wake();
    }

    pub(super) fn get(
        &self,
        api_version: &str,
        plural: &str,
        namespace: &str,
        name: &str,
    ) -> Option<Value> {
        let key = (
            api_version.into(),
            plural.into(),
            namespace.into(),
            name.into(),
        );
        self.state.lock().objects.get(&key).cloned()
    }

    /// The names of the objects of a type in a namespace.
    pub(super) fn names(&self, api_version: &str, plural: &str, namespace: &str) -> Vec<String> {
        let state = self.state.lock();
        state
            .objects
            .keys()
            .filter(|(a, p, n, _)| a == api_version && p == plural && n == namespace)
            .map(|(.., name)| name.clone())
            .collect()
    }

    /// The (namespace, name) of every object of a type.
    pub(super) fn all_names(&self, api_version: &str, plural: &str) -> Vec<(String, String)> {
        let state = self.state.lock();
        state
            .objects
            .keys()
            .filter(|(a, p, ..)| a == api_version && p == plural)
            .map(|(.., namespace, name)| (namespace.clone(), name.clone()))
            .collect()
    }

    /// The requests answered since the last call.
    pub(super) fn take_requests(&self) -> Vec<Seen> {
        std::mem::take(&mut self.state.lock().requests)
    }

    fn wake(&self) {
        let version = self.state.lock().version;
        self.changed.send_replace(version);
    }

    async fn answer(&self, request: Request) -> Response {
        let (parts, body) = request.into_parts();
        let body = axum::body::to_bytes(body, usize::MAX)
            .await
            .unwrap_or_default();
        let path = parts.uri.path().to_string();
        let query = query(parts.uri.query().unwrap_or_default());
        let content_type = parts
            .headers
            .get(axum::http::header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let watching = parts.method == Method::GET
            && query.get("watch").is_some_and(|w| w == "true" || w == "1");
        let route = Route::parse(&path);
        let answer = match (&route, watching) {
            (Some(route), true) => return self.watch(route, &query, &parts.method, &path),
            (Some(route), false) => {
                let mut state = self.state.lock();
                state.serve(&parts.method, route, &query, &content_type, &body)
            }
            (None, _) => Err(Refused(
                StatusCode::NOT_FOUND,
                "NotFound",
                format!("no route {path}"),
            )),
        };
        let (status, body) = match answer {
            Ok(answer) => answer,
            Err(Refused(code, reason, message)) => (
                code,
                json!({
                    "apiVersion": "v1", "kind": "Status", "metadata": {},
                    "status": "Failure", "message": message, "reason": reason,
                    "code": code.as_u16(),
                }),
            ),
        };
        self.state.lock().requests.push(Seen {
            method: parts.method.clone(),
            path,
            status,
        });
        if parts.method != Method::GET {
            self.wake();
        }
        Response::builder()
            .status(status)
            .header("content-type", "application/json")
            .body(Body::from(body.to_string()))
            .expect("a response")
    }

    /// A watch: every change after the given resourceVersion, as it happens, until the client
    /// drops it.
    fn watch(
        &self,
        route: &Route,
        query: &HashMap<String, String>,
        method: &Method,
        path: &str,
    ) -> Response {
        let from: u64 = query
            .get("resourceVersion")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let selector = query.get("labelSelector").cloned().unwrap_or_default();
        let (api_version, plural, namespace) = (
            route.api_version.clone(),
            route.plural.clone(),
            route.namespace.clone(),
        );
        self.state.lock().requests.push(Seen {
            method: method.clone(),
            path: format!("{path}?watch"),
            status: StatusCode::OK,
        });
        let (state, changed) = (self.state.clone(), self.changed.subscribe());
        let stream = futures::stream::unfold((from, changed), move |(mut cursor, mut changed)| {
            let state = state.clone();
            let (api_version, plural, namespace, selector) = (
                api_version.clone(),
                plural.clone(),
                namespace.clone(),
                selector.clone(),
            );
            async move {
                loop {
                    let lines = {
                        let state = state.lock();
                        let lines: String = state
                            .changes
                            .iter()
                            .filter(|change| change.version > cursor)
                            .filter(|change| {
                                change.api_version == api_version && change.plural == plural
                            })
                            .filter(|change| {
                                namespace
                                    .as_ref()
                                    .is_none_or(|ns| change.object["metadata"]["namespace"] == **ns)
                            })
                            .filter(|change| selects(&selector, &change.object))
                            .map(|change| {
                                format!(
                                    "{}\n",
                                    json!({"type": change.type_, "object": change.object})
                                )
                            })
                            .collect();
                        cursor = state.version;
                        lines
                    };
                    if !lines.is_empty() {
                        return Some((
                            Ok::<_, std::convert::Infallible>(Bytes::from(lines)),
                            (cursor, changed),
                        ));
                    }
                    changed.changed().await.ok()?;
                }
            }
        });
        Response::builder()
            .header("content-type", "application/json")
            .body(Body::from_stream(stream))
            .expect("a response")
    }
}

/// A request's path, read: which type, where, which object, which subresource.
struct Route {
    api_version: String,
    plural: String,
    namespace: Option<String>,
    name: Option<String>,
    subresource: Option<String>,
}

impl Route {
    /// `None` for paths that name no type; a route with an empty plural is a discovery request.
    fn parse(path: &str) -> Option<Route> {
        let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
        let (api_version, rest) = match segments.as_slice() {
            ["api", version, rest @ ..] => (version.to_string(), rest),
            ["apis", group, version, rest @ ..] => (format!("{group}/{version}"), rest),
            _ => return None,
        };
        let (namespace, rest) = match rest {
            ["namespaces", namespace, rest @ ..] if !rest.is_empty() => {
                (Some(namespace.to_string()), rest)
            }
            rest => (None, rest),
        };
        let at = |index: usize| rest.get(index).map(|segment| segment.to_string());
        Some(Route {
            api_version,
            plural: at(0).unwrap_or_default(),
            namespace,
            name: at(1),
            subresource: at(2),
        })
    }
}

impl State {
    fn served(&self, api_version: &str, plural: &str) -> Result<Served, Refused> {
        self.types
            .iter()
            .find(|t| t.api_version == api_version && t.plural == plural)
            .cloned()
            .ok_or_else(|| {
                Refused(
                    StatusCode::NOT_FOUND,
                    "NotFound",
                    format!("{plural}.{api_version} is not served"),
                )
            })
    }

    fn key_of(&self, object: &Value) -> Result<(Key, Served), Refused> {
        let api_version = object["apiVersion"].as_str().unwrap_or_default();
        let kind = object["kind"].as_str().unwrap_or_default();
        let served = self
            .types
            .iter()
            .find(|t| t.api_version == api_version && t.kind == kind)
            .cloned()
            .ok_or_else(|| {
                Refused(
                    StatusCode::NOT_FOUND,
                    "NotFound",
                    format!("{kind}.{api_version} is not served"),
                )
            })?;
        let namespace = match served.namespaced {
            true => object["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default"),
            false => "",
        };
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        let key = (
            api_version.into(),
            served.plural.into(),
            namespace.into(),
            name.into(),
        );
        Ok((key, served))
    }

    fn serve(
        &mut self,
        method: &Method,
        route: &Route,
        query: &HashMap<String, String>,
        content_type: &str,
        body: &[u8],
    ) -> Answer {
        if route.plural.is_empty() {
            return Ok((StatusCode::OK, self.discovery(&route.api_version)));
        }
        let served = self.served(&route.api_version, &route.plural)?;
        let namespace = match served.namespaced {
            true => route.namespace.clone().unwrap_or_default(),
            false => String::new(),
        };
        let key = |name: &str| -> Key {
            (
                route.api_version.clone(),
                route.plural.clone(),
                namespace.clone(),
                name.to_string(),
            )
        };
        let body: Value = match body {
            [] => Value::Null,
            body => serde_json::from_slice(body).map_err(|error| {
                Refused(StatusCode::BAD_REQUEST, "BadRequest", error.to_string())
            })?,
        };
        let status = route.subresource.as_deref() == Some("status");
        match (method, &route.name) {
            (&Method::GET, Some(name)) => {
                self.read(&key(name)).map(|object| (StatusCode::OK, object))
            }
            (&Method::GET, None) => Ok((StatusCode::OK, self.list(route, query))),
            (&Method::POST, None) => self.create(&served, &namespace, body),
            (&Method::PATCH, Some(name)) => {
                let manager = query.get("fieldManager").cloned().unwrap_or_default();
                self.patch(&key(name), &served, status, content_type, &manager, body)
            }
            (&Method::DELETE, Some(name)) => self.delete(&key(name), &body),
            _ => Err(Refused(
                StatusCode::METHOD_NOT_ALLOWED,
                "MethodNotAllowed",
                format!("{method} is not served"),
            )),
        }
    }

    fn discovery(&self, api_version: &str) -> Value {
        let mut resources = Vec::new();
        for served in self.types.iter().filter(|t| t.api_version == api_version) {
            let verbs = ["get", "list", "watch", "create", "patch", "delete"];
            resources.push(json!({
                "name": served.plural, "singularName": served.kind.to_lowercase(),
                "namespaced": served.namespaced, "kind": served.kind, "verbs": verbs,
            }));
            if served.status {
                resources.push(json!({
                    "name": format!("{}/status", served.plural), "singularName": "",
                    "namespaced": served.namespaced, "kind": served.kind, "verbs": ["get", "patch"],
                }));
            }
        }
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": api_version, "resources": resources})
    }

    fn read(&self, key: &Key) -> Result<Value, Refused> {
        self.objects.get(key).cloned().ok_or_else(|| not_found(key))
    }

    fn list(&self, route: &Route, query: &HashMap<String, String>) -> Value {
        let selector = query
            .get("labelSelector")
            .map(String::as_str)
            .unwrap_or_default();
        let items: Vec<&Value> = self
            .objects
            .iter()
            .filter(|((a, p, n, _), _)| {
                *a == route.api_version
                    && *p == route.plural
                    && route.namespace.as_ref().is_none_or(|ns| ns == n)
            })
            .map(|(_, object)| object)
            .filter(|object| selects(selector, object))
            .collect();
        json!({
            "apiVersion": route.api_version, "kind": "List",
            "metadata": {"resourceVersion": self.version.to_string()},
            "items": items,
        })
    }

    fn create(&mut self, served: &Served, namespace: &str, mut object: Value) -> Answer {
        if served.namespaced {
            object["metadata"]["namespace"] = json!(namespace);
        }
        if object["metadata"]["name"]
            .as_str()
            .is_none_or(str::is_empty)
        {
            let prefix = object["metadata"]["generateName"]
                .as_str()
                .unwrap_or_default();
            object["metadata"]["name"] = json!(format!("{prefix}{}", self.version + 1));
        }
        let (key, _) = self.key_of(&object)?;
        if self.objects.contains_key(&key) {
            return Err(Refused(
                StatusCode::CONFLICT,
                "AlreadyExists",
                format!("{} already exists", key.3),
            ));
        }
        if served.status {
            object.as_object_mut().map(|o| o.remove("status"));
        }
        Ok((StatusCode::CREATED, self.store(&key, None, object)))
    }

    fn patch(
        &mut self,
        key: &Key,
        served: &Served,
        status: bool,
        content_type: &str,
        manager: &str,
        patch: Value,
    ) -> Answer {
        let previous = self.objects.get(key).cloned();
        let applying = content_type.starts_with("application/apply-patch");
        let mut object = match (&previous, applying) {
            (Some(previous), _) => previous.clone(),
            (None, true) => json!({"metadata": {}}),
            (None, false) => return Err(not_found(key)),
        };
        let mut patch = patch;
        // A resourceVersion in the patch is a precondition, not a field to write.
        if (applying || content_type.starts_with("application/merge-patch"))
            && let Some(expected) = patch["metadata"]
                .as_object_mut()
                .and_then(|m| m.remove("resourceVersion"))
        {
            precondition(previous.as_ref(), "resourceVersion", &expected)?;
        }
        match content_type.split(';').next().unwrap_or_default() {
            APPLY => {
                let slot = (key.clone(), manager.to_string());
                if let Some(before) = self.applied.get(&slot) {
                    prune(&mut object, before, &patch);
                }
                merge(&mut object, &patch, false);
                self.applied.insert(slot, patch);
            }
            "application/merge-patch+json" => merge(&mut object, &patch, true),
            "application/json-patch+json" => {
                let operations: json_patch::Patch =
                    serde_json::from_value(patch).map_err(|error| {
                        Refused(StatusCode::BAD_REQUEST, "BadRequest", error.to_string())
                    })?;
                json_patch::patch(&mut object, &operations).map_err(|error| {
                    Refused(
                        StatusCode::UNPROCESSABLE_ENTITY,
                        "Invalid",
                        error.to_string(),
                    )
                })?;
            }
            other => {
                return Err(Refused(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    "UnsupportedMediaType",
                    format!("{other} is not served"),
                ));
            }
        }
        // Only the subresource written changes.
        if let (true, Some(previous)) = (served.status, &previous) {
            let kept = match status {
                true => previous.clone(),
                false => object.clone(),
            };
            let status = match status {
                true => object.get("status").cloned(),
                false => previous.get("status").cloned(),
            };
            object = kept;
            match status {
                Some(value) => object["status"] = value,
                None => {
                    object.as_object_mut().map(|o| o.remove("status"));
                }
            }
        }
        let code = if previous.is_some() {
            StatusCode::OK
        } else {
            StatusCode::CREATED
        };
        Ok((code, self.store(key, previous.as_ref(), object)))
    }

    fn delete(&mut self, key: &Key, options: &Value) -> Answer {
        let object = self.read(key)?;
        for field in ["uid", "resourceVersion"] {
            if let Some(expected) = options["preconditions"].get(field).filter(|v| !v.is_null()) {
                precondition(Some(&object), field, expected)?;
            }
        }
        if object["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| !f.is_empty())
        {
            let mut deleting = object.clone();
            if deleting["metadata"]["deletionTimestamp"].is_null() {
                deleting["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
            }
            return Ok((StatusCode::OK, self.store(key, Some(&object), deleting)));
        }
        Ok((StatusCode::OK, self.forget(key)))
    }

    /// Stores a written object: its server-set fields, a new resourceVersion and a watch event
    /// when it changed; removed when it is deleting and no finalizer holds it any more.
    fn store(&mut self, key: &Key, previous: Option<&Value>, mut object: Value) -> Value {
        let served = self.served(&key.0, &key.1).expect("a served type");
        object["apiVersion"] = json!(key.0);
        object["kind"] = json!(served.kind);
        object["metadata"]["name"] = json!(key.3);
        if served.namespaced {
            object["metadata"]["namespace"] = json!(key.2);
        }
        let generation = match previous {
            None => 1,
            Some(previous) => {
                let before = previous["metadata"]["generation"].as_i64().unwrap_or(1);
                before + i64::from(spec_of(previous) != spec_of(&object))
            }
        };
        object["metadata"]["generation"] = json!(generation);
        match previous {
            Some(previous) => {
                object["metadata"]["uid"] = previous["metadata"]["uid"].clone();
                object["metadata"]["creationTimestamp"] =
                    previous["metadata"]["creationTimestamp"].clone();
                object["metadata"]["resourceVersion"] =
                    previous["metadata"]["resourceVersion"].clone();
                if *previous == object {
                    return object;
                }
            }
            None => {
                object["metadata"]["uid"] = json!(format!("uid-{}-{}", key.3, self.version + 1));
                object["metadata"]["creationTimestamp"] = json!("2026-01-01T00:00:00Z");
            }
        }
        let deleting = !object["metadata"]["deletionTimestamp"].is_null();
        if deleting
            && object["metadata"]["finalizers"]
                .as_array()
                .is_none_or(Vec::is_empty)
        {
            self.objects.insert(key.clone(), object);
            return self.forget(key);
        }
        self.version += 1;
        object["metadata"]["resourceVersion"] = json!(self.version.to_string());
        let type_ = if previous.is_some() {
            "MODIFIED"
        } else {
            "ADDED"
        };
        self.record(key, type_, &object);
        self.objects.insert(key.clone(), object.clone());
        object
    }

    fn forget(&mut self, key: &Key) -> Value {
        let mut object = self.objects.remove(key).expect("the object exists");
        self.applied.retain(|(applied, _), _| applied != key);
        self.version += 1;
        object["metadata"]["resourceVersion"] = json!(self.version.to_string());
        self.record(key, "DELETED", &object);
        object
    }

    fn record(&mut self, key: &Key, type_: &'static str, object: &Value) {
        self.changes.push(Change {
            version: self.version,
            api_version: key.0.clone(),
            plural: key.1.clone(),
            type_,
            object: object.clone(),
        });
    }
}

fn not_found(key: &Key) -> Refused {
    Refused(
        StatusCode::NOT_FOUND,
        "NotFound",
        format!("{} {} \"{}\" not found", key.0, key.1, key.3),
    )
}

/// A precondition on a metadata field: 409 when the object's differs.
fn precondition(object: Option<&Value>, field: &str, expected: &Value) -> Result<(), Refused> {
    let found = object.map(|o| &o["metadata"][field]);
    if found == Some(expected) {
        return Ok(());
    }
    Err(Refused(
        StatusCode::CONFLICT,
        "Conflict",
        format!("precondition failed: {field} is {found:?}, not {expected}"),
    ))
}

/// What a change of bumps `generation`: everything but metadata and status.
fn spec_of(object: &Value) -> Map<String, Value> {
    let mut rest = object.as_object().cloned().unwrap_or_default();
    rest.remove("metadata");
    rest.remove("status");
    rest
}

/// Merges `patch` into `target`: maps recursively, anything else replaced. With `nulls_remove`
/// (a JSON merge patch), a null removes the field.
fn merge(target: &mut Value, patch: &Value, nulls_remove: bool) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    let target = target.as_object_mut().expect("an object");
    for (field, value) in patch {
        if nulls_remove && value.is_null() {
            target.remove(field);
        } else {
            merge(
                target.entry(field.clone()).or_insert(Value::Null),
                value,
                nulls_remove,
            );
        }
    }
}

/// Removes from `target` the fields a manager applied `before` and no longer applies.
fn prune(target: &mut Value, before: &Value, now: &Value) {
    let (Value::Object(target), Value::Object(before)) = (target, before) else {
        return;
    };
    for (field, was) in before {
        match (now.get(field), target.get_mut(field)) {
            (None, _) => {
                target.remove(field);
            }
            (Some(now), Some(value)) if was.is_object() && now.is_object() => {
                prune(value, was, now)
            }
            _ => {}
        }
    }
}

/// Whether an object's labels match a selector of `key=value` and `key` terms.
fn selects(selector: &str, object: &Value) -> bool {
    let labels = &object["metadata"]["labels"];
    selector
        .split(',')
        .filter(|term| !term.is_empty())
        .all(|term| match term.split_once('=') {
            Some((key, value)) => labels[key.trim_end_matches('=')] == *value,
            None => !labels[term].is_null(),
        })
}

/// A query string's parameters, percent-decoded.
fn query(query: &str) -> HashMap<String, String> {
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(key, value)| (decode(key), decode(value)))
        .collect()
}

fn decode(text: &str) -> String {
    let mut bytes = Vec::with_capacity(text.len());
    let mut input = text.bytes();
    while let Some(byte) = input.next() {
        match byte {
            b'+' => bytes.push(b' '),
            b'%' => {
                let hex: Vec<u8> = input.by_ref().take(2).collect();
                let value = std::str::from_utf8(&hex)
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                bytes.push(value.unwrap_or(b'?'));
            }
            byte => bytes.push(byte),
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}
