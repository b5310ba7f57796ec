-- Take the lock if it is free, in one round trip.
-- KEYS[1] lock key, KEYS[2] fencing counter key (the lock key again when no token is drawn:
-- a declared key that does not exist makes a Cluster refuse the script while its slot
-- migrates)
-- ARGV[1] value (token[:label]), ARGV[2] ttl in ms, ARGV[3] "1" to draw a fencing token
-- Returns {1, fencing token or 0, ""} when taken,
--         {0, remaining ttl of the holder in ms, holder value} when busy.
-- GET on a non-string key raises WRONGTYPE, so a foreign value is an error, never "taken".
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if ARGV[3] == '1' then
    return {1, draw_fence(KEYS[2]), ''}
  end
  return {1, 0, ''}
end
local holder = redis.call('GET', KEYS[1])
return {0, redis.call('PTTL', KEYS[1]), holder or ''}
