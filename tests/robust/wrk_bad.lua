-- wrk_bad.lua: the load test's bad stream. Cycles through the request
-- bodies in the files listed (colon-separated) in LOAD_BAD_BODIES, each
-- POSTed to /attend as JSON, plus a wrong content type (415), a wrong
-- method (405) and an unknown path (404). Counts answers by status class
-- per thread; the last line, "LOAD_BAD_JSON {...}", sums them.

local bodies = {}
for p in string.gmatch(os.getenv("LOAD_BAD_BODIES") or "", "[^:]+") do
  local f = assert(io.open(p, "rb"), "cannot open " .. p)
  bodies[#bodies + 1] = f:read("*a")
  f:close()
end
local json = {["Content-Type"] = "application/json"}
local text = {["Content-Type"] = "text/plain"}
local threads = {}
local i = 0
counts = {s2 = 0, s4 = 0, s5 = 0, s503 = 0, other = 0}

function setup(thread)
  threads[#threads + 1] = thread
end

function request()
  i = i + 1
  local k = i % (#bodies + 3)
  if k < #bodies then
    return wrk.format("POST", "/attend", json, bodies[k + 1])
  elseif k == #bodies then
    return wrk.format("POST", "/attend", text, bodies[1])
  elseif k == #bodies + 1 then
    return wrk.format("PUT", "/attend", json, bodies[1])
  end
  return wrk.format("POST", "/no-such-path", json, bodies[1])
end

function response(status, headers, body)
  if status == 503 then counts.s503 = counts.s503 + 1
  elseif status >= 500 then counts.s5 = counts.s5 + 1
  elseif status >= 400 then counts.s4 = counts.s4 + 1
  elseif status >= 200 and status < 300 then counts.s2 = counts.s2 + 1
  else counts.other = counts.other + 1 end
end

function done(summary, latency, requests)
  local t = {s2 = 0, s4 = 0, s5 = 0, s503 = 0, other = 0}
  for _, th in ipairs(threads) do
    local c = th:get("counts")
    for k, v in pairs(c) do t[k] = t[k] + v end
  end
  local e = summary.errors
  io.write(string.format(
    'LOAD_BAD_JSON {"requests":%d,"s2xx":%d,"s4xx":%d,"s5xx_not_503":%d,' ..
    '"s503":%d,"other":%d,"connect_errors":%d,"read_errors":%d,' ..
    '"write_errors":%d,"timeouts":%d}\n',
    summary.requests, t.s2, t.s4, t.s5, t.s503, t.other, e.connect, e.read,
    e.write, e.timeout))
end
