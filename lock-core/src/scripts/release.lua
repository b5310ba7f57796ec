-- Give the lock up if it still holds our value: hand it to the first live waiter, or
-- delete it when nobody waits (no PUBLISH then).
-- KEYS[1] lock key, KEYS[2] queue, KEYS[3] queue entries
-- ARGV[1] value, ARGV[2] claim window in ms, ARGV[3] "1" to also announce the release on
-- `<lock key>:released` (Redlock nodes, whose waiters do not queue).
-- Returns 1 when given up, 0 when the lock was no longer ours (nothing is touched then).
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
if redis.call('EXISTS', KEYS[2]) == 1 and hand_over(KEYS[1], KEYS[2], KEYS[3], clock(), ARGV[2]) then
  return 1
end
redis.call('DEL', KEYS[1])
if ARGV[3] == '1' then
  redis.call('PUBLISH', KEYS[1] .. ':released', 'released')
end
return 1
