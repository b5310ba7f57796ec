-- Delete the lock only if it still holds our value, and tell the waiters.
-- KEYS[1] lock key; ARGV[1] value. Releases are announced on `<lock key>:released`.
-- Returns 1 when deleted, 0 when the lock was no longer ours (nothing is touched then).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', KEYS[1] .. ':released', 'released')
  return 1
end
return 0
