-- heads.lua: what a search reads of some jobs of one queue (Inspector.job_heads), cut short
-- here so that a job's whole payload, event log or message never crosses the network.
--- @include "_util"
--- @key jobs
--- @key state
--- @key messages
-- ARGV: 1 now|'' (unused), 2 bytes to keep of the payload and of the message, then job ids
-- Returns: per id {the static JSON from the payload's opening quote on, cut to the bytes
--   asked for; the state line without the event log; the message, cut}, '' for what is missing
local keep = num(ARGV[2])
local out = {}
for i = 3, #ARGV do
  local id = ARGV[i]
  local static = redis.call('HGET', K_JOBS, id) or ''
  -- the static JSON is {"n":...,"q":...,"p":"<payload as a JSON string>",...}: the name and
  -- queue are escaped, so '"p":"' cannot occur before the payload's own key
  local at = string.find(static, '"p":"', 1, true)
  local payload = at and string.sub(static, at + 5, at + 4 + keep) or ''
  local state = redis.call('HGET', K_STATE, id) or ''
  local cut = string.find(state, '\n', 1, true)
  if cut then
    state = string.sub(state, 1, cut - 1)
  end
  local message = string.sub(redis.call('HGET', K_MESSAGES, id) or '', 1, keep)
  out[#out + 1] = {payload, state, message}
end
return out
