-- A multi-lock waits for this lock: mark its value as listened for (a '~' in front, token,
-- label and TTL unchanged; see queue.lua), so that its release is announced on the release
-- channel. Returns the lock's remaining ttl in ms (-2 when it is free).
-- KEYS[1] lock key
local v = redis.call('GET', KEYS[1])
if v and string.byte(v, 1) ~= 126 then
  redis.call('SET', KEYS[1], '~' .. v, 'KEEPTTL')
end
return redis.call('PTTL', KEYS[1])
