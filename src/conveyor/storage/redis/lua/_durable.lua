-- _durable.lua: a durable job's records in its queue's slot (docs/durable.md), the same
-- rules storage/durable.py writes for the other stores.
--- @include "_util"
--- @needs-keys steps waits inbox listeners
--
--   steps[id]             the job's step names, "\n"-joined, in the order first recorded
--                         ('' for a job with a wait or messages only: every job with durable
--                         records has it, so forgetting any other job costs one HGET)
--   steps[id US name]     a step's record (Step.to_json; "s" is its status)
--   steps[id RS]          ids of the messages the job took, "\n"-joined
--   waits[id]             kind TAB step TAB name TAB key TAB until TAB window TAB since TAB
--                         listening (1/0)
--   inbox[id]             one message a line: id TAB kind TAB name TAB key TAB sent_at TAB data
--   listeners             "name US key US id" of every event wait still listening
-- Names, keys, topics and message ids hold no control character (the client checks them),
-- and compact JSON no raw TAB or newline, so these separators are safe.
local US, RS = '\31', '\30'

local function fields_of(line)
  local out = {}
  for part in string.gmatch(line .. '\t', '([^\t]*)\t') do out[#out + 1] = part end
  return out
end

-- The job's wait, or nil.
local function wait_of(id)
  local raw = redis.call('HGET', K_WAITS, id)
  if not raw then return nil end
  local p = fields_of(raw)
  return {kind = p[1], step = p[2], name = p[3], key = p[4] or '', due = tonumber(p[5]) or 0,
          window = tonumber(p[6]) or 0, since = tonumber(p[7]) or 0, listening = p[8] == '1'}
end

local function drop_wait(id)
  local w = wait_of(id)
  if w and w.kind == 'event' then
    redis.call('ZREM', K_LISTENERS, w.name .. US .. w.key .. US .. id)
  end
  redis.call('HDEL', K_WAITS, id)
end

-- The inbox's messages of the job as {id, kind, name, key, sent_at, data} lists.
local function inbox_of(id)
  local out = {}
  for _, line in ipairs(split_lines(redis.call('HGET', K_INBOX, id) or '')) do
    local p = fields_of(line)
    -- data is the rest of the line (it holds no TAB, but keep every part after the fifth)
    out[#out + 1] = {p[1], p[2], p[3], p[4], p[5], table.concat(p, '\t', 6)}
  end
  return out
end

-- Position of the oldest message the wait takes, or nil.
local function answer_of(messages, w)
  for i, m in ipairs(messages) do
    if m[2] == w.kind and m[3] == w.name and m[4] == w.key then return i end
  end
  return nil
end

-- True when the job's wait has its answer in the inbox.
local function durable_answered(id)
  local w = wait_of(id)
  return w ~= nil and answer_of(inbox_of(id), w) ~= nil
end

-- A deleted job's records go with it.
local function durable_forget(id)
  local names = redis.call('HGET', K_STEPS, id)
  if not names then return end
  for _, name in ipairs(split_lines(names)) do redis.call('HDEL', K_STEPS, id .. US .. name) end
  redis.call('HDEL', K_STEPS, id, id .. RS)
  drop_wait(id)
  redis.call('HDEL', K_INBOX, id)
end
