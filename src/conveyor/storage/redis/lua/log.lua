-- log.lua: append a running job's own messages and progress, fenced by its lease token.
--- @include "_fields"
--- @include "_record"
--- @key state
-- ARGV: 1 now|'', 2 queue, 3 job id, 4 token, 5 events NDJSON|'', 6 progress "done/total"|''
-- Returns: 1 stored, 0 refused (no such job, or the lease is not this token's).
local id = ARGV[3]
local f, events = load(K_STATE, id)
if not f or f[F_STATE] ~= 'active' or f[F_TOKEN] ~= ARGV[4] then return 0 end
if ARGV[6] ~= '' then f[F_PROGRESS] = ARGV[6] end
save(K_STATE, id, f, events .. ARGV[5])
return 1
