-- _notify.lua: the wake-up of idle workers, apart from _util.lua so that enqueue_one.lua
-- defines nothing else (a script defines every function it splices, on every call).

-- Wake up to n idle workers blocked on a wake-up list (a queue's notify list, or its
-- doorbell on Cluster); the list never holds more than 16 tokens.
local function notify(K_NOTIFY, n)
  if n > 0 and redis.call('LLEN', K_NOTIFY) < 16 then
    for _ = 1, math.min(n, 16) do redis.call('LPUSH', K_NOTIFY, '1') end
  end
end
