-- indexedjob: CompositeController sync hook, a port of Metacontroller's examples/indexedjob from
-- Python.
--
-- Pods <job>-<index> for index 0 to completions - 1, at most `parallelism` running at once,
-- each with JOB_INDEX set in every container. Status counts the Pods by phase, and the Complete
-- condition says whether all succeeded. Once the job has finished (Complete or Failed), Pods are
-- no longer created: the observed ones are kept as they are, and the status stays.
-- The Rhai twin (sync.rhai) returns the same JSON for every request.

local function finished(job)
  for _, condition in ipairs(get_path(job, "status.conditions", array())) do
    if (condition.type == "Complete" or condition.type == "Failed") and condition.status == "True" then
      return true
    end
  end
  return false
end

-- The index of `<base>-<digits>`, or -1.
local function index_of(base, name)
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

local function new_pod(job, index)
  local pod = json_decode(json_encode(job.spec.template))
  pod.apiVersion = "v1"
  pod.kind = "Pod"
  pod.metadata = pod.metadata or {}
  pod.metadata.name = name(job) .. "-" .. index
  for _, container in ipairs(pod.spec.containers) do
    container.env = container.env or array()
    table.insert(container.env, { name = "JOB_INDEX", value = tostring(index) })
  end
  return pod
end

local function pods(job, indexes)
  table.sort(indexes)
  local children = array()
  for _, index in ipairs(indexes) do
    table.insert(children, new_pod(job, index))
  end
  return children
end

local job = request.parent
local base = name(job)
local observed, indexes = {}, {}
local active, succeeded, failed = 0, 0, 0
for _, pod in pairs(request.children["Pod.v1"]) do
  local index = index_of(base, name(pod))
  if index >= 0 then
    local phase = get_path(pod, "status.phase")
    if phase == "Succeeded" then
      succeeded = succeeded + 1
    elseif phase == "Failed" then
      failed = failed + 1
    else
      active = active + 1
    end
    observed[index] = true
    table.insert(indexes, index)
  end
end

if finished(job) then
  return { status = job.status, children = pods(job, indexes) }
end

local completions = get_path(job, "spec.completions", 1)
local parallelism = get_path(job, "spec.parallelism", 1)
local status = {
  active = active,
  succeeded = succeeded,
  failed = failed,
  conditions = array({ { type = "Complete", status = succeeded == completions and "True" or "False" } }),
}

for index = 0, completions - 1 do
  if not observed[index] and active < parallelism then
    table.insert(indexes, index)
    active = active + 1
  end
end
return { status = status, children = pods(job, indexes) }
