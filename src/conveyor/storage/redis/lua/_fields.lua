-- _fields.lua: the positions of the fields in a job's state line (see _record.lua), and the
-- values of its state field. The one definition of the order is STATE_FIELDS in
-- conveyor/storage/redis/codec.py: F_<NAME> is the position of <name> there, and scripts.py
-- refuses to load the scripts when the two disagree.
local F_STATE = 1  -- one of STATES below
local F_CREATED_AT = 2  -- epoch seconds
local F_ATTEMPTS = 3  -- attempts started
local F_ERRORS = 4  -- attempts that ended in an error
local F_RECOVERIES = 5  -- times its lease expired and it was put back
local F_TOKEN = 6  -- the lease token of the running attempt ('' when not active)
local F_WORKER = 7  -- the worker running it
local F_LEASE_EXPIRES = 8  -- epoch seconds
local F_STARTED_AT = 9
local F_FINISHED_AT = 10
local F_PENDING_SINCE = 11  -- when it last became pending (repair.lua's fence)
local F_RUN_AT = 12  -- when a scheduled or retrying job is due
local F_LAST_TOKEN = 13  -- the token and outcome of its last acknowledgement, so that
local F_LAST_OUTCOME = 14  -- a retried ack call is recognised and answered the same way
local F_CANCEL_REQUESTED = 15  -- '1' once cancel was asked while it was active
local F_PROGRESS = 16  -- "done/total"
local F_NAME = 17  -- the job name (outcome counters are kept per name)
local F_BATCH = 18  -- batch id or ''
local F_DEADLINE = 19  -- epoch seconds or ''
local F_CREATED_SCHEDULED = 20  -- '1' when it was enqueued scheduled (its first event)
-- '1' when its static JSON has limits to read (see _flow.lua); for a member of an
-- aggregation group 'g' then its key, grace, max_delay and max_size joined by \31
local F_FLOW_CONTROLLED = 21
local NFIELDS = 21

local STATES = {scheduled = true, pending = true, active = true, retrying = true,
  succeeded = true, failed = true, dead = true, cancelled = true, waiting = true,
  aggregating = true}
local TERMINAL = {succeeded = true, failed = true, dead = true, cancelled = true}
local WAITING = {pending = true, scheduled = true, retrying = true, waiting = true,
  aggregating = true}
