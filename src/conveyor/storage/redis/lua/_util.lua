-- _util.lua: small helpers with no knowledge of jobs.
--- @include "_notify"
local function num(value)
  return tonumber(value) or 0
end

-- Variadic commands over long argument lists, in chunks below Lua's unpack limit.
local function bulk(command, K_KEY, args)
  local n = #args
  for i = 1, n, 2000 do
    redis.call(command, K_KEY, unpack(args, i, math.min(i + 1999, n)))
  end
end

-- The values of a "\n"-joined argument (a bulk call sends one string, not one per job).
local function split_lines(text)
  local parts, pos = {}, 1
  if text == '' then return parts end
  while true do
    local nl = string.find(text, '\n', pos, true)
    if not nl then
      parts[#parts + 1] = string.sub(text, pos)
      return parts
    end
    parts[#parts + 1] = string.sub(text, pos, nl - 1)
    pos = nl + 1
  end
end
