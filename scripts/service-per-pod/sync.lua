-- service-per-pod: DecoratorController sync hook (also usable as the finalize hook).
--
-- For a StatefulSet annotated with
--   service-per-pod-label: the pod label that names each pod (e.g. statefulset.kubernetes.io/pod-name)
--   service-per-pod-ports: "port:targetPort" pairs, comma separated (e.g. "80:8080,443:8443")
-- emit one Service `<sts>-<i>` per pod ordinal, selecting that pod, and mark the StatefulSet with
-- the label `metascript.dev/service-per-pod: "true"`. The Rhai twin (sync.rhai) returns the same JSON.

local MARKER = "metascript.dev/service-per-pod"

local sts = request.object

-- Finalizing: own nothing any more, drop the marker label, and report done.
if request.finalizing == true then
  return {
    labels = { [MARKER] = null },
    attachments = array(),
    finalized = true,
  }
end

local sts_name = name(sts)
local pod_label = annotation(sts, "service-per-pod-label")
local port_spec = annotation(sts, "service-per-pod-ports")
if pod_label == nil or port_spec == nil then
  error("the StatefulSet needs the service-per-pod-label and service-per-pod-ports annotations")
end

local ports = array()
for _, entry in ipairs(string.split(port_spec, ",")) do
  local port, target_port = string.match(entry, "^%s*(%d+)%s*:%s*(%d+)%s*$")
  if port == nil then
    error("service-per-pod-ports: invalid entry '" .. entry .. "' (expected port:targetPort)")
  end
  table.insert(ports, {
    name = "port-" .. port,
    port = tonumber(port),
    targetPort = tonumber(target_port),
  })
end

local services = array()
local ns = namespace(sts)
-- Kubernetes defaults spec.replicas to 1 when it is unset.
for i = 0, get_path(sts, "spec.replicas", 1) - 1 do
  local pod = sts_name .. "-" .. i
  table.insert(services, {
    apiVersion = "v1",
    kind = "Service",
    metadata = { name = pod, namespace = ns },
    spec = { selector = { [pod_label] = pod }, ports = ports },
  })
end

return {
  labels = { [MARKER] = "true" },
  attachments = services,
}
