-- _clock.lua: the time of this call. ARGV[1] of every script is the storage clock's "now" in
-- epoch seconds (a test's clock), or '' for the server's TIME.
local function server_now()
  if ARGV[1] ~= '' then return tonumber(ARGV[1]) end
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1000000
end
local NOW = server_now()
local NOWS = string.format('%.6f', NOW)  -- as stored in state lines and events
