-- bluegreen: CompositeController sync hook, a port of Metacontroller's examples/bluegreen from
-- JavaScript.
--
-- Two ReplicaSets, <name>-blue and <name>-green, and the Service from spec.service, whose
-- selector picks the active color. When the pod template changes, the inactive ReplicaSet gets
-- the new template and is scaled up; once all its replicas are available it becomes active (the
-- Service switches to it) and the other is scaled to zero. Each ReplicaSet remembers its
-- template in an annotation, so the hook can tell which one matches the parent.
-- The Rhai twin (sync.rhai) returns the same JSON for every request.

local TEMPLATE_ANNOTATION = "bluegreendeployments.ctl.enisoc.com/pod-template-json"

-- A deep copy, so building children never changes the request (JSON round trip).
local function copy(value)
  return json_decode(json_encode(value))
end

local function new_replica_set(bgd, color, replicas, template)
  local pod_template = copy(template)
  pod_template.metadata.labels.color = color
  local selector = copy(bgd.spec.selector)
  selector.matchLabels = selector.matchLabels or {}
  selector.matchLabels.color = color
  return {
    apiVersion = "apps/v1",
    kind = "ReplicaSet",
    metadata = {
      name = name(bgd) .. "-" .. color,
      labels = copy(pod_template.metadata.labels),
      annotations = { [TEMPLATE_ANNOTATION] = json_encode(template) },
    },
    spec = {
      replicas = replicas,
      minReadySeconds = get_path(bgd, "spec.minReadySeconds", 0),
      selector = selector,
      template = pod_template,
    },
  }
end

local function recorded_template(rs)
  return json_decode(annotation(rs, TEMPLATE_ANNOTATION))
end

-- Whether a ReplicaSet was made from the parent's current template (compared as JSON, whose
-- keys are written in order).
local function template_matches(bgd, rs)
  return rs ~= nil and json_encode(recorded_template(rs)) == json_encode(bgd.spec.template)
end

local function new_service(bgd, color)
  local service = copy(bgd.spec.service)
  service.apiVersion = "v1"
  service.kind = "Service"
  service.spec.selector.color = color
  return service
end

local bgd = request.parent
local replica_sets = request.children["ReplicaSet.apps/v1"]
local service = rawget(request.children["Service.v1"], bgd.spec.service.metadata.name)
local active_color = service and service.spec.selector.color or "blue"
local inactive_color = active_color == "blue" and "green" or "blue"

local active = rawget(replica_sets, name(bgd) .. "-" .. active_color)
local inactive = rawget(replica_sets, name(bgd) .. "-" .. inactive_color)

local status = {
  activeColor = active_color,
  active = get_path(active, "status", map()),
  inactive = get_path(inactive, "status", map()),
}

local active_replicas = active and active.spec.replicas or bgd.spec.replicas
local active_template = active and recorded_template(active) or bgd.spec.template
local inactive_replicas = inactive and inactive.spec.replicas or 0
local inactive_template = inactive and recorded_template(inactive) or bgd.spec.template

if template_matches(bgd, active) then
  -- No rollout: the inactive one is scaled down.
  inactive_replicas = 0
elseif template_matches(bgd, inactive) then
  -- The inactive one has the new template: scale it up, and swap once it is all available.
  inactive_replicas = bgd.spec.replicas
  if get_path(inactive, "status.availableReplicas", 0) == bgd.spec.replicas then
    active_color, inactive_color = inactive_color, active_color
    active_replicas, inactive_replicas = inactive_replicas, active_replicas
    active_template, inactive_template = inactive_template, active_template
  end
elseif inactive and inactive.spec.replicas == 0 and get_path(inactive, "status.replicas", 0) == 0 then
  -- Neither matches: start a rollout on the inactive one.
  inactive_replicas = bgd.spec.replicas
  inactive_template = bgd.spec.template
else
  -- Another rollout was going on: cancel it, and wait for its Pods to go.
  inactive_replicas = 0
end

return {
  status = status,
  children = array({
    new_service(bgd, active_color),
    new_replica_set(bgd, active_color, active_replicas, active_template),
    new_replica_set(bgd, inactive_color, inactive_replicas, inactive_template),
  }),
}
