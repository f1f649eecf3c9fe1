//! The shared plane's audit log of ConfigMap writes (see `ControlPlane::audit_log`): who wrote
//! which ConfigMap when, as the API server recorded it. `metascript run` names its process in
//! its User-Agent (`metascript/<version> (<host>_<pid>)`), so a test tells replicas apart.

use super::plane;
use serde_json::Value;

/// One write of a ConfigMap, as audited.
#[derive(Clone, Debug)]
pub struct AuditedWrite {
    /// The operator process that sent it (from its User-Agent).
    pub pid: i32,
    /// The field manager it named (a controller's, `metascript.dev/<kind>-<name>`).
    pub field_manager: String,
    pub name: String,
    /// When the API server received it.
    pub received: jiff::Timestamp,
}

/// Every successful write an operator process made to a ConfigMap in `namespace`, in the
/// order the API server received them.
pub async fn operator_writes(namespace: &str) -> Vec<AuditedWrite> {
    let log = std::fs::read_to_string(plane().await.audit_log()).expect("reading the audit log");
    let mut writes: Vec<AuditedWrite> = log
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|event| event["objectRef"]["namespace"] == namespace)
        .filter(|event| {
            event["responseStatus"]["code"]
                .as_u64()
                .is_some_and(|c| c < 300)
        })
        .filter_map(|event| {
            let agent = event["userAgent"].as_str()?;
            let pid = agent
                .strip_prefix("metascript/")?
                .rsplit_once('_')?
                .1
                .strip_suffix(')')?
                .parse()
                .ok()?;
            Some(AuditedWrite {
                pid,
                field_manager: field_manager(event["requestURI"].as_str()?)?,
                name: event["objectRef"]["name"].as_str()?.to_string(),
                received: event["requestReceivedTimestamp"].as_str()?.parse().ok()?,
            })
        })
        .collect();
    writes.sort_by_key(|write| write.received);
    writes
}

/// [`operator_writes`] once `done` says they hold what the test waits for: the API server
/// writes an audit event when a write's response is complete, which can be after a client has
/// seen the change.
pub async fn operator_writes_once(
    namespace: &str,
    what: &str,
    done: impl Fn(&[AuditedWrite]) -> bool,
) -> Vec<AuditedWrite> {
    super::eventually(what, || async {
        let writes = operator_writes(namespace).await;
        done(&writes).then_some(writes)
    })
    .await
}

/// The `fieldManager` query parameter of a request URI, decoded.
fn field_manager(uri: &str) -> Option<String> {
    let query = uri.split_once('?')?.1;
    let value = query
        .split('&')
        .find_map(|pair| pair.strip_prefix("fieldManager="))?;
    Some(value.replace("%2F", "/").replace("%2f", "/"))
}
