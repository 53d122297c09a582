-- wrk script for scripts/load_test.sh: POST /v1/chat/completions, each request as one of 32 users
-- (the OpenAI "user" field, which the nginx config routes on) with its own short history.
-- Prints one JSON line at the end: requests, errors by kind, non-2xx responses, latency, rate.
local counter = 0
local max_tokens = tonumber(os.getenv("GEM4_LOAD_MAX_TOKENS") or "16")

request = function()
  counter = counter + 1
  local user = "load-user-" .. (counter % 32)
  local body = string.format(
    '{"user":"%s","max_tokens":%d,"temperature":0,"messages":[' ..
    '{"role":"system","content":"You are conversation %s."},' ..
    '{"role":"user","content":"In the beginning God created"}]}', user, max_tokens, user)
  return wrk.format("POST", "/v1/chat/completions", { ["Content-Type"] = "application/json" }, body)
end

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '{"requests":%d,"seconds":%.2f,"rate":%.1f,"connect_errors":%d,"read_errors":%d,"write_errors":%d,' ..
    '"timeouts":%d,"non_2xx":%d,"latency_p50_ms":%.1f,"latency_p99_ms":%.1f}\n',
    summary.requests, summary.duration / 1e6, summary.requests / (summary.duration / 1e6),
    e.connect, e.read, e.write, e.timeout, e.status,
    latency:percentile(50) / 1000, latency:percentile(99) / 1000))
end
