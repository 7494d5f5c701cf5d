-- ring.lua: wake idle workers on Redis Cluster, where one BLPOP cannot watch the notify lists
-- of queues in different slots: every queue also has a doorbell list, all in one slot.
--- @include "_notify"
--- @key doorbell  list, of one queue
-- ARGV: 1 now|'', 2 how many jobs became ready
-- Returns: 1
notify(K_DOORBELL, tonumber(ARGV[2]))
return 1
