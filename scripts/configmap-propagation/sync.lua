-- configmap-propagation: DecoratorController sync hook.
--
-- The target is a Namespace (cluster-scoped); request.related["ConfigMap.v1"] holds the source
-- ConfigMaps the customize hook selected, keyed "shared-config/<name>". For each source, attach a
-- copy of the same name in the target Namespace: its data and binaryData, and the annotation
-- config.example.com/propagated-from naming the source. The copies must set metadata.namespace,
-- since a cluster-scoped parent implies none. The Namespace gets the annotation
-- config.example.com/propagated-configmaps with the number of copies. The source namespace itself
-- never receives copies (they would be the sources). Copies of a source that is deleted or loses
-- its label are no longer returned, so the operator deletes them.
-- The Rhai twin (sync.rhai) returns the same JSON for every request.

local target_namespace = name(request.object)
local sources = get_path(request, { "related", "ConfigMap.v1" }, map())
local keys = {}
for key in pairs(sources) do
  table.insert(keys, key)
end
table.sort(keys)

local copies = array()
for _, key in ipairs(keys) do
  local source = sources[key]
  if namespace(source) ~= target_namespace then
    table.insert(copies, {
      apiVersion = "v1",
      kind = "ConfigMap",
      metadata = {
        name = name(source),
        namespace = target_namespace,
        annotations = { ["config.example.com/propagated-from"] = namespace(source) .. "/" .. name(source) },
      },
      data = get_path(source, "data", map()),
      binaryData = get_path(source, "binaryData"),
    })
  end
end

return {
  annotations = { ["config.example.com/propagated-configmaps"] = tostring(#copies) },
  attachments = copies,
}
