-- namespace-team: DecoratorController sync hook.
--
-- Labels every Deployment with the `team` label of its Namespace, read with `get` from the
-- operator's cache (the controller declares Namespaces in spec.reads). The read is tracked: when
-- the Namespace's labels change, exactly its Deployments are synced again. A Namespace without
-- the label (or not found) removes the Deployment's label (a null value removes a key), and
-- says so in a Warning Event on the Deployment (`kubectl describe deployment` shows it).
-- The Rhai twin (sync.rhai) returns the same JSON for every request.

local deployment = request.object
local ns = get("v1", "Namespace", nil, namespace(deployment))
local team = label(ns, "team")
if team == nil then
    event("Warning", "NoTeam", "Namespace " .. namespace(deployment) .. " has no team label")
end
return { labels = { ["example.com/team"] = team or null } }
