-- Reset a permit's end to `ttl` ms from now, if it is still ours.
-- KEYS[1] holders, KEYS[2] queue entries (with the stored capacity); ARGV[1] member, ARGV[2] ttl ms
-- Returns 1 when extended, 0 when the permit had ended.
local h = KEYS[1]
local now = clock()
local held = redis.call('ZSCORE', h, ARGV[1])
if held and tonumber(held) > now then
  redis.call('ZADD', h, 'XX', num(now + tonumber(ARGV[2])), ARGV[1])
  keep_holders(h, KEYS[2], now)
  return 1
end
return 0
