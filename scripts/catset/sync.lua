-- catset: CompositeController sync hook, also its finalize hook. A port of Metacontroller's
-- examples/catset (a StatefulSet look-alike) from JavaScript.
--
-- Pods are named <catset>-<ordinal>. Every observed Pod is kept (at the current template: the
-- controller's RollingRecreate update strategy replaces them one at a time, each once the one
-- before is Ready); one missing Pod is created when every lower ordinal is Running and Ready;
-- once all are, the highest extra ordinal is removed (scale down, one at a time). Pods are
-- listed highest ordinal first, which is the order a rolling update follows. Each
-- volumeClaimTemplate gets a PVC per ordinal; PVCs beyond `replicas` are kept (as StatefulSet
-- does) and go with the CatSet.
--
-- Finalizing (the CatSet is deleted): scale to zero, and report finalized once no Pod is left.
-- The Rhai twin (sync.rhai) returns the same JSON for every request.

local function condition_status(obj, kind)
  for _, condition in ipairs(get_path(obj, "status.conditions", array())) do
    if condition.type == kind then
      return condition.status
    end
  end
  return "Unknown"
end

local function running_and_ready(pod)
  return pod ~= nil
    and get_path(pod, "status.phase") == "Running"
    and get_path(pod, "metadata.deletionTimestamp") == nil
    and condition_status(pod, "Ready") == "True"
end

-- The ordinal of `<base>-<digits>`, or -1.
local function ordinal(base, name)
  local prefix = base .. "-"
  if string.sub(name, 1, #prefix) ~= prefix then
    return -1
  end
  local digits = string.sub(name, #prefix + 1)
  if not string.match(digits, "^%d+$") then
    return -1
  end
  return tonumber(digits)
end

-- A deep copy, so building children never changes the request (JSON round trip).
local function copy(value)
  return json_decode(json_encode(value))
end

local function new_pod(catset, i)
  local pod = copy(catset.spec.template)
  local pod_name = name(catset) .. "-" .. i
  pod.apiVersion = "v1"
  pod.kind = "Pod"
  pod.metadata = pod.metadata or {}
  pod.metadata.name = pod_name
  pod.spec.hostname = pod_name
  pod.spec.subdomain = catset.spec.serviceName
  local templates = get_path(catset, "spec.volumeClaimTemplates", array())
  if #templates > 0 then
    local volumes = pod.spec.volumes or array()
    for _, claim in ipairs(templates) do
      table.insert(volumes, {
        name = claim.metadata.name,
        persistentVolumeClaim = { claimName = claim.metadata.name .. "-" .. pod_name },
      })
    end
    pod.spec.volumes = volumes
  end
  return pod
end

local function new_pvc(pvc_name, template)
  local pvc = copy(template)
  pvc.apiVersion = "v1"
  pvc.kind = "PersistentVolumeClaim"
  pvc.metadata.name = pvc_name
  return pvc
end

local catset = request.parent
local base = name(catset)
local replicas = get_path(catset, "spec.replicas", 1)

-- Observed Pods by ordinal.
local observed, count = {}, 0
for _, pod in pairs(request.children["Pod.v1"]) do
  local i = ordinal(base, name(pod))
  if i >= 0 then
    observed[i] = pod
    count = count + 1
  end
end

local response = {}
if request.finalizing then
  replicas = 0
  response.finalized = count == 0
end

local ready = 0
while ready < replicas and running_and_ready(observed[ready]) do
  ready = ready + 1
end
response.status = { replicas = count, readyReplicas = ready }

local desired = {}
for i in pairs(observed) do
  desired[i] = new_pod(catset, i)
end
if ready < replicas and desired[ready] == nil then
  desired[ready] = new_pod(catset, ready)
end
if ready == replicas then
  local highest = -1
  for i in pairs(desired) do
    if i > highest then
      highest = i
    end
  end
  if highest >= replicas then
    desired[highest] = nil
  end
end

local ordinals = {}
for i in pairs(desired) do
  table.insert(ordinals, i)
end
table.sort(ordinals, function(a, b) return a > b end)
local children = array()
for _, i in ipairs(ordinals) do
  table.insert(children, desired[i])
end

for _, template in ipairs(get_path(catset, "spec.volumeClaimTemplates", array())) do
  local claim_base = template.metadata.name .. "-" .. base
  for i = 0, replicas - 1 do
    table.insert(children, new_pvc(claim_base .. "-" .. i, template))
  end
  for _, pvc in pairs(request.children["PersistentVolumeClaim.v1"]) do
    if ordinal(claim_base, name(pvc)) >= replicas then
      table.insert(children, new_pvc(name(pvc), template))
    end
  end
end

response.children = children
return response
