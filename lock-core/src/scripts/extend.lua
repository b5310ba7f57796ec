-- Reset the lock's TTL only if it still holds our value (marked or not: see queue.lua).
-- KEYS[1] lock key; ARGV[1] value, ARGV[2] new ttl in ms
-- Returns 1 when extended, 0 when the lock was no longer ours.
local current = redis.call('GET', KEYS[1])
if current == ARGV[1] or current == '~' .. ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
