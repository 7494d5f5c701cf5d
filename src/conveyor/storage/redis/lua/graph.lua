-- graph.lua: a workflow's graph counters (storage/redis/graph.py; the same rules as
-- storage/graph.py, which memory, SQLite and PostgreSQL run).
--- @include "_util"
--- @key graph   hash "n:<id>" Node JSON, "u:<id>" unsettled parents, "s:<id>" settled with,
--               "e:<id>" "fail"/"skip" when the graph ended the job, "r:<id>" '1' once
--               it released it (graph.py writes both)
--- @key marks   hash job id -> mark counter (batch.lua)
-- ARGV: 1 mode:
--   "settle", then triples: node id, the job's state as just read ('gone': no such job), its
--     mark counter read before that. A node whose mark is no longer at that count is left
--     alone: its job moved since (or another process settled that move and removed the
--     mark), so the state read may be stale, and acting on it could undo a newer settle (a
--     parent counted up again with no mark left to count it down: its children wait forever).
--     Whoever holds the newer mark settles it. Gives {children whose parents all settled (to
--     decide; those decided before too, so a crash between settling and moving them is
--     redone; and a marked node itself, back to waiting by a retry by hand, whose parents
--     have all settled), children the graph ended that a re-opened parent takes back}.
--   "done", then pairs: node id, the mark counter read before settling: the marks still at
--     that count are removed (a mark bumped meanwhile stays, to be settled again).
--   "attach", then node ids just stored by a running job of the workflow: each is linked
--     into its parents' children ("n:<parent>") and its "u:" set to its parents not settled
--     yet, in this one step, so a parent settling meanwhile is counted once (here or by its
--     mark). Gives the nodes whose parents have all settled (to decide).
-- Returns: for "settle" the two lists above; for "done" how many marks were removed; for
-- "attach" the list above.
-- A node remembers the state it settled its children with ("s:"), so a replay counts nothing
-- twice: only a change between "not terminal" and "terminal" (or between succeeded and not)
-- moves the children's counters.
local TERMINAL = {succeeded = true, failed = true, dead = true, cancelled = true}
local mode = ARGV[1]
if mode == 'done' then
  local removed = 0
  for i = 2, #ARGV, 2 do
    if redis.call('HGET', K_MARKS, ARGV[i]) == ARGV[i + 1] then
      removed = removed + redis.call('HDEL', K_MARKS, ARGV[i])
    end
  end
  return removed
end

if mode == 'attach' then
  local decided = {}
  for i = 2, #ARGV do
    local id = ARGV[i]
    local ok, node = pcall(cjson.decode, redis.call('HGET', K_GRAPH, 'n:' .. id) or '')
    if ok and type(node) == 'table' and type(node.p) == 'table' then
      local left = 0
      for _, parent in ipairs(node.p) do
        local raw = redis.call('HGET', K_GRAPH, 'n:' .. parent)
        local fine, pnode = pcall(cjson.decode, raw or '')
        if fine and type(pnode) == 'table' then
          local kids = type(pnode.c) == 'table' and pnode.c or {}
          local linked = false
          for _, kid in ipairs(kids) do if kid == id then linked = true end end
          if not linked then
            kids[#kids + 1] = id
            pnode.c = kids
            redis.call('HSET', K_GRAPH, 'n:' .. parent, cjson.encode(pnode))
          end
          if redis.call('HEXISTS', K_GRAPH, 's:' .. parent) == 0 then left = left + 1 end
        end
      end
      redis.call('HSET', K_GRAPH, 'u:' .. id, left)
      if #node.p > 0 and left == 0 then decided[#decided + 1] = id end
    end
  end
  return decided
end

local ready, reopen = {}, {}
local function children(id)
  local raw = redis.call('HGET', K_GRAPH, 'n:' .. id)
  if not raw then return nil end
  local ok, node = pcall(cjson.decode, raw)
  if not ok or type(node) ~= 'table' or type(node.c) ~= 'table' then return {} end
  return node.c
end
local function count(child, by)
  if redis.call('HEXISTS', K_GRAPH, 'n:' .. child) == 0 then return nil end
  return redis.call('HINCRBY', K_GRAPH, 'u:' .. child, by)
end
local function ended(child)
  if redis.call('HEXISTS', K_GRAPH, 'e:' .. child) == 1 then reopen[#reopen + 1] = child end
end
-- A node retried by hand back to waiting (storage/graph_retry.py) whose parents have all
-- settled: decided again at once, as a child reaching zero is.
local function rewaits(id)
  local ok, node = pcall(cjson.decode, redis.call('HGET', K_GRAPH, 'n:' .. id) or '')
  if not ok or type(node) ~= 'table' or type(node.p) ~= 'table' or #node.p == 0 then
    return false
  end
  return tonumber(redis.call('HGET', K_GRAPH, 'u:' .. id) or '1') <= 0
end

for i = 2, #ARGV, 3 do
  local id, state = ARGV[i], ARGV[i + 1]
  local kids = children(id)
  local settled = redis.call('HGET', K_GRAPH, 's:' .. id)
  local current = redis.call('HGET', K_MARKS, id)
  if kids and current == ARGV[i + 2] and not (state == 'gone' and settled) then
    if state == 'gone' then state = 'cancelled' end  -- deleted unfinished: settles cancelled
    local terminal = TERMINAL[state]
    -- running again (a retry by hand): no longer a job the graph ended
    if not terminal then redis.call('HDEL', K_GRAPH, 'e:' .. id) end
    if settled and (not terminal or (settled == 'succeeded') ~= (state == 'succeeded')) then
      redis.call('HDEL', K_GRAPH, 's:' .. id)
      for _, child in ipairs(kids) do
        if count(child, 1) then ended(child) end
      end
      settled = false
    elseif not settled and not terminal then
      for _, child in ipairs(kids) do ended(child) end  -- a re-open cut short: redo its moves
    end
    if terminal and not settled then
      redis.call('HSET', K_GRAPH, 's:' .. id, state)
      for _, child in ipairs(kids) do
        local left = count(child, -1)
        if left and left <= 0 then ready[#ready + 1] = child end
      end
    elseif terminal then
      for _, child in ipairs(kids) do
        local left = tonumber(redis.call('HGET', K_GRAPH, 'u:' .. child) or '1')
        if left <= 0 then ready[#ready + 1] = child end
      end
    end
    if state == 'waiting' and rewaits(id) then ready[#ready + 1] = id end
  end
end
return {ready, reopen}
