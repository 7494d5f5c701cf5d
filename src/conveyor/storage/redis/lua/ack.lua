-- ack.lua: apply workers' outcomes for jobs of one queue, each fenced by its lease token.
--- @include "_clock"
--- @include "_util"
--- @include "_fields"
--- @include "_record"
--- @include "_events"
--- @include "_counts"
--- @include "_flow"
--- @include "_lineup"
--- @include "_durable"
--- @include "_breaker_acks"
--- @key state
--- @key active
--- @key pending
--- @key retrying
--- @key succeeded
--- @key failed
--- @key dead
--- @key cancelled
--- @key meta
--- @key history    hash: the ring of per-minute outcome counts (_counts.lua)
--- @key notify
--- @key results    hash id -> result JSON
--- @key messages   hash id -> last message
--- @key jobs       static JSON, read for flow control
--- @key flow       hash
--- @key waiters    set: ids of jobs a caller waits on (JobRef.aresult)
--- @key lineup     zset: lined pending jobs (_lineup.lua)
--- @key lined      hash id -> its lineup entry
--- @key aging      zset id -> when aging raises it next
--- @key scheduled  zset run_at: suspended durable jobs (docs/durable.md), snoozed jobs
--- @key steps
--- @key waits
--- @key inbox
--- @key listeners
--- @key breakers   hash: breaker key -> its record (_breakers.lua)
--- @key breaker_ends zset: closed breaker key -> when its failure log runs out
-- ARGV: 1 now|'', 2 queue, 3 mode: "plan" (apply jobs without a batch, report batch jobs)
--       or "apply" (apply everything), then 10 per ack: id, token, outcome, result|'',
--       message|'', error data JSON|'', retry_in|'', own events NDJSON|'', progress "d/t"|'',
--       "0" if the job never ran (it could not be prepared: no breaker counts it) or ''
-- A job whose cancellation was requested ends cancelled when its attempt did not finish by
-- itself (retry, dead, interrupted, suspended): see storage/rules.py, the same rule in Python.
-- A suspended durable job is scheduled until retry_in (its wake time, absolute), or pending
-- at once when its wait was answered while it left its worker (_durable.lua). A snoozed job
-- (RetryAfter) is scheduled retry_in seconds from now (relative), its errors untouched.
-- Returns: per ack {code, batch id|'', "state:queue"|'' [, frees]}: 1 applied (or the same
--          outcome was applied before with this token: a retried call), 0 refused (stale
--          lease; an ack_refused event is recorded), 2 valid but its batch must be updated
--          first; an applied ack adds 1 when its run's end freed a key (idle workers woken
--          here on one server, by the caller's ring on Cluster), else 0.
local mode = ARGV[3]
local TARGET = {retry = 'retrying', interrupted = 'pending', succeeded = 'succeeded',
                failed = 'failed', dead = 'dead', cancelled = 'cancelled',
                suspended = 'scheduled', snooze = 'scheduled'}
local FINAL = {succeeded = {}, failed = {}, dead = {}, cancelled = {}}
local CANCELS = {retrying = true, dead = true, pending = true, scheduled = true}
local WOKEN = 'woken: what it waited for arrived'  -- storage/durable.py's WOKEN_MESSAGE
local cur, touched, unleased, retrying, requeued, results, messages = {}, {}, {}, {}, {}, {}, {}
local relined = 0  -- jobs back to pending in their lineup (_lineup.lua), not the list
-- keyed runs that ended (not back to pending): each frees what held its key's other jobs
-- (a concurrency slot, an ordered key's turn, a breaker's probe), so it wakes a worker
local freed = 0
local scheduled = {}  -- suspended and snoozed jobs: score their run_at
local cleared = {}
local any_breaker = false  -- whether a job with a breaker key was acknowledged

local function get(id, raw)
  local job = cur[id]
  if job == nil and raw then
    local f, events = parse(raw)
    job = {f = f, events = events}
    cur[id] = job
  end
  return job
end

local function put(id, job)
  if not touched[id] then
    touched[id] = true
    touched[#touched + 1] = id
  end
  cur[id] = job
end

-- The worker owns the retry policy: it sends "dead" once attempts are exhausted.
local function outcome_event(f, state, msg, err, delay, outcome)
  if state == 'retrying' then
    local data = '{"retry":true,"retry_in":' .. delay
    if err ~= '' and err ~= '{}' then data = data .. ',' .. string.sub(err, 2) else
      data = data .. '}' end
    return event_line('error', state, f, msg, data)
  elseif state == 'scheduled' and outcome == 'snooze' then  -- RetryAfter: not an error
    return event_line('snoozed', state, f, msg, '{"retry_after":' .. delay .. '}')
  elseif state == 'scheduled' or delay == 'woken' then
    local line = event_line('suspended', 'scheduled', f, msg, '{"until":' .. f[F_RUN_AT] .. '}')
    if delay ~= 'woken' then return line end
    return line .. event_line('woken', 'pending', f, WOKEN)
  elseif state == 'pending' then
    if msg == '' then msg = 'interrupted by worker shutdown' end
    return event_line('interrupted', state, f, msg)
  elseif state == 'succeeded' then
    return event_line(state, state, f, msg)
  end
  return event_line(state, state, f, msg, err)
end

local function apply(i, id, job, state)
  local f = job.f
  local frees = 0
  local msg, err = ARGV[i + 4], ARGV[i + 5]
  local outcome = ARGV[i + 2]
  local delay = ''
  if outcome == 'suspended' and state ~= 'cancelled' then
    f[F_RUN_AT] = string.format('%.6f', tonumber(ARGV[i + 6]) or NOW)
    if state == 'pending' then delay = 'woken' end  -- its wait was answered meanwhile
  end
  if state == 'cancelled' and TARGET[outcome] ~= 'cancelled' then
    -- a cancel request ended it; the attempt still counts as an error when it was one
    if msg ~= '' then msg = 'cancelled: ' .. msg else msg = 'cancelled while running' end
    if outcome == 'retry' or (outcome == 'dead' and err ~= '') then
      f[F_ERRORS] = tostring(num(f[F_ERRORS]) + 1)
    end
  end
  if ARGV[i + 8] ~= '' then f[F_PROGRESS] = ARGV[i + 8] end
  unleased[#unleased + 1] = id
  if ARGV[i + 3] ~= '' and state == 'succeeded' then
    results[#results + 1] = id
    results[#results + 1] = ARGV[i + 3]
  end
  if delay == 'woken' then msg = WOKEN end
  if msg ~= '' then
    messages[#messages + 1] = id
    messages[#messages + 1] = msg
  else  -- message is the text of the last outcome: none (a success) clears it
    cleared[#cleared + 1] = id
  end
  if state == 'retrying' then
    f[F_ERRORS] = tostring(num(f[F_ERRORS]) + 1)
    local seconds = math.max(tonumber(ARGV[i + 6]) or 0, 0)
    delay = tostring(seconds)
    f[F_RUN_AT] = string.format('%.6f', NOW + seconds)
    retrying[#retrying + 1] = NOW + seconds
    retrying[#retrying + 1] = id
    count('r', f[F_NAME])
  elseif state == 'pending' then
    f[F_PENDING_SINCE] = NOWS
    if lined(f) then
      line_push(id)
      relined = relined + 1
    else
      requeued[#requeued + 1] = id
    end
  elseif state == 'scheduled' then
    if outcome == 'snooze' then  -- due again later, the retry budget untouched
      local seconds = math.max(tonumber(ARGV[i + 6]) or 0, 0)
      delay = tostring(seconds)
      f[F_RUN_AT] = string.format('%.6f', NOW + seconds)
    end
    scheduled[#scheduled + 1] = tonumber(f[F_RUN_AT])
    scheduled[#scheduled + 1] = id
  else
    f[F_FINISHED_AT] = NOWS
    local index = FINAL[state]
    index[#index + 1] = NOW
    index[#index + 1] = id
    if state == 'succeeded' then count('p', f[F_NAME])
    elseif state == 'failed' then count('f', f[F_NAME])
    elseif state == 'dead' then
      count('d', f[F_NAME])
      if err ~= '' then f[F_ERRORS] = tostring(num(f[F_ERRORS]) + 1) end
    end
  end
  local fl = flow_of(K_JOBS, id, f)
  if fl then
    flow_release(K_FLOW, id, fl, true, TERMINAL[state])
    if state ~= 'pending' and (type(fl.concurrency_key) == 'string'
        or type(fl.order_key) == 'string' or type(fl.breaker_key) == 'string') then
      freed = freed + 1
      frees = 1
    end
  end
  local line = outcome_event(f, state, delay == 'woken' and ARGV[i + 4] or msg, err, delay,
                             outcome)
  if fl and type(fl.breaker_key) == 'string' and ARGV[i + 9] ~= '0' then
    any_breaker = true  -- a cancel request that ended it leaves its breaker as it was
    local ended = (state == 'cancelled' and outcome ~= 'cancelled') and 'cancelled' or outcome
    line = line .. breaker_acks().ack(fl.breaker_key, fl, id, f, ended, state, err,
                                      ARGV[i + 4], ARGV[i + 6])
  end
  f[F_LAST_TOKEN], f[F_LAST_OUTCOME], f[F_TOKEN], f[F_LEASE_EXPIRES], f[F_STATE] = f[F_TOKEN], ARGV[i + 2], '', '', state
  if state == 'pending' then f[F_WORKER] = '' end
  job.events = job.events .. ARGV[i + 7] .. line
  put(id, job)
  return frees
end

local ids = {}
for i = 4, #ARGV, 10 do ids[#ids + 1] = ARGV[i] end
local raws = {}
if #ids > 0 then raws = redis.call('HMGET', K_STATE, unpack(ids)) end

local out = {}
for k = 1, #ids do
  local i = 4 + (k - 1) * 10
  local id, token, outcome = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local job = get(id, raws[k])
  if not job then
    out[#out + 1] = {0, '', ''}
  elseif job.f[F_LAST_TOKEN] == token and job.f[F_LAST_OUTCOME] == outcome then
    out[#out + 1] = {1, job.f[F_BATCH], job.f[F_STATE] .. ':' .. ARGV[2]}
  elseif job.f[F_STATE] ~= 'active' or job.f[F_TOKEN] ~= token then
    job.events = job.events .. event_line('ack_refused', job.f[F_STATE], {[F_WORKER] = '', [F_ATTEMPTS] = job.f[F_ATTEMPTS]},
      'acknowledgement refused: this worker no longer holds the lease',
      '{"outcome":' .. jstr(outcome) .. '}')
    put(id, job)
    out[#out + 1] = {0, job.f[F_BATCH], job.f[F_STATE] .. ':' .. ARGV[2]}
  else
    local state = TARGET[outcome] or 'failed'
    if job.f[F_CANCEL_REQUESTED] ~= '' and CANCELS[state] then state = 'cancelled' end
    if outcome == 'suspended' and state == 'scheduled' and durable_answered(id) then
      state = 'pending'
    end
    if job.f[F_BATCH] ~= '' and mode == 'plan' then
      out[#out + 1] = {2, job.f[F_BATCH], state .. ':' .. ARGV[2]}
    else
      local frees = apply(i, id, job, state)
      out[#out + 1] = {1, job.f[F_BATCH], state .. ':' .. ARGV[2], frees}
    end
  end
end

local states = {}
for _, id in ipairs(touched) do
  states[#states + 1] = id
  states[#states + 1] = pack(cur[id].f, cur[id].events)
end
bulk('HSET', K_STATE, states)
bulk('ZREM', K_ACTIVE, unleased)
bulk('ZADD', K_RETRYING, retrying)
bulk('ZADD', K_SCHEDULED, scheduled)
bulk('ZADD', K_SUCCEEDED, FINAL.succeeded)
bulk('ZADD', K_FAILED, FINAL.failed)
bulk('ZADD', K_DEAD, FINAL.dead)
bulk('ZADD', K_CANCELLED, FINAL.cancelled)
bulk('LPUSH', K_PENDING, requeued)  -- at the tail, as on every backend
bulk('HSET', K_RESULTS, results)
bulk('HSET', K_MESSAGES, messages)
bulk('HDEL', K_MESSAGES, cleared)
flush_counts(K_META)
if any_breaker then breaker_acks().forget() end
notify(K_NOTIFY, #requeued + relined + freed)
-- Wake callers waiting on a job that just ended: one SCARD per call when nobody waits; the
-- ids are published on the channel named as the waiters set (a channel is not a key: on
-- Cluster a PUBLISH reaches subscribers on every node).
if redis.call('SCARD', K_WAITERS) > 0 then
  for _, index in pairs(FINAL) do
    for j = 2, #index, 2 do
      if redis.call('SISMEMBER', K_WAITERS, index[j]) == 1 then
        redis.call('PUBLISH', K_WAITERS, index[j])
      end
    end
  end
end
return out
