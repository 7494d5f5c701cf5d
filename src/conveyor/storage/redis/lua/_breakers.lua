-- _breakers.lua: circuit breakers per (queue, key) (docs/operations.md "Breakers"): each
-- key's record and the lease gate. What an outcome does to a key is _breaker_acks.lua.
--- @include "_clock"
--- @include "_util"
--- @needs-keys breakers active
-- K_BREAKERS is a hash, breaker key -> its record, TAB-joined:
--   state ('open', 'half_open' or 'closed'), opened_at, probe_at, probe_id, trips, within
--   (the window of the failure log, seconds), the failure log (times joined by spaces, oldest
--   first), then the reason (the rest of the entry, whatever it holds).
-- A key with no entry is closed with an empty log; a closed key whose log is empty is
-- removed, so the hash holds the keys that are open or failed lately. storage/redis/
-- breakers.py reads the same layout. An entry that cannot be read counts as closed.
-- Only jobs whose static JSON names a breaker key read it. The functions are made by the
-- first such job of a call (breakers()): a call without one defines one closure, not all of
-- them (docs/internals/redis-lua.md, "What a call costs").
local brk_made

local function breakers()
  if brk_made then return brk_made end
  local cache = {}  -- key -> its record as this call read or last wrote it
  local probing = {}  -- keys whose probe this call leased (in K_ACTIVE only at the flush)
  local B = {}
  brk_made = B

  function B.read(key)
    local b = cache[key]
    if b then return b end
    b = {state = 'closed', opened_at = '', probe_at = '', probe_id = '', trips = 0,
         within = 0, log = {}, reason = ''}
    local raw = redis.call('HGET', K_BREAKERS, key)
    if raw then
      local parts, pos = {}, 1
      for i = 1, 7 do
        local tab = string.find(raw, '\t', pos, true)
        if not tab then break end
        parts[i] = string.sub(raw, pos, tab - 1)
        pos = tab + 1
      end
      local state = parts[1]
      if #parts == 7 and (state == 'open' or state == 'half_open' or state == 'closed') then
        b.state, b.opened_at, b.probe_at, b.probe_id = state, parts[2], parts[3], parts[4]
        b.trips, b.within, b.reason = num(parts[5]), num(parts[6]), string.sub(raw, pos)
        for t in string.gmatch(parts[7], '[^ ]+') do
          if tonumber(t) then b.log[#b.log + 1] = tonumber(t) end
        end
      end
    end
    cache[key] = b
    return b
  end

  function B.write(key, b)
    if b.state == 'closed' and #b.log == 0 then
      redis.call('HDEL', K_BREAKERS, key)
      return
    end
    local log = {}
    for i, t in ipairs(b.log) do log[i] = string.format('%.6f', t) end
    redis.call('HSET', K_BREAKERS, key, b.state .. '\t' .. b.opened_at .. '\t' .. b.probe_at
      .. '\t' .. b.probe_id .. '\t' .. string.format('%d', b.trips) .. '\t'
      .. string.format('%.17g', b.within) .. '\t' .. table.concat(log, ' ') .. '\t'
      .. b.reason)
  end

  -- Whether a job of `key` may start now: the key is closed, or open past its probe time,
  -- or half-open with its probe no longer running (its worker died and the job was
  -- recovered, or it was deleted): then the job starts as the probe (B.take).
  function B.admits(key)
    local b = B.read(key)
    if b.state == 'closed' then return true end
    if b.state == 'open' then return NOW >= num(b.probe_at) end
    if probing[key] then return false end
    return not redis.call('ZSCORE', K_ACTIVE, b.probe_id)
  end

  -- The first `n` characters of UTF-8 `text` (Python's text[:n]), and whether it was longer.
  function B.chars(text, n)
    local seen = 0
    for i = 1, #text do
      local byte = string.byte(text, i)
      if byte < 128 or byte >= 192 then  -- a character starts here
        if seen == n then return string.sub(text, 1, i - 1), true end
        seen = seen + 1
      end
    end
    return text, false
  end

  -- A key quoted in a message as conveyor.core.text.shown quotes it: cut after 40
  -- characters (a key holds no control character to escape: the key rule).
  function B.shown(key)
    local cut, longer = B.chars(key, 40)
    return "'" .. cut .. (longer and "...'" or "'")
  end

  -- A job of `key` that B.admits let through starts: as the probe unless the key is
  -- closed. Returns the message of its 'breaker' event then, else nil.
  function B.take(key, id)
    local b = B.read(key)
    if b.state == 'closed' then return nil end
    b.state, b.probe_id = 'half_open', id
    probing[key] = true
    B.write(key, b)
    return 'probe of breaker ' .. B.shown(key)
  end

  return B
end
