-- sonic admission control, rendered by sonic.deploy.envoy (the query, threshold and authority are filled in there).
--
-- A new job starts by asking for the RepositoryIndex (sonic.client and CMSSW's SonicTriton both do).
-- While the load metric that Prometheus computes is above the threshold, that call is refused with
-- gRPC UNAVAILABLE and a reason, so the job waits or goes to another site; calls of jobs already
-- running (ModelInfer, metadata) are never touched. The refusal is answered by a dedicated route
-- (direct_response), chosen through the x-sonic-admission header set here: Envoy then counts
-- refusals itself (http.<prefix>.rq_direct_response) and this filter needs no response hook.

local QUERY = [==[$query]==]
local THRESHOLD = $threshold
local AUTHORITY = "$authority"
local INDEX_PATH = "/inference.GRPCInferenceService/RepositoryIndex"

local function url_encode(text)
  return (string.gsub(text, "[^%w%-%._~]", function(c)
    return string.format("%%%02X", string.byte(c))
  end))
end

local function refuse(handle, reason)
  handle:headers():replace("x-sonic-admission", "refused")
  handle:headers():replace("x-sonic-admission-reason", reason)
  handle:clearRouteCache()
end

-- The highest sample of an instant-vector answer: "value":[<time>,"<number>"] per series.
-- NaN (no execution in the window: 0/0) is no load; no series at all is no load either.
local function highest_value(body)
  local highest = nil
  for text in string.gmatch(body, '"value":%[[^,%]]+,"([^"]+)"%]') do
    local number = tonumber(text)
    if number ~= nil and number == number and (highest == nil or number > highest) then
      highest = number
    end
  end
  return highest
end

function envoy_on_request(handle)
  local headers = handle:headers()
  -- Only this filter may choose the refusal route.
  headers:remove("x-sonic-admission")
  headers:remove("x-sonic-admission-reason")
  if headers:get(":path") ~= INDEX_PATH then
    return
  end
  local answer, body = handle:httpCall("prometheus", {
    [":method"] = "GET",
    [":path"] = "/api/v1/query?query=" .. url_encode(QUERY),
    [":authority"] = AUTHORITY,
  }, "", 2000)
  if answer == nil or answer[":status"] ~= "200" or body == nil then
    -- Without the load figure a new job cannot be admitted safely; the reason says what failed.
    refuse(handle, "sonic admission: the load query to Prometheus failed; retry later")
    return
  end
  local load = highest_value(body)
  if load ~= nil and load > THRESHOLD then
    refuse(handle, string.format(
      "sonic admission: server load %.4g is above the threshold %.4g (queue time per execution, ms); retry later",
      load, THRESHOLD))
  end
end
