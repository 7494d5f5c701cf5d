-- _breaker_acks.lua: what an outcome does to its job's breaker, in the call that records the
-- outcome (ack.lua): storage/breakers.py's breaker_touch and after_ack, the rules every
-- store applies, spelled in Lua. The record is _breakers.lua's; as there, the functions are
-- made by the first job of a call that has a breaker key (breaker_acks()).
--- @include "_clock"
--- @include "_util"
--- @include "_fields"
--- @include "_events"
--- @include "_breakers"
--- @needs-keys breakers breaker_ends
-- K_BREAKER_ENDS (zset closed key -> when the newest error of its log leaves the window)
-- lets an ack forget up to BRK_FORGET keys that stopped failing, so the hash stays bounded.
local BRK_FORGET = 4
local BRK_REASON = 200  -- characters of a reason (breakers.py REASON_CHARS)
local brk_acks_made

local function breaker_acks()
  if brk_acks_made then return brk_acks_made end
  local B = breakers()
  local A = {}
  brk_acks_made = A

  local function seconds(s) return string.format('%g', s) end  -- Python's f"{s:g}"

  -- breakers.py _error_line: the error on one line, "Type: message". `msg` is what
  -- ack.lua got: the ack's message, or else the error's.
  local function error_line(err, msg)
    local ok, e = pcall(cjson.decode, err)
    local kind = ok and type(e) == 'table' and type(e.type) == 'string' and e.type or nil
    local text = msg
    if text == '' then text = kind and (kind .. ': ') or 'error' end
    if kind and string.sub(text, 1, #kind) ~= kind then text = kind .. ': ' .. text end
    text = string.gsub(string.gsub(text, '%s+', ' '), '^ ', '')
    return (B.chars(string.gsub(text, ' $', ''), BRK_REASON))
  end

  -- Keep the errors within the window (NOW - within, NOW], as the rate log does; returns
  -- whether one left.
  local function prune(b)
    local cut, kept = NOW - b.within, {}
    for _, t in ipairs(b.log) do
      if t > cut then kept[#kept + 1] = t end
    end
    local changed = #kept ~= #b.log
    b.log = kept
    return changed
  end

  local function open(b, wait, reason)
    b.state, b.opened_at, b.probe_id = 'open', NOWS, ''
    b.probe_at = string.format('%.6f', NOW + wait)
    b.trips = b.trips + 1
    b.reason = (B.chars(reason, BRK_REASON))
  end

  local function save(key, b)
    B.write(key, b)
    if b.state == 'closed' and #b.log > 0 then
      redis.call('ZADD', K_BREAKER_ENDS, b.log[#b.log] + b.within, key)
    else
      redis.call('ZREM', K_BREAKER_ENDS, key)
    end
  end

  -- The outcome of job `id` (state line `f`) of breaker key `key`, its flow settings `fl`:
  -- `outcome` as applied (a cancel request's end is 'cancelled'), `state` the job's new
  -- state, `err` the error JSON or '', `msg` the message ack.lua got, `wait` retry_in (a
  -- snooze's seconds). Counted errors: a retry, and a dead end with an error. Returns the
  -- job's 'breaker' event line, or ''.
  function A.ack(key, fl, id, f, outcome, state, err, msg, wait)
    local counted = outcome == 'retry' or (outcome == 'dead' and err ~= '')
    local answer = outcome == 'succeeded' or outcome == 'failed'
    if not (counted or answer or outcome == 'snooze') then return '' end
    local b = B.read(key)
    local within = num(fl.breaker_within)
    if within > 0 then b.within = within end
    local probe = b.state == 'half_open' and b.probe_id == id
    local shown, note = B.shown(key), nil
    if counted then
      prune(b)
      b.log[#b.log + 1] = NOW
      if probe then
        open(b, num(fl.breaker_cool_down), 'probe failed: ' .. error_line(err, msg))
        note = 'breaker ' .. shown .. ' opened again: probe failed'
      elseif b.state == 'closed' and #b.log >= num(fl.breaker_open_after) then
        open(b, num(fl.breaker_cool_down), #b.log .. ' errors within ' .. seconds(b.within)
          .. 's; last: ' .. error_line(err, msg))
        note = 'breaker ' .. shown .. ' opened: ' .. b.reason
      end
    elseif answer and probe then
      b.state, b.opened_at, b.probe_at, b.probe_id, b.log, b.reason =
        'closed', '', '', '', {}, ''
      note = 'breaker ' .. shown .. ' closed: probe succeeded'
    elseif outcome == 'snooze' then
      local s = math.max(num(wait), 0)
      if b.state == 'closed' then b.opened_at, b.trips = NOWS, b.trips + 1 end
      b.state, b.probe_id = 'open', ''
      b.probe_at = string.format('%.6f', math.max(num(b.probe_at), NOW + s))
      b.reason = 'paused ' .. seconds(s) .. 's by RetryAfter'
      note = 'breaker ' .. shown .. ' paused for ' .. seconds(s) .. 's (RetryAfter)'
    elseif b.state ~= 'closed' or not prune(b) then
      return ''  -- an answer of a job that is not the probe: nothing to write
    end
    if b.state == 'closed' then prune(b) end
    save(key, b)
    if not note then return '' end
    return event_line('breaker', state, {[F_WORKER] = '', [F_ATTEMPTS] = f[F_ATTEMPTS]}, note)
  end

  -- Forget up to BRK_FORGET closed keys whose failure log ran out.
  function A.forget()
    local idle = redis.call('ZRANGEBYSCORE', K_BREAKER_ENDS, '-inf', NOW, 'LIMIT', 0,
      BRK_FORGET)
    for _, key in ipairs(idle) do
      local b = B.read(key)
      prune(b)
      save(key, b)
    end
  end

  return A
end
