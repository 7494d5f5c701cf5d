-- _flow.lua: a job's flow-control settings, and giving back what it holds.
--- @include "_fields"
--- @include "_util"
-- Flow control (concurrency counts "c:<key>" and order holders "o:<key>") lives in the
-- queue's flow hash, rate logs in its rates zsets (_rates.lua), so limits apply per queue.
-- Only jobs flagged F_FLOW_CONTROLLED '1' (limits) or 'l' (lined: _lineup.lua) pay for
-- decoding their static JSON.
local function flow_of(K_JOBS, id, f)
  local flag = f[F_FLOW_CONTROLLED]
  if flag ~= '1' and flag ~= 'l' then return nil end
  local static = redis.call('HGET', K_JOBS, id)
  if not static then return nil end
  local ok, decoded = pcall(cjson.decode, static)
  if not ok or type(decoded) ~= 'table' or type(decoded.fl) ~= 'table' then return nil end
  return decoded.fl
end

-- The slots of its concurrency key (and of a worker) a job takes while it runs: its cost.
local function flow_cost(fl)
  local c = math.floor(num(fl.cost))
  if c < 1 then return 1 end
  return c
end

-- An active job gives its concurrency slots back; a finished one also its order key.
local function flow_release(K_FLOW, id, fl, was_active, finished)
  if was_active and fl.concurrency_key and num(fl.concurrency_limit) > 0 and
      redis.call('HINCRBY', K_FLOW, 'c:' .. fl.concurrency_key, -flow_cost(fl)) < 0 then
    redis.call('HSET', K_FLOW, 'c:' .. fl.concurrency_key, 0)
  end
  if finished and fl.order_key and redis.call('HGET', K_FLOW, 'o:' .. fl.order_key) == id then
    redis.call('HDEL', K_FLOW, 'o:' .. fl.order_key)
  end
end
