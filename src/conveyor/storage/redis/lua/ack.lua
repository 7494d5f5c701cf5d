-- ack.lua: apply workers' outcomes for jobs of one queue, each fenced by its lease token.
-- KEYS: 1 jobs, 2 events, 3 active, 4 pending, 5 retrying, 6 succeeded, 7 failed, 8 dead,
--       9 cancelled, 10 meta, 11 notify
-- ARGV: 1 now|'', 2 mode: "plan" (apply jobs without a batch, report batch jobs) or
--       "apply" (apply everything), then 9 per ack: id, token, outcome, result|'',
--       message|'', error data JSON|'', retry_in|'', own events NDJSON|'', progress "d/t"|''
-- Returns: per ack {code, batch id|'', "state:queue"|''}: 1 applied (or applied before with
--          this token), 0 refused (stale lease; an ack_refused event is recorded),
--          2 valid but its batch must be updated first (plan mode only).
local K_JOBS = KEYS[1]
local K_EVENTS = KEYS[2]
local K_ACTIVE = KEYS[3]
local K_PENDING = KEYS[4]
local K_RETRYING = KEYS[5]
local K_SUCCEEDED = KEYS[6]
local K_FAILED = KEYS[7]
local K_DEAD = KEYS[8]
local K_CANCELLED = KEYS[9]
local K_META = KEYS[10]
local K_NOTIFY = KEYS[11]
local FINAL = {succeeded = K_SUCCEEDED, failed = K_FAILED, dead = K_DEAD, cancelled = K_CANCELLED}
local mode = ARGV[2]
local pushed = 0

local function target(job, outcome)
  if outcome == 'retry' then
    if (job.e or 0) + 1 > job.m then return 'dead' end
    return 'retrying'
  elseif outcome == 'interrupted' then
    return 'pending'
  end
  return outcome
end

local function finish(id, job, state, lines, msg, err)
  redis.call('ZADD', FINAL[state], NOW, id)
  job.fa = NOW
  if state == 'succeeded' then
    count(K_META, 'p', job.n)
    return lines .. event_line('succeeded', state, job)
  elseif state == 'failed' then
    count(K_META, 'f', job.n)
    return lines .. event_line('failed', state, job, msg)
  elseif state == 'dead' then
    count(K_META, 'd', job.n)
    if err then lines = lines .. event_line('error', state, job, msg, err) end
    return lines .. event_line('dead', state, job, msg)
  end
  return lines .. event_line('cancelled', state, job, msg)
end

local function apply(i, id, job, state)
  local outcome, result, msg = ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
  local err = nil
  if ARGV[i + 5] ~= '' then err = cjson.decode(ARGV[i + 5]) end
  local lines = ARGV[i + 7]
  if ARGV[i + 8] ~= '' then
    local sep = string.find(ARGV[i + 8], '/', 1, true)
    job.pg = {tonumber(string.sub(ARGV[i + 8], 1, sep - 1)), tonumber(string.sub(ARGV[i + 8], sep + 1))}
  end
  redis.call('ZREM', K_ACTIVE, id)
  if result ~= '' then job.res = result end
  if msg ~= '' then job.msg = msg end
  if outcome == 'retry' then job.e = (job.e or 0) + 1 end
  job.lt = job.tk
  job.tk = nil
  job.le = nil
  job.s = state
  if state == 'retrying' then
    local delay = tonumber(ARGV[i + 6]) or ((job.e ^ 4) + 15)
    job.ra = NOW + delay
    redis.call('ZADD', K_RETRYING, job.ra, id)
    count(K_META, 'r', job.n)
    err = err or {}
    err.retry_in = delay
    lines = lines .. event_line('error', state, job, msg, err)
  elseif state == 'pending' then
    job.pt = NOW
    redis.call('RPUSH', K_PENDING, id)
    pushed = pushed + 1
    lines = lines .. event_line('interrupted', state, job, msg)
  else
    lines = finish(id, job, state, lines, msg, err)
  end
  save(K_JOBS, id, job)
  append_events(K_EVENTS, id, lines)
end

local out = {}
for i = 3, #ARGV, 9 do
  local id, token = ARGV[i], ARGV[i + 1]
  local job = load(K_JOBS, id)
  if not job then
    out[#out + 1] = {0, '', ''}
  elseif job.lt == token then
    -- A retried call whose first attempt was applied: report success, change nothing.
    out[#out + 1] = {1, job.b or '', job.s .. ':' .. job.q}
  elseif job.s ~= 'active' or job.tk ~= token then
    append_events(K_EVENTS, id, event_line('ack_refused', job.s, job,
      'acknowledgement with a stale lease refused', {outcome = ARGV[i + 2]}))
    out[#out + 1] = {0, job.b or '', job.s .. ':' .. job.q}
  else
    local state = target(job, ARGV[i + 2])
    if job.b and mode == 'plan' then
      out[#out + 1] = {2, job.b, state .. ':' .. job.q}
    else
      apply(i, id, job, state)
      out[#out + 1] = {1, job.b or '', state .. ':' .. job.q}
    end
  end
end
notify(K_NOTIFY, pushed)
return out
