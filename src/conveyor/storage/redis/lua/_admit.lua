-- _admit.lua: whether a job's limits let it start now (dequeue.lua, start.lua, publish.lua).
--- @include "_flow"
--- @include "_rates"
-- Whether it could start now, taking nothing (a broker's relay asks it of a parked job).
local function flow_would_admit(K_FLOW, K_RATES, id, fl)
  local climit = num(fl.concurrency_limit)
  if fl.concurrency_key and climit > 0 and
      num(redis.call('HGET', K_FLOW, 'c:' .. fl.concurrency_key)) >= climit then
    return false
  end
  if fl.order_key then
    local holder = redis.call('HGET', K_FLOW, 'o:' .. fl.order_key)
    if holder and holder ~= id then return false end
  end
  local rlimit = num(fl.rate_limit)
  if type(fl.rate_key) == 'string' and rlimit > 0 and
      not rate_admits(K_RATES, fl.rate_key, rlimit, num(fl.rate_period)) then
    return false
  end
  return true
end

-- If so, it takes its concurrency slot, order key and a place in its rate log (`tag` makes
-- the log entry unique).
local function flow_admit(K_FLOW, K_RATES, K_RATE_ENDS, id, fl, tag)
  if not flow_would_admit(K_FLOW, K_RATES, id, fl) then return false end
  local climit = num(fl.concurrency_limit)
  local rlimit, rperiod = num(fl.rate_limit), num(fl.rate_period)
  local rated = type(fl.rate_key) == 'string' and rlimit > 0
  if fl.concurrency_key and climit > 0 then
    redis.call('HINCRBY', K_FLOW, 'c:' .. fl.concurrency_key, 1)
  end
  if fl.order_key then redis.call('HSET', K_FLOW, 'o:' .. fl.order_key, id) end
  if rated then rate_start(K_RATES, K_RATE_ENDS, fl.rate_key, rperiod, tag) end
  return true
end
