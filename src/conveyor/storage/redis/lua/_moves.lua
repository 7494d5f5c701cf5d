-- _moves.lua: batch bookkeeping is a second call (batch.lua); a script reports which jobs of
-- a batch it moved, as {batch id, job id, "state:queue"} (ARGV[2] is the queue).
--- @include "_fields"
local function note_batch(list, f, id, state)
  if f[F_BATCH] ~= '' then list[#list + 1] = {f[F_BATCH], id, state .. ':' .. ARGV[2]} end
end
