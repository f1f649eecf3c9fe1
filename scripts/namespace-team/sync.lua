-- namespace-team: DecoratorController sync hook.
--
-- Labels every Deployment with the `team` label of its Namespace, read with `get` from the
-- operator's cache (the controller declares Namespaces in spec.reads). The read is tracked: when
-- the Namespace's labels change, exactly its Deployments are synced again. A Namespace without
-- the label (or not found) removes the Deployment's label (a null value removes a key).
-- The Rhai twin (sync.rhai) returns the same JSON for every request.

local deployment = request.object
local ns = get("v1", "Namespace", nil, namespace(deployment))
return { labels = { ["example.com/team"] = label(ns, "team") or null } }
