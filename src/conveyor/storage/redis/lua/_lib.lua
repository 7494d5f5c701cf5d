-- _lib.lua: helpers prepended to every script by scripts.py (not a script by itself).
-- ARGV[1] is always the storage clock's "now" in epoch seconds, or '' for the server's TIME.
-- Key-holding variables are named K_* and are only ever assigned from KEYS[i].
--
-- A job is stored in two hash entries of its queue:
--   jobs[id]  = immutable JSON written by the client: name, payload, options ("static")
--   state[id] = the mutable fields below joined by TAB, then "\n", then the NDJSON event log.
-- Parsing a TAB line and concatenating strings is far cheaper in Lua than cjson round trips,
-- and reading or writing a whole page of jobs takes one HMGET/HSET.
local function server_now()
  if ARGV[1] ~= '' then return tonumber(ARGV[1]) end
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1000000
end
local NOW = server_now()
local NOWS = string.format('%.6f', NOW)
local DAY = math.floor(NOW / 86400)
local TERMINAL = {succeeded = true, failed = true, dead = true, cancelled = true}
local WAITING = {pending = true, scheduled = true, retrying = true}

-- Field positions in the state line.
local S, C, A, E, R, TK, W, LE, SA, FA, PT, RA, LT, LO, CR, PG, N, B, DL, SC, FL =
  1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21
local NF = 21

-- A state line parsed into fields, its event log, and why it is damaged (nil when sound).
-- Never raises: a truncated or garbled line yields '' for every missing field, so a script
-- can still decide what to do with that one job before it writes anything (Redis does not
-- roll back a script that fails half way, DESIGN §7).
local STATES = {scheduled = true, pending = true, active = true, retrying = true,
  succeeded = true, failed = true, dead = true, cancelled = true}
local function parse(raw)
  local nl = string.find(raw, '\n', 1, true)
  local head, events = raw, ''
  if nl then
    head = string.sub(raw, 1, nl - 1)
    events = string.sub(raw, nl + 1)
  end
  local f, pos, bad = {}, 1, nil
  for i = 1, NF - 1 do
    local tab = pos and string.find(head, '\t', pos, true)
    if tab then
      f[i] = string.sub(head, pos, tab - 1)
      pos = tab + 1
    else
      if pos then f[i] = string.sub(head, pos) else f[i] = '' end
      if not bad then bad = 'state entry truncated (' .. i .. ' of ' .. NF .. ' fields)' end
      pos = nil
    end
  end
  if pos then f[NF] = string.sub(head, pos) else f[NF] = '' end
  if not bad and not STATES[f[S]] then bad = 'state entry names no known state' end
  return f, events, bad
end

local function pack(f, events)
  return table.concat(f, '\t', 1, NF) .. '\n' .. events
end

local function num(value)
  return tonumber(value) or 0
end

local JSON_CACHE = {}
local function jstr(value)
  local out = JSON_CACHE[value]
  if not out then
    out = cjson.encode(value)
    JSON_CACHE[value] = out
  end
  return out
end

-- One NDJSON event line; data_json is JSON text already.
local function event_line(kind, state, f, msg, data_json)
  local out = '{"t":' .. NOWS .. ',"k":"' .. kind .. '"'
  if state then out = out .. ',"s":"' .. state .. '"' end
  if msg and msg ~= '' then out = out .. ',"m":' .. cjson.encode(msg) end
  if f and f[W] ~= '' then out = out .. ',"w":' .. jstr(f[W]) end
  if f and f[A] ~= '0' and f[A] ~= '' then out = out .. ',"a":' .. f[A] end
  if data_json and data_json ~= '' then out = out .. ',"d":' .. data_json end
  return out .. '}\n'
end

-- Outcome counters of the queue, per job name and per day, written once per call.
local COUNTS = {}
local function count(what, name)
  local k1, k2 = what .. ':' .. name, what .. 'd:' .. DAY
  COUNTS[k1] = (COUNTS[k1] or 0) + 1
  COUNTS[k2] = (COUNTS[k2] or 0) + 1
end
local function flush_counts(K_META)
  for field, by in pairs(COUNTS) do redis.call('HINCRBY', K_META, field, by) end
end

-- Variadic commands over long argument lists, in chunks below Lua's unpack limit.
local function bulk(command, K_KEY, args)
  local n = #args
  for i = 1, n, 2000 do
    redis.call(command, K_KEY, unpack(args, i, math.min(i + 1999, n)))
  end
end

-- Batch bookkeeping is a second call (batch.lua); scripts report what moved.
local function note_batch(list, f, id, state)
  if f[B] ~= '' then list[#list + 1] = {f[B], id, state .. ':' .. ARGV[2]} end
end

-- Remove a job from whichever index its state keeps it in (pending is a list, the rest zsets;
-- a pending job held back by flow control waits in the parked zset instead of the list).
-- A pending job's list entry is left in place: LREM walks the whole list, which made cancelling
-- a big batch quadratic. dequeue.lua drops the entry when it pops it (the record is no longer
-- pending) and the meta field "stale" counts such entries until then, so sizes stay exact:
-- unindex returns 1 for each entry it leaves behind, and the caller adds them up.
-- A record in no known state may be in any index: every zset is cleared (O(log n) each).
local function unindex(INDEX, K_PARKED, state, id)
  if state == 'pending' then
    if redis.call('ZREM', K_PARKED, id) == 0 then return 1 end  -- left in the list: stale
  elseif INDEX[state] then
    local K_INDEX = INDEX[state]
    redis.call('ZREM', K_INDEX, id)
  else
    for name, K_INDEX in pairs(INDEX) do
      if name ~= 'pending' then redis.call('ZREM', K_INDEX, id) end
    end
    redis.call('ZREM', K_PARKED, id)
  end
  return 0
end

local function notify(K_NOTIFY, n)
  if n > 0 and redis.call('LLEN', K_NOTIFY) < 16 then
    for _ = 1, math.min(n, 16) do redis.call('LPUSH', K_NOTIFY, '1') end
  end
end

local function load(K_STATE, id)
  local raw = redis.call('HGET', K_STATE, id)
  if not raw then return nil, nil end
  return parse(raw)
end

local function save(K_STATE, id, f, events)
  redis.call('HSET', K_STATE, id, pack(f, events))
end

-- Flow control (concurrency, order and rate keys) lives in the queue's flow hash, so limits
-- apply per queue. Only jobs flagged FL pay for decoding their static JSON.
local function flow_of(K_JOBS, id, f)
  if f[FL] == '' then return nil end
  local static = redis.call('HGET', K_JOBS, id)
  if not static then return nil end
  local ok, decoded = pcall(cjson.decode, static)
  if not ok or type(decoded) ~= 'table' or type(decoded.fl) ~= 'table' then return nil end
  return decoded.fl
end

local function flow_admit(K_FLOW, id, fl)
  local climit = num(fl.concurrency_limit)
  if fl.concurrency_key and climit > 0 and
      num(redis.call('HGET', K_FLOW, 'c:' .. fl.concurrency_key)) >= climit then
    return false
  end
  if fl.order_key then
    local holder = redis.call('HGET', K_FLOW, 'o:' .. fl.order_key)
    if holder and holder ~= id then return false end
  end
  local window = nil
  local rlimit = num(fl.rate_limit)
  if fl.rate_key and rlimit > 0 then
    local start, used = NOW, 0
    local held = redis.call('HGET', K_FLOW, 'r:' .. fl.rate_key)
    if held then
      local sep = string.find(held, '|', 1, true)
      start, used = tonumber(string.sub(held, 1, sep - 1)), tonumber(string.sub(held, sep + 1))
    end
    if NOW >= start + num(fl.rate_period) then start, used = NOW, 0 end
    if used >= rlimit then return false end
    window = string.format('%.6f', start) .. '|' .. (used + 1)
  end
  if fl.concurrency_key and climit > 0 then
    redis.call('HINCRBY', K_FLOW, 'c:' .. fl.concurrency_key, 1)
  end
  if fl.order_key then redis.call('HSET', K_FLOW, 'o:' .. fl.order_key, id) end
  if window then redis.call('HSET', K_FLOW, 'r:' .. fl.rate_key, window) end
  return true
end

-- An active job gives its concurrency slot back; a finished one also its order key.
local function flow_release(K_FLOW, id, fl, was_active, finished)
  if was_active and fl.concurrency_key and num(fl.concurrency_limit) > 0 and
      redis.call('HINCRBY', K_FLOW, 'c:' .. fl.concurrency_key, -1) < 0 then
    redis.call('HSET', K_FLOW, 'c:' .. fl.concurrency_key, 0)
  end
  if finished and fl.order_key and redis.call('HGET', K_FLOW, 'o:' .. fl.order_key) == id then
    redis.call('HDEL', K_FLOW, 'o:' .. fl.order_key)
  end
end
