-- post.lua: wrk script for the HTTP benchmark. Every request POSTs the body
-- in the file named by BENCH_BODY to /attend; at the end one line starting
-- with "BENCH_JSON " carries the figures run_http.py reads (and the load
-- test's valid stream, tests/robust/run_loadtest.py).
--   BENCH_BODY=build/bench/requests/w1.json wrk -t1 -c16 -d10s \
--     -s tests/bench/post.lua http://127.0.0.1:PORT/attend
-- No response() callback: wrk would then hand every (megabyte-sized) body
-- to Lua, costing client CPU on the cores the server uses; wrk's own count
-- of non-2xx/3xx responses (errors.status) is enough.

local path = os.getenv("BENCH_BODY")
local f = assert(io.open(path, "rb"), "cannot open BENCH_BODY " .. tostring(path))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "application/json"

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'BENCH_JSON {"requests":%d,"duration_us":%d,"bytes":%d,' ..
    '"non2xx":%d,"connect_errors":%d,"read_errors":%d,"write_errors":%d,' ..
    '"timeouts":%d,"lat_p50_us":%d,"lat_p90_us":%d,"lat_p99_us":%d,' ..
    '"lat_max_us":%d}\n',
    summary.requests, summary.duration, summary.bytes, e.status, e.connect,
    e.read, e.write, e.timeout, latency:percentile(50),
    latency:percentile(90), latency:percentile(99), latency.max))
end
