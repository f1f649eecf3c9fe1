//! Tests' view of the cluster: the types they use (built-ins plus the CRDs they install) and
//! helpers to apply, read, list and wait for objects of any of them.

use super::{client, eventually};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use metascript::object;
use metascript::resources::StaticResolver;
use serde_json::{Value, json};

/// The cluster as the tests see it: the types they use, and helpers to apply and read objects.
pub struct Cluster {
    pub client: kube::Client,
    types: StaticResolver,
}

impl Cluster {
    pub async fn new() -> Cluster {
        super::operator::operator().await;
        Cluster {
            client: client().await,
            types: StaticResolver::with_builtins(),
        }
    }

    /// The same view of another plane (the cluster plane of the workload tests), whose operator
    /// the caller starts.
    pub fn of(client: kube::Client) -> Cluster {
        Cluster {
            client,
            types: StaticResolver::with_builtins(),
        }
    }

    /// Installs the CRDs of an example file, giving the parent kind its own group.
    pub async fn install(&mut self, crds_yaml: &str, parent_kind: &str, group: &str) {
        let crds: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        let documents: Vec<Value> =
            serde_saphyr::from_multiple(crds_yaml).expect("example CRDs parse");
        for mut crd in documents.into_iter().filter(|d| !d.is_null()) {
            if crd["spec"]["names"]["kind"] == parent_kind {
                crd["spec"]["group"] = json!(group);
                let plural = crd["spec"]["names"]["plural"].as_str().unwrap().to_string();
                crd["metadata"]["name"] = json!(format!("{plural}.{group}"));
            }
            self.types.add_crd(&crd);
            let name = object::name(&crd).to_string();
            let typed: CustomResourceDefinition = serde_json::from_value(crd).unwrap();
            crds.patch(
                &name,
                &PatchParams::apply("metascript-tests").force(),
                &Patch::Apply(&typed),
            )
            .await
            .unwrap_or_else(|e| panic!("installing CRD {name}: {e}"));
            eventually(&format!("CRD {name} established"), || async {
                let status = crds.get(&name).await.ok()?.status?;
                status
                    .conditions?
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
                    .then_some(())
            })
            .await;
        }
    }

    pub fn api(&self, like: &Value) -> Api<DynamicObject> {
        let resource = match (object::api_version(like), object::kind(like)) {
            ("metascript.dev/v1alpha1", _) => {
                return super::operator::api_for(&self.client, like);
            }
            (api_version, kind) => self
                .types
                .find_kind(api_version, kind)
                .unwrap_or_else(|| panic!("unknown type {kind}.{api_version}")),
        };
        match object::namespace(like) {
            Some(ns) if resource.namespaced => {
                Api::namespaced_with(self.client.clone(), ns, &resource.api_resource())
            }
            _ => Api::all_with(self.client.clone(), &resource.api_resource()),
        }
    }

    pub async fn apply(&self, object: &Value) {
        self.api(object)
            .patch(
                object::name(object),
                &PatchParams::apply("test-user").force(),
                &Patch::Apply(object),
            )
            .await
            .unwrap_or_else(|e| panic!("applying {}: {e}", object::ObjectKey::of(object)));
    }

    pub async fn patch_status(&self, object: &Value, status: Value) {
        self.api(object)
            .patch_status(
                object::name(object),
                &PatchParams::default(),
                &Patch::Merge(json!({"status": status})),
            )
            .await
            .unwrap_or_else(|e| {
                panic!("patching status of {}: {e}", object::ObjectKey::of(object))
            });
    }

    pub async fn delete(&self, object: &Value) {
        self.api(object)
            .delete(object::name(object), &Default::default())
            .await
            .unwrap_or_else(|e| panic!("deleting {}: {e}", object::ObjectKey::of(object)));
    }

    pub async fn get(&self, like: &Value) -> Option<Value> {
        self.api(like)
            .get_opt(object::name(like))
            .await
            .unwrap_or_else(|e| panic!("reading {}: {e}", object::ObjectKey::of(like)))
            .map(|o| serde_json::to_value(o).unwrap())
    }

    /// Objects of `like`'s type in its namespace.
    pub async fn list(&self, like: &Value) -> Vec<Value> {
        self.api(like)
            .list(&Default::default())
            .await
            .unwrap_or_else(|e| panic!("listing: {e}"))
            .items
            .into_iter()
            .map(|o| serde_json::to_value(o).unwrap())
            .collect()
    }

    pub async fn wait_for(
        &self,
        like: &Value,
        what: &str,
        check: impl Fn(&Value) -> bool,
    ) -> Value {
        eventually(what, || async { self.get(like).await.filter(|o| check(o)) }).await
    }

    pub async fn wait_gone(&self, like: &Value, what: &str) {
        eventually(what, || async {
            self.get(like).await.is_none().then_some(())
        })
        .await;
    }
}
