-- steps.lua: record steps of a running job, fenced by its lease token (storage/durable.py,
-- DurableStore.save_steps): a name recorded final already keeps its record.
--- @include "_fields"
--- @include "_record"
--- @include "_durable_write"
--- @key state
--- @key steps
--- @key waits
--- @key inbox
--- @key listeners
-- ARGV: 1 now|'', 2 queue, 3 job id, 4 token, then per step: name, record JSON, origin|'',
--       event line|'' (appended to the job's log when the record is written)
-- Returns: 1 recorded, 0 refused (no such job, or the lease is not this token's)
local id = ARGV[3]
local f, events = load(K_STATE, id)
if not f or f[F_STATE] ~= 'active' or f[F_TOKEN] ~= ARGV[4] then return 0 end
local lines = {}
for i = 5, #ARGV, 4 do
  if put_step(id, ARGV[i], ARGV[i + 1], ARGV[i + 2]) then lines[#lines + 1] = ARGV[i + 3] end
end
if #lines > 0 then save(K_STATE, id, f, events .. table.concat(lines)) end
return 1
