-- Raise the fencing counter to at least ARGV[1] (Redlock: after an acquisition drew its
-- token as the maximum over a majority, every node of that majority learns it, so the next
-- majority, which overlaps this one, draws a larger token).
-- KEYS[1] fencing counter key; ARGV[1] the token
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
if current < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1])
end
return 1
