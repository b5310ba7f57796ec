-- Give the lock up if it still holds our value. An unmarked value (nobody listens: see
-- queue.lua) is simply deleted, before anything else of the script runs; a marked one is
-- handed to the first live waiter, or deleted when nobody waits, and subscribers of
-- `<lock key>:released` (WATCH/MULTI and multi-lock waiters, `lockctl watch`) are told, only
-- when there are any.
-- KEYS[1] lock key, KEYS[2] its queue (`<lock key>:q`), KEYS[3] the queue's entries
-- (`<lock key>:qe`): declared, as every key a script touches must be on a Cluster, though
-- only a release of a marked value reads them
-- ARGV[1] value, ARGV[2] "1" to announce every release (no Locker of this version asks it:
-- Redlock's waiters queue and mark the value since issue 26), "2" to announce a marked release
-- without asking PUBSUB NUMSUB (a Cluster's counts only the node's own subscribers), "3"
-- the same with SPUBLISH (a Cluster whose Lockers listen in the lock's shard),
-- ARGV[3] claim window in ms
-- Returns 1 when given up, 0 when the lock was no longer ours (nothing is touched then).
-- This part runs first: the waiter-queue functions (queue.lua, then release_listened.lua)
-- are only defined, at a cost, when a release gets past it.
local current = redis.call('GET', KEYS[1])
if current == ARGV[1] and ARGV[2] ~= '1' then
  redis.call('DEL', KEYS[1])
  return 1
end
if current ~= ARGV[1] and current ~= '~' .. ARGV[1] then
  return 0
end
