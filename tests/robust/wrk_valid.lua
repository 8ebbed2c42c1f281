-- wrk_valid.lua: the load test's valid stream. Every request POSTs the
-- body in the file named by LOAD_BODY to /attend. No response() callback
-- (it would hand every body to Lua and cost client CPU on the cores the
-- server uses): wrk's own count of non-2xx/3xx answers is what is checked.
-- The last line, "LOAD_JSON {...}", carries the figures run_loadtest.py reads.

local path = os.getenv("LOAD_BODY")
local f = assert(io.open(path, "rb"), "cannot open LOAD_BODY " .. tostring(path))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "application/json"

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'LOAD_JSON {"requests":%d,"duration_us":%d,"non2xx":%d,' ..
    '"connect_errors":%d,"read_errors":%d,"write_errors":%d,' ..
    '"timeouts":%d,"lat_p50_us":%d,"lat_p90_us":%d,"lat_p99_us":%d,' ..
    '"lat_max_us":%d}\n',
    summary.requests, summary.duration, e.status, e.connect, e.read,
    e.write, e.timeout, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency.max))
end
