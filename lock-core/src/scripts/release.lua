-- Give the lock up if it still holds our value. An unmarked value (nobody listens: see
-- queue.lua) is simply deleted; a marked one is handed to the first live waiter, or deleted
-- when nobody waits, and subscribers of `<lock key>:released` (Redlock and WATCH/MULTI
-- waiters, `lockctl watch`) are told, only when there are any.
-- KEYS[1] lock key, KEYS[2] queue, KEYS[3] queue entries
-- ARGV[1] value, ARGV[2] claim window in ms, ARGV[3] "1" to announce every release (Redlock
-- nodes, whose waiters listen on the release channel without marking the value)
-- Returns 1 when given up, 0 when the lock was no longer ours (nothing is touched then).
local current = redis.call('GET', KEYS[1])
if current == ARGV[1] and ARGV[3] ~= '1' then
  redis.call('DEL', KEYS[1])
  return 1
end
if unmarked(current) ~= ARGV[1] then
  return 0
end
if redis.call('EXISTS', KEYS[2]) == 0
    or not hand_over(KEYS[1], KEYS[2], KEYS[3], clock(), ARGV[2]) then
  redis.call('DEL', KEYS[1])
end
local channel = KEYS[1] .. ':released'
if redis.call('PUBSUB', 'NUMSUB', channel)[2] > 0 then
  redis.call('PUBLISH', channel, 'released')
end
return 1
