-- Take several locks at once, or none of them.
-- KEYS: the lock keys (on a Cluster they share one slot); ARGV[1] value, ARGV[2] ttl in ms
-- Returns {1, 0, 0, ''} when all were taken, {0, index of a held key (1-based), its
-- remaining ttl in ms, its holder's value} when one was held (nothing is written then).
-- The common path first: one EXISTS over every key (in slices, for Lua's stack), then one
-- SET each. Only when something exists does GET look key by key; GET on a non-string key
-- raises WRONGTYPE: a foreign value is an error, never "taken".
local n = #KEYS
local held = 0
for first = 1, n, 1000 do
  held = held + redis.call('EXISTS', unpack(KEYS, first, math.min(first + 999, n)))
end
if held > 0 then
  for i, key in ipairs(KEYS) do
    local holder = redis.call('GET', key)
    if holder then
      return {0, i, redis.call('PTTL', key), holder}
    end
  end
end
for _, key in ipairs(KEYS) do
  redis.call('SET', key, ARGV[1], 'PX', ARGV[2])
end
return {1, 0, 0, ''}
