-- configmap-propagation: DecoratorController customize hook.
--
-- Asks for the ConfigMaps to copy into the target Namespace: those labelled propagate: "true"
-- in the namespace shared-config. They reach the sync hook as request.related["ConfigMap.v1"],
-- and any change to one of them re-syncs every target Namespace.
-- The Rhai twin (customize.rhai) returns the same JSON.

return {
  relatedResources = {
    {
      apiVersion = "v1",
      resource = "configmaps",
      namespace = "shared-config",
      labelSelector = { matchLabels = { propagate = "true" } },
    },
  },
}
