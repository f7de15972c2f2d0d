-- Argo CD health check for sparkglass.io/DataSample.
-- Install: argocd-cm key resource.customizations.health.sparkglass.io_DataSample
-- (see docs/gitops.md). Reads status.phase, written only by the operator.
-- A DataSample is one sampling round: a round that ended with a result (Complete, Partial,
-- NoData) or that sampling is switched off for (Disabled) is Healthy; Failed and Abandoned
-- are Degraded; Pending and InProgress are Progressing.
local hs = {}
local function done(status, message)
  hs.status = status
  hs.message = message
  return hs
end

if obj.status == nil or obj.status.phase == nil then
  return done("Progressing", "Waiting for the operator to pick the DataSample up")
end
local phase = obj.status.phase
local message = obj.status.message
if message == nil or message == "" then
  message = phase
end

if phase == "Complete" or phase == "NoData" or phase == "Disabled" then
  return done("Healthy", message)
elseif phase == "Partial" then
  return done("Healthy", "Partial result: " .. message)
elseif phase == "Failed" or phase == "Abandoned" then
  return done("Degraded", message)
elseif phase == "Pending" or phase == "InProgress" then
  return done("Progressing", message)
end
return done("Unknown", message)
