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
-- The table `snapshots` is the library snapshots.lua. The Rhai twin (map.rhai) returns the same
-- JSON for every request.

local schedule = request.parent
local pvc = request.input
local now_seconds = parse_time(now())
local interval = snapshots.duration_seconds(schedule, "snapshotInterval")
local ttl = snapshots.duration_seconds(schedule, "snapshotTTL")

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
local observed = get_path(request, { "outputs", snapshots.KEY }, map())
for _, snapshot_name in ipairs(snapshots.sorted_names(observed)) do
  if snapshot_name == current_name then
    continue
  end
  local snapshot = observed[snapshot_name]
  local age = snapshots.age_seconds(snapshot, now_seconds)
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
