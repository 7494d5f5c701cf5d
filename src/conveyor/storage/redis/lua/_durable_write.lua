-- _durable_write.lua: what the durable scripts (steps, receive, deliver) write beside what
-- _durable.lua reads (kept apart: ack.lua, trim.lua and delete.lua need only the reads).
--- @include "_durable"
--- @needs-keys steps waits inbox listeners

local function put_wait(id, w)
  redis.call('HSETNX', K_STEPS, id, '')  -- the mark of a job with durable records
  redis.call('HSET', K_WAITS, id, table.concat({w.kind, w.step, w.name, w.key,
    string.format('%.6f', w.due), string.format('%.6f', w.window),
    string.format('%.6f', w.since), w.listening and '1' or '0'}, '\t'))
  if w.kind == 'event' then
    local member = w.name .. US .. w.key .. US .. id
    if w.listening then redis.call('ZADD', K_LISTENERS, 0, member)
    else redis.call('ZREM', K_LISTENERS, member) end
  end
end

local function put_inbox(id, messages)
  if #messages == 0 then
    redis.call('HDEL', K_INBOX, id)
    return
  end
  local lines = {}
  for i, m in ipairs(messages) do lines[i] = table.concat(m, '\t') end
  redis.call('HSETNX', K_STEPS, id, '')
  redis.call('HSET', K_INBOX, id, table.concat(lines, '\n'))
end

local function taken_of(id)
  local out = {}
  for _, m in ipairs(split_lines(redis.call('HGET', K_STEPS, id .. RS) or '')) do
    out[m] = true
  end
  return out
end

-- A step's stored record, or nil.
local function step_of(id, name)
  return redis.call('HGET', K_STEPS, id .. US .. name) or nil
end

local function step_final(body)
  local ok, rec = pcall(cjson.decode, body)
  -- a damaged record stays: it reads as a failed step (Step.from_json)
  return not ok or type(rec) ~= 'table' or rec.s == 'ok' or rec.s == 'error'
end

-- Write a step's record; returns whether it was written (a final one stays).
local function put_step(id, name, body, origin)
  local field = id .. US .. name
  local stored = redis.call('HGET', K_STEPS, field)
  if stored and step_final(stored) then return false end
  redis.call('HSET', K_STEPS, field, body)
  if not stored then
    local names = redis.call('HGET', K_STEPS, id)
    redis.call('HSET', K_STEPS, id, (names and names ~= '') and (names .. '\n' .. name) or name)
  end
  if origin and origin ~= '' then
    local taken = redis.call('HGET', K_STEPS, id .. RS)
    redis.call('HSET', K_STEPS, id .. RS, taken and (taken .. '\n' .. origin) or origin)
  end
  return true
end

