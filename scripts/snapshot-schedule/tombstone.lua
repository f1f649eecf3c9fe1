-- snapshot-schedule: MapController tombstone hook, called for the snapshots of a PVC that is gone
-- (deleted, or no longer selected by the schedule).
--
-- Snapshots exist to restore a lost volume, so they are not deleted with the PVC: each one is kept
-- until it is older than spec.snapshotTTL, exactly as if the PVC were still there. A snapshot's
-- age counts from its creationTimestamp or, when that is missing, from the start of its interval
-- (annotation snapshot.example.com/scheduled-at); one whose age cannot be told is kept.
-- The table `snapshots` is the library snapshots.lua. The Rhai twin (tombstone.rhai) returns the same
-- JSON for every request.

local ttl = snapshots.duration_seconds(request.parent, "snapshotTTL")
local now_seconds = parse_time(now())

local detached = get_path(request, { "outputs", snapshots.KEY }, map())
local keep = array()
for _, snapshot_name in ipairs(snapshots.sorted_names(detached)) do
  local snapshot = detached[snapshot_name]
  local age = snapshots.age_seconds(snapshot, now_seconds)
  if age == nil then
    log("warn", "keeping a snapshot whose age is unknown", { snapshot = snapshot_name })
    table.insert(keep, snapshot)
  elseif age < ttl then
    table.insert(keep, snapshot)
  end
end

return { outputs = keep }
