-- configmap-transform: MapController map hook, called once per ConfigMap a ConfigTemplate selects.
--
--   parent: ConfigTemplate {spec: {selector, rename: {old: new}, keyPrefix: "APP_"}}
--   input:  the source ConfigMap
--
-- Returns one ConfigMap `<source>-rendered` in the same namespace: every key of the source's data
-- renamed by spec.rename, then prefixed with spec.keyPrefix, values unchanged. It carries the
-- source's labels, and the annotations config.example.com/rendered-from (the source's name) and
-- config.example.com/source-checksum (sha256 of the source's data), which a Deployment can copy
-- into its pod template to roll when the configuration changes. Two keys that would end up with
-- the same name are an error, rather than one silently winning.
-- The Rhai twin (map.rhai) returns the same JSON for every request.

local template = request.parent
local source = request.input
local rename = get_path(template, "spec.rename", map())
local prefix = get_path(template, "spec.keyPrefix", "")
local data = get_path(source, "data", map())

local keys = {}
for key in pairs(data) do
  table.insert(keys, key)
end
table.sort(keys)
local rendered = map()
local renamed_from = {}
for _, key in ipairs(keys) do
  local new_key = prefix .. (rename[key] or key)
  if rendered[new_key] ~= nil then
    error(string.format('ConfigTemplate %s: keys "%s" and "%s" of ConfigMap %s both become "%s"',
      name(template), renamed_from[new_key], key, name(source), new_key), 0)
  end
  rendered[new_key] = data[key]
  renamed_from[new_key] = key
end

return {
  outputs = array({
    {
      apiVersion = "v1",
      kind = "ConfigMap",
      metadata = {
        name = name(source) .. "-rendered",
        labels = labels(source),
        annotations = {
          ["config.example.com/rendered-from"] = name(source),
          ["config.example.com/source-checksum"] = sha256(json_encode(data)),
        },
      },
      data = rendered,
    },
  }),
}
