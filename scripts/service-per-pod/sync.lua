-- service-per-pod: DecoratorController sync hook, also used as the finalize hook.
--
-- For a StatefulSet annotated with
--   service-per-pod-label: the pod label that names each pod (e.g. statefulset.kubernetes.io/pod-name)
--   service-per-pod-ports: "port:targetPort" pairs, comma separated (e.g. "80:8080,443:8443")
-- emit one Service `<sts>-<i>` per pod ordinal, selecting that pod, and mark the StatefulSet with
-- the label `metascript.dev/service-per-pod: "true"`.
--
-- Finalizing (the StatefulSet is deleted or lost an annotation): ask for no Services, and report
-- `finalized` only once none is observed any more, dropping the marker label at that point.
-- The Rhai twin (sync.rhai) returns the same JSON for every request.

local MARKER = "metascript.dev/service-per-pod"

local sts = request.object

if request.finalizing then
  local remaining = get_path(request, { "attachments", "Service.v1" }, map())
  if next(remaining) == nil then
    return { labels = { [MARKER] = null }, attachments = array(), finalized = true }
  end
  -- Services are still being deleted: keep asking for none, and wait to be called again.
  return { attachments = array(), finalized = false }
end

local sts_name = name(sts)
local pod_label = annotation(sts, "service-per-pod-label")
local port_spec = annotation(sts, "service-per-pod-ports")
if pod_label == nil or port_spec == nil then
  error("the StatefulSet needs the service-per-pod-label and service-per-pod-ports annotations", 0)
end

-- A port is 1 to 65535, written in decimal digits only (no sign, no spaces inside).
local function parse_port(text, entry)
  local digits = string.match(text, "^%s*(%d%d?%d?%d?%d?)%s*$")
  local port = digits and tonumber(digits)
  if port == nil or port < 1 or port > 65535 then
    error("service-per-pod-ports: invalid entry '" .. entry .. "' (expected port:targetPort)", 0)
  end
  return port
end

local ports = array()
for _, entry in ipairs(string.split(port_spec, ",")) do
  local parts = string.split(entry, ":")
  if #parts ~= 2 then
    error("service-per-pod-ports: invalid entry '" .. entry .. "' (expected port:targetPort)", 0)
  end
  local port = parse_port(parts[1], entry)
  local target_port = parse_port(parts[2], entry)
  table.insert(ports, { name = "port-" .. port, port = port, targetPort = target_port })
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
