-- ack.lua: apply workers' outcomes for jobs of one queue, each fenced by its lease token.
-- KEYS: 1 jobs, 2 events, 3 active, 4 pending, 5 retrying, 6 succeeded, 7 failed, 8 dead,
--       9 cancelled, 10 meta, 11 notify
-- ARGV: 1 now|'', 2 mode: "plan" (apply jobs without a batch, report batch jobs) or
--       "apply" (apply everything), then 9 per ack: id, token, outcome, result|'',
--       message|'', error data JSON|'', retry_in|'', own events NDJSON|'', progress "d/t"|''
-- Returns: per ack {code, batch id|'', "state:queue"|''}: 1 applied (or the same outcome was
--          applied before with this token: a retried call), 0 refused (stale lease; an ack_refused event is recorded),
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
local ARGV_MESSAGE = ''
local mode = ARGV[2]
local pushed = 0

local function target(outcome)
  if outcome == 'retry' then return 'retrying' end
  if outcome == 'interrupted' then return 'pending' end
  return outcome
end

-- The worker owns the retry policy: it sends "dead" once attempts are exhausted.
local function finish(id, job, state, msg, err)
  local FINAL = {succeeded = K_SUCCEEDED, failed = K_FAILED, dead = K_DEAD,
                 cancelled = K_CANCELLED}
  local K_FINAL = FINAL[state]
  redis.call('ZADD', K_FINAL, NOW, id)
  job.fa = NOW
  if state == 'succeeded' then
    count(K_META, 'p', job.n)
    return event_line('succeeded', state, job, ARGV_MESSAGE)
  elseif state == 'failed' then
    count(K_META, 'f', job.n)
    return event_line('failed', state, job, msg, err)
  elseif state == 'dead' then
    if err then job.e = (job.e or 0) + 1 end
    count(K_META, 'd', job.n)
    return event_line('dead', state, job, msg, err)
  end
  return event_line('cancelled', state, job, msg)
end

local function apply(i, id, job, state)
  local result = ARGV[i + 3]
  local err = nil
  if ARGV[i + 5] ~= '' then err = cjson.decode(ARGV[i + 5]) end
  ARGV_MESSAGE = ARGV[i + 4]
  local msg = ARGV[i + 4]
  if msg == '' and err and err.message then msg = err.message end
  local lines = ARGV[i + 7]
  if ARGV[i + 8] ~= '' then
    local sep = string.find(ARGV[i + 8], '/', 1, true)
    job.pg = {tonumber(string.sub(ARGV[i + 8], 1, sep - 1)),
              tonumber(string.sub(ARGV[i + 8], sep + 1))}
  end
  redis.call('ZREM', K_ACTIVE, id)
  if result ~= '' and state == 'succeeded' then job.res = result end
  if msg ~= '' then job.msg = msg end
  job.lt = job.tk
  job.lo = ARGV[i + 2]
  job.tk = nil
  job.le = nil
  job.s = state
  if state == 'retrying' then
    job.e = (job.e or 0) + 1
    local delay = math.max(tonumber(ARGV[i + 6]) or 0, 0)
    job.ra = NOW + delay
    redis.call('ZADD', K_RETRYING, job.ra, id)
    count(K_META, 'r', job.n)
    err = err or {}
    err.retry = true
    err.retry_in = delay
    lines = lines .. event_line('error', state, job, msg, err)
  elseif state == 'pending' then
    job.pt = NOW
    redis.call('RPUSH', K_PENDING, id)
    pushed = pushed + 1
    if msg == '' then msg = 'interrupted by worker shutdown' end
    lines = lines .. event_line('interrupted', state, job, msg)
    job.w = nil
  else
    lines = lines .. finish(id, job, state, msg, err)
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
  elseif job.lt == token and job.lo == ARGV[i + 2] then
    -- A retried call whose first attempt was applied: report success, change nothing.
    out[#out + 1] = {1, job.b or '', job.s .. ':' .. job.q}
  elseif job.s ~= 'active' or job.tk ~= token then
    append_events(K_EVENTS, id, event_line('ack_refused', job.s, {a = job.a},
      'acknowledgement refused: this worker no longer holds the lease',
      {outcome = ARGV[i + 2]}))
    out[#out + 1] = {0, job.b or '', job.s .. ':' .. job.q}
  else
    local state = target(ARGV[i + 2])
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
