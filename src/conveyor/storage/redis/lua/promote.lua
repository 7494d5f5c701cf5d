-- promote.lua: move scheduled and retrying jobs of one queue whose time has come to pending
-- (a member of an aggregation group back into its group), then send a lead for each due
-- group (storage/aggregation.py's join and flush).
--- @include "_clock"
--- @include "_util"
--- @include "_fields"
--- @include "_record"
--- @include "_events"
--- @include "_moves"
--- @include "_groups"
--- @include "_lineup"
--- @key scheduled      zset run_at
--- @key retrying       zset run_at
--- @key pending        list
--- @key state
--- @key notify
--- @key aggregating    zset member id -> arrival
--- @key groups         hash group id -> record
--- @key group_due      zset group id -> flush time
--- @key group_members  zset lex entries of members by group and arrival
--- @key jobs           hash static JSON (a lined job's priority and key)
--- @key meta           hash: the lineup's arrival counter
--- @key lineup         zset: lined pending jobs (_lineup.lua)
--- @key lined          hash id -> its lineup entry
--- @key aging          zset id -> when aging raises it next
-- ARGV: 1 now|'', 2 queue, 3 limit
-- Returns: {how many moved, batch moves {batch id, job id, "state:queue"}, how many of them
--          went pending}
local limit = tonumber(ARGV[3])
local moved, ready, moves = 0, 0, {}
local ALIVE = {pending = true, scheduled = true, retrying = true, active = true}
for _, K_FROM in ipairs({K_SCHEDULED, K_RETRYING}) do
  if moved < limit then
    local ids = redis.call('ZRANGEBYSCORE', K_FROM, '-inf', NOW, 'LIMIT', 0, limit - moved)
    for _, id in ipairs(ids) do
      redis.call('ZREM', K_FROM, id)
      local f, events = load(K_STATE, id)
      if f and (f[F_STATE] == 'scheduled' or f[F_STATE] == 'retrying') then
        f[F_PENDING_SINCE] = NOWS
        f[F_WORKER] = ''
        if group_spec(f) and not join(f, id) then
          f[F_STATE] = 'aggregating'
          add_member(f, id)
        else
          f[F_STATE] = 'pending'
          if lined(f) then line_push(id) else redis.call('LPUSH', K_PENDING, id) end
          ready = ready + 1
        end
        save(K_STATE, id, f, events .. event_line('enqueued', f[F_STATE], f))
        note_batch(moves, f, id, f[F_STATE])
        moved = moved + 1
      end
    end
  end
end

write_groups()  -- the members that joined are in the index the flush reads
-- Due groups: a lead is sent unless the last one is still on its way to its gather.
for _, gid in ipairs(redis.call('ZRANGEBYSCORE', K_GROUP_DUE, '-inf', NOW, 'LIMIT', 0, limit)) do
  local g = load_group(gid)
  local alive = false
  if g and g.lead then
    local lf = load(K_STATE, g.lead)
    alive = lf ~= nil and ALIVE[lf[F_STATE]] == true
  end
  if not g then
    drop_group(gid)
  elseif alive then
    g.flush = NOW + RECHECK
    save_group(gid, g)
  else
    local ids, entries = oldest(gid, 1)
    local id = ids[1]
    if not id then
      drop_group(gid)
    else
      redis.call('ZREM', K_GROUP_MEMBERS, entries[1])
      redis.call('ZREM', K_AGGREGATING, id)
      local f, events = load(K_STATE, id)
      if f and f[F_STATE] == 'aggregating' then
        f[F_STATE], f[F_PENDING_SINCE] = 'pending', NOWS
        save(K_STATE, id, f, events .. event_line('flushed', 'pending', f,
                                                  "its group is due: it leads the group's run"))
        redis.call('LPUSH', K_PENDING, id)
        note_batch(moves, f, id, 'pending')
        moved, ready = moved + 1, ready + 1
        g.lead, g.size = id, math.max(g.size - g.max, 0)
      end  -- else a stale entry, dropped: the group stays due for the next call
      if g.lead == id then g.flush = NOW + RECHECK end
      save_group(gid, g)
    end
  end
end
write_groups()
line_age(limit)  -- then aging: lined jobs whose time came gain priority
notify(K_NOTIFY, ready)
return {moved, moves, ready}
