-- snapshot-schedule's library: what its map and tombstone hooks share. Both controller manifests
-- list it in spec.libraries under the name `snapshots`, so the table this chunk returns is the
-- global `snapshots` in both hooks. A Lua library runs before each call in globals of its own: it
-- sees the helpers, not `request`.
--
-- The Rhai twin (snapshots.rhai) offers the same functions by name.

local M = {}

-- Where the observed snapshots are in request.outputs.
M.KEY = "VolumeSnapshot.snapshot.storage.k8s.io/v1"

-- A duration field of the schedule ("6h", "10d") in whole seconds, at least a minute.
function M.duration_seconds(schedule, field)
  local text = get_path(schedule, { "spec", field }, "")
  local seconds = parse_duration(text)
  if seconds ~= math.floor(seconds) or seconds < 60 then
    error(string.format('SnapshotSchedule %s: spec.%s "%s" must be whole seconds, at least 1m',
      name(schedule), field, text), 0)
  end
  return seconds
end

-- Seconds since the snapshot was taken, from its creationTimestamp or, when that is missing,
-- from the start of its interval (annotation snapshot.example.com/scheduled-at); nil when it
-- cannot be told.
function M.age_seconds(snapshot, now_seconds)
  local taken = get_path(snapshot, "metadata.creationTimestamp")
    or annotation(snapshot, "snapshot.example.com/scheduled-at")
  return taken and now_seconds - parse_time(taken)
end

-- The names of the snapshots in a table of them by name, sorted.
function M.sorted_names(snapshots)
  local names = {}
  for snapshot_name in pairs(snapshots) do
    table.insert(names, snapshot_name)
  end
  table.sort(names)
  return names
end

return M
