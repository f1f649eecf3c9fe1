-- namespace-as-a-service: CompositeController sync hook.
--
-- A Team (cluster-scoped) gets a Namespace of its name, and in it a ResourceQuota, a
-- RoleBinding of the team's group to the `edit` ClusterRole and a NetworkPolicy that denies all
-- ingress (`podSelector: {}` selects every pod of the Namespace). The status says which
-- Namespace and its phase, read from the observed child.
-- The Rhai twin (sync.rhai) returns the same JSON for every request.

local team = request.parent
local ns = name(team)
local labels = { ["platform.example.com/team"] = ns }

local namespace = {
  apiVersion = "v1",
  kind = "Namespace",
  metadata = {
    name = ns,
    labels = {
      ["platform.example.com/team"] = ns,
      ["pod-security.kubernetes.io/enforce"] = "restricted",
    },
  },
}

local quota = {
  apiVersion = "v1",
  kind = "ResourceQuota",
  metadata = { name = "team-quota", namespace = ns, labels = labels },
  spec = {
    hard = {
      ["requests.cpu"] = get_path(team, "spec.quota.cpu", "4"),
      ["requests.memory"] = get_path(team, "spec.quota.memory", "8Gi"),
      pods = get_path(team, "spec.quota.pods", "20"),
    },
  },
}

local editors = {
  apiVersion = "rbac.authorization.k8s.io/v1",
  kind = "RoleBinding",
  metadata = { name = "team-editors", namespace = ns, labels = labels },
  roleRef = { apiGroup = "rbac.authorization.k8s.io", kind = "ClusterRole", name = "edit" },
  subjects = {
    { apiGroup = "rbac.authorization.k8s.io", kind = "Group", name = team.spec.group },
  },
}

local deny = {
  apiVersion = "networking.k8s.io/v1",
  kind = "NetworkPolicy",
  metadata = { name = "default-deny", namespace = ns, labels = labels },
  spec = { podSelector = {}, policyTypes = { "Ingress" } },
}

local observed = get_path(request.children["Namespace.v1"], ns)
return {
  children = { namespace, quota, editors, deny },
  status = {
    namespace = ns,
    phase = get_path(observed, "status.phase", "Pending"),
  },
}
