-- Give the lock up if it still holds our value. An unmarked value (nobody listens: see
-- queue.lua) is simply deleted, before anything else of the script runs; a marked one is
-- handed to the first waiter in line, or deleted when nobody waits, and subscribers of
-- `<lock key>:released` (WATCH/MULTI and multi-lock waiters, `lockctl watch`) are told, only
-- when there are any.
-- KEYS[1] lock key, KEYS[2] its queue (`<lock key>:q`): declared, as every key a script
-- touches must be on a Cluster, though only a release of a marked value reads it; left out
-- when a Cluster refused the script because the queue's key does not exist while the
-- lock's slot migrates (TRYAGAIN): nobody is in line then
-- ARGV[1] value, ARGV[2] "3" to announce a marked release with SPUBLISH without asking
-- PUBSUB NUMSUB (a Cluster, whose Lockers listen in the lock's shard), else "0",
-- ARGV[3] claim window in ms,
-- ARGV[4] the waiters' channel prefix
-- Returns 1 when given up, 0 when the lock was no longer ours (nothing is touched then).
-- This part runs first: the waiter-queue functions (queue.lua, then release_listened.lua)
-- are only defined, at a cost, when a release gets past it.
local current = redis.call('GET', KEYS[1])
if current == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
if current ~= '~' .. ARGV[1] then
  return 0
end
