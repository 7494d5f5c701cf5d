-- _events.lua: lines of a job's event log (NDJSON, appended to its state entry).
--- @include "_clock"
--- @include "_fields"
local JSON_CACHE = {}
local function jstr(value)
  local out = JSON_CACHE[value]
  if not out then
    out = cjson.encode(value)
    JSON_CACHE[value] = out
  end
  return out
end

-- One NDJSON event line; data_json is JSON text already.
local function event_line(kind, state, f, msg, data_json)
  local out = '{"t":' .. NOWS .. ',"k":"' .. kind .. '"'
  if state then out = out .. ',"s":"' .. state .. '"' end
  if msg and msg ~= '' then out = out .. ',"m":' .. cjson.encode(msg) end
  if f and f[F_WORKER] ~= '' then out = out .. ',"w":' .. jstr(f[F_WORKER]) end
  if f and f[F_ATTEMPTS] ~= '0' and f[F_ATTEMPTS] ~= '' then
    out = out .. ',"a":' .. f[F_ATTEMPTS]
  end
  if data_json and data_json ~= '' then out = out .. ',"d":' .. data_json end
  return out .. '}\n'
end
