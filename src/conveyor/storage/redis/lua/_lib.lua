-- _lib.lua: helpers prepended to every script by scripts.py (not a script by itself).
-- ARGV[1] is always the storage clock's "now" in epoch seconds, or '' for the server's TIME.
-- Key-holding variables are named K_* and are only ever assigned from KEYS[i].
local function server_now()
  if ARGV[1] ~= '' then return tonumber(ARGV[1]) end
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1000000
end
local NOW = server_now()
local NOWS = string.format('%.6f', NOW)
local TERMINAL = {succeeded = true, failed = true, dead = true, cancelled = true}

-- One NDJSON event line; the timestamp is spliced in by hand because cjson keeps 14 digits.
local function event_line(kind, state, job, msg, data)
  local e = {k = kind}
  if state then e.s = state end
  if msg and msg ~= '' then e.m = msg end
  if job and job.w then e.w = job.w end
  if job and job.a and job.a > 0 then e.a = job.a end
  if data then e.d = data end
  return '{"t":' .. NOWS .. ',' .. string.sub(cjson.encode(e), 2) .. '\n'
end

local function append_events(K_EVENTS, id, lines)
  local old = redis.call('HGET', K_EVENTS, id)
  if old then lines = old .. lines end
  redis.call('HSET', K_EVENTS, id, lines)
end

local function save(K_JOBS, id, job)
  redis.call('HSET', K_JOBS, id, cjson.encode(job))
end

local function load(K_JOBS, id)
  local raw = redis.call('HGET', K_JOBS, id)
  if not raw then return nil end
  return cjson.decode(raw)
end

-- All-time and per-day outcome counters of a queue, per job name (for metrics and stats).
local function count(K_META, what, name)
  redis.call('HINCRBY', K_META, what .. ':' .. name, 1)
  redis.call('HINCRBY', K_META, what .. 'd:' .. math.floor(NOW / 86400), 1)
end

-- Batch bookkeeping is done by a second call (batch.lua); scripts report what moved.
local function note_batch(list, job, id, state)
  if job.b then list[#list + 1] = {job.b, id, state .. ':' .. job.q} end
end

-- Remove a job from whichever index its state keeps it in (pending is a list, the rest zsets).
local function unindex(K_INDEX, state, id)
  if state == 'pending' then
    redis.call('LREM', K_INDEX, 0, id)
  else
    redis.call('ZREM', K_INDEX, id)
  end
end

local function notify(K_NOTIFY, n)
  if n > 0 then
    if n > 16 then n = 16 end
    for _ = 1, n do redis.call('LPUSH', K_NOTIFY, '1') end
    redis.call('LTRIM', K_NOTIFY, 0, 63)
  end
end
