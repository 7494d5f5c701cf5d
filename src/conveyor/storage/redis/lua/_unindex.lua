-- _unindex.lua: take jobs out of the index their state keeps them in, for the operator
-- scripts that stop or delete jobs in any state (cancel, kill, delete).
--- @include "_fields"
--- @include "_groups"
--- @include "_lineup"
--- @needs-keys parked published scheduled active retrying succeeded failed dead cancelled meta
--- @needs-keys waiting lineup lined aging
local INDEX = {scheduled = K_SCHEDULED, active = K_ACTIVE, retrying = K_RETRYING,
  succeeded = K_SUCCEEDED, failed = K_FAILED, dead = K_DEAD, cancelled = K_CANCELLED,
  waiting = K_WAITING, aggregating = K_AGGREGATING}

-- Pending is a list, the other states are zsets, a pending job held back by flow control
-- waits in the parked zset instead of the list, one handed to a broker's relay in the
-- published zset, and a lined one in its queue's lineup (_lineup.lua).
-- A pending job's list entry is left in place: LREM walks the whole list, which made cancelling
-- a big batch quadratic. dequeue.lua drops the entry when it pops it (the record is no longer
-- pending) and the meta field "stale" counts such entries until then, so sizes stay exact:
-- `stale` counts the entries this call leaves behind, and flush_stale adds them at the end.
-- A record in no known state may be in any index: every zset is cleared (O(log n) each).
local stale = 0
local function unindex(state, id, f)
  if state == 'aggregating' or (f and not INDEX[state] and state ~= 'pending') then
    remove_member(f, id)  -- and out of its group's entries
  end
  if state == 'pending' then
    if not unline(id) and redis.call('ZREM', K_PARKED, id) == 0
        and redis.call('ZREM', K_PUBLISHED, id) == 0 then
      stale = stale + 1  -- left in the list
    end
  elseif INDEX[state] then
    local K_INDEX = INDEX[state]
    redis.call('ZREM', K_INDEX, id)
  else
    for _, K_INDEX in pairs(INDEX) do redis.call('ZREM', K_INDEX, id) end
    redis.call('ZREM', K_PARKED, id)
    redis.call('ZREM', K_PUBLISHED, id)
    unline(id)
  end
end

local function flush_stale()
  if stale > 0 then redis.call('HINCRBY', K_META, 'stale', stale) end
end

-- A record in no known state (damaged) can be cancelled, killed or deleted like a waiting job,
-- so that an operator can always get it out of the way.
local function stoppable(state) return WAITING[state] or not STATES[state] end
