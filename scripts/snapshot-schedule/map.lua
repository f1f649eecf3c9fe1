-- snapshot-schedule: MapController map hook, called once per PVC a SnapshotSchedule selects.
--
--   parent:  SnapshotSchedule {spec: {snapshotInterval: "6h", snapshotTTL: "10d",
--                                     volumeSnapshotClassName (optional)}}
--   input:   the PVC
--   outputs: the VolumeSnapshots of this PVC that this schedule already owns
--
-- Time is cut into intervals counted from the Unix epoch: interval number b = floor(now / interval)
-- starts at b * interval, and its snapshot is named `<pvc>-<b>`. The hook returns
--   - the snapshot of the current interval (the operator creates it when it does not exist yet,
--     so there is one new snapshot per interval, and none while the interval has not elapsed);
--     only for a Bound PVC, since an unbound claim has nothing to snapshot;
--   - every observed snapshot younger than the TTL, so a map call never drops one within its TTL.
-- Older snapshots are left out, which makes the operator delete them.
--
-- A snapshot's age counts from its creationTimestamp (set by the API server), or, when that is
-- missing, from the start of its interval (annotation snapshot.example.com/scheduled-at).
-- The Rhai twin (map.rhai) returns the same JSON for every request.

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

local schedule = request.parent
local pvc = request.input
local now_seconds = parse_time(now())
local interval = duration_seconds(schedule, "snapshotInterval")
local ttl = duration_seconds(schedule, "snapshotTTL")

local bucket = math.floor(now_seconds / interval)
local current_name = name(pvc) .. "-" .. bucket
local outputs = array()

if get_path(pvc, "status.phase") == "Bound" then
  table.insert(outputs, {
    apiVersion = "snapshot.storage.k8s.io/v1",
    kind = "VolumeSnapshot",
    metadata = {
      name = current_name,
      annotations = { ["snapshot.example.com/scheduled-at"] = to_rfc3339(bucket * interval) },
    },
    spec = {
      source = { persistentVolumeClaimName = name(pvc) },
      volumeSnapshotClassName = get_path(schedule, "spec.volumeSnapshotClassName"),
    },
  })
end

-- Keep every earlier snapshot still within its TTL, as it is (snapshots are immutable).
local observed = get_path(request, { "outputs", SNAPSHOTS }, map())
local names = {}
for snapshot_name in pairs(observed) do
  table.insert(names, snapshot_name)
end
table.sort(names)
for _, snapshot_name in ipairs(names) do
  if snapshot_name == current_name then
    continue
  end
  local snapshot = observed[snapshot_name]
  local age = age_seconds(snapshot, now_seconds)
  if age == nil then
    log("warn", "keeping a snapshot whose age is unknown", { snapshot = snapshot_name })
  elseif age >= ttl then
    continue
  end
  table.insert(outputs, {
    apiVersion = snapshot.apiVersion,
    kind = snapshot.kind,
    metadata = { name = snapshot_name },
    spec = snapshot.spec,
  })
end

return { outputs = outputs }
