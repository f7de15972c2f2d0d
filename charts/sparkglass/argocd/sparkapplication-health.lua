-- Argo CD health check for sparkglass.io/SparkApplication.
-- Install: argocd-cm key resource.customizations.health.sparkglass.io_SparkApplication
-- (see docs/gitops.md). Reads status.applicationState.state, written only by the operator.
-- A finished batch application (COMPLETED) is Healthy: it did what its spec asked.
local hs = {}
local function done(status, message)
  hs.status = status
  hs.message = message
  return hs
end

if obj.status == nil then
  return done("Progressing", "Waiting for the operator to reconcile the application")
end
local generation = obj.metadata.generation
local observed = obj.status.observedGeneration
if generation ~= nil and observed ~= nil and observed < generation then
  return done("Progressing", "The operator has not yet acted on the latest spec")
end

local appState = obj.status.applicationState or {}
local state = appState.state or ""
local err = appState.errorMessage
local function why(default)
  if err ~= nil and err ~= "" then
    return err
  end
  return default
end

if (obj.spec ~= nil and obj.spec.suspend == true) or state == "SUSPENDED" then
  return done("Suspended", "Suspended by spec.suspend")
end
if state == "RUNNING" then
  return done("Healthy", "The driver is running")
elseif state == "COMPLETED" then
  return done("Healthy", "The application completed")
elseif state == "FAILED" or state == "SUBMISSION_FAILED" then
  return done("Degraded", why("The application " .. state))
elseif state == "FAILING" then
  return done("Degraded", why("The driver failed; the restart policy is deciding"))
elseif state == "PENDING_RERUN" then
  return done("Progressing", why("Waiting to restart the driver"))
elseif state == "" or state == "SUBMITTED" or state == "INVALIDATING" or state == "SUCCEEDING" then
  return done("Progressing", "Application state " .. (state ~= "" and state or "NEW"))
end
return done("Unknown", why("Application state " .. state))
