-- _admit.lua: whether a job's limits let it start now (dequeue.lua, start.lua, publish.lua).
--- @include "_flow"
--- @include "_rates"
--- @include "_breakers"
-- The key rule (conveyor/text.py key_fault): 1 to 512 bytes of UTF-8 holding no C0 or C1
-- control, DEL, line or paragraph separator (U+2028, U+2029) or lone surrogate (as the bytes
-- a client of another kind could write). A stored key that breaks it ends its job dead where
-- the job would start, with rules.broken_key_message's words.
local KEY_RULE = ' breaks the key rule (1 to 512 bytes of UTF-8, no control characters or '
  .. 'line breaks): the job cannot start'
local function key_breaks(k)
  if k == nil or k == cjson.null or k == '' then return false end
  if type(k) ~= 'string' then return true end
  return #k > 512 or string.find(k, '[%z\1-\31\127]') ~= nil
    or string.find(k, '\194[\128-\159]') ~= nil
    or string.find(k, '\226\128[\168\169]') ~= nil
    or string.find(k, '\237[\160-\191]') ~= nil
end

-- The message of a job whose concurrency, order, rate or breaker key (checked in that order)
-- breaks the key rule, or nil.
local function flow_broken(fl)
  if key_breaks(fl.concurrency_key) then return 'concurrency key' .. KEY_RULE end
  if key_breaks(fl.order_key) then return 'order key' .. KEY_RULE end
  if key_breaks(fl.rate_key) then return 'rate key' .. KEY_RULE end
  if key_breaks(fl.breaker_key) then return 'breaker key' .. KEY_RULE end
  return nil
end

-- Whether it could start now, taking nothing (a broker's relay asks it of a parked job).
local function flow_would_admit(K_FLOW, K_RATES, id, fl)
  -- the breaker first: it holds every job of its key, and costs one read per key and call
  if type(fl.breaker_key) == 'string' and not breakers().admits(fl.breaker_key) then
    return false
  end
  local climit = num(fl.concurrency_limit)
  if fl.concurrency_key and climit > 0 and
      num(redis.call('HGET', K_FLOW, 'c:' .. fl.concurrency_key)) + flow_cost(fl) > climit then
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

-- If so, it takes its concurrency slots (its cost), order key and a place in its rate log (`tag` makes
-- the log entry unique), and starts as its breaker's probe when the key is not closed: then
-- the second value is the message of the job's 'breaker' event (_breakers.lua).
local function flow_admit(K_FLOW, K_RATES, K_RATE_ENDS, id, fl, tag)
  if not flow_would_admit(K_FLOW, K_RATES, id, fl) then return false end
  local climit = num(fl.concurrency_limit)
  local rlimit, rperiod = num(fl.rate_limit), num(fl.rate_period)
  local rated = type(fl.rate_key) == 'string' and rlimit > 0
  if fl.concurrency_key and climit > 0 then
    redis.call('HINCRBY', K_FLOW, 'c:' .. fl.concurrency_key, flow_cost(fl))
  end
  if fl.order_key then redis.call('HSET', K_FLOW, 'o:' .. fl.order_key, id) end
  if rated then rate_start(K_RATES, K_RATE_ENDS, fl.rate_key, rperiod, tag) end
  if type(fl.breaker_key) == 'string' then
    return true, breakers().take(fl.breaker_key, id)
  end
  return true
end
