-- Give the lock up if it still holds our value: hand it to the first live waiter, or
-- delete it when nobody waits. Subscribers of `<lock key>:released` (Redlock and
-- WATCH/MULTI waiters, `lockctl watch`) are told, and only when there are any: an
-- uncontended release publishes nothing.
-- KEYS[1] lock key, KEYS[2] queue, KEYS[3] queue entries
-- ARGV[1] value, ARGV[2] claim window in ms
-- Returns 1 when given up, 0 when the lock was no longer ours (nothing is touched then).
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
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
