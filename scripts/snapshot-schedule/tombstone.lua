-- snapshot-schedule: MapController tombstone hook, called for the snapshots of a PVC that is gone
-- (deleted, or no longer selected by the schedule).
--
-- Snapshots exist to restore a lost volume, so they are not deleted with the PVC: each one is kept
-- until it is older than spec.snapshotTTL, exactly as if the PVC were still there. A snapshot's
-- age counts from its creationTimestamp or, when that is missing, from the start of its interval
-- (annotation snapshot.example.com/scheduled-at); one whose age cannot be told is kept.
-- The Rhai twin (tombstone.rhai) returns the same JSON for every request.

local SNAPSHOTS = "VolumeSnapshot.snapshot.storage.k8s.io/v1"

-- A duration field of the schedule ("6h", "10d") in whole seconds, at least a minute.
local function duration_seconds(schedule, field)
  local text = get_path(schedule, { "spec", field }, "")
  local seconds = parse_duration(text)
  if seconds ~= math.floor(seconds) or seconds < 60 then
    error(string.format('SnapshotSchedule %s: spec.%s "%s" must be whole seconds, at least 1m',
      name(schedule), field, text), 0)
  end
  return seconds
end

-- Seconds since the snapshot was taken (or scheduled); nil when it cannot be told.
local function age_seconds(snapshot, now_seconds)
  local taken = get_path(snapshot, "metadata.creationTimestamp")
    or annotation(snapshot, "snapshot.example.com/scheduled-at")
  return taken and now_seconds - parse_time(taken)
end

local ttl = duration_seconds(request.parent, "snapshotTTL")
local now_seconds = parse_time(now())

local detached = get_path(request, { "outputs", SNAPSHOTS }, map())
local names = {}
for snapshot_name in pairs(detached) do
  table.insert(names, snapshot_name)
end
table.sort(names)
local keep = array()
for _, snapshot_name in ipairs(names) do
  local snapshot = detached[snapshot_name]
  local age = age_seconds(snapshot, now_seconds)
  if age == nil then
    log("warn", "keeping a snapshot whose age is unknown", { snapshot = snapshot_name })
    table.insert(keep, snapshot)
  elseif age < ttl then
    table.insert(keep, snapshot)
  end
end

return { outputs = keep }
