-- Arm a countdown latch for a new round: `count` count-downs open it; the key (and the
-- round with it) expires after `ttl` ms unless the round opened and was re-armed before.
-- Refused while the current round still counts (its waiters would never see it open).
-- KEYS[1] the latch key (a hash: r round id, c count left, n count armed, p the round
-- before, when it had opened)
-- ARGV[1] count (>= 1), ARGV[2] ttl ms
-- Returns {1, round, count} when armed, {-1, round, count left} while a round counts.
local k = KEYS[1]
local r = redis.call('HMGET', k, 'r', 'c')
local left = tonumber(r[2])
if left and left > 0 then return { -1, r[1], left } end
-- A round id from the server's clock (seconds and microseconds, as digits): never reused,
-- even after the key expired, so that an old round's opening cannot pass for a new one's.
local t = redis.call('TIME')
local round = t[1] .. string.format('%06d', tonumber(t[2]))
if r[1] then
  redis.call('HSET', k, 'r', round, 'c', ARGV[1], 'n', ARGV[1], 'p', r[1])
else
  redis.call('HSET', k, 'r', round, 'c', ARGV[1], 'n', ARGV[1])
  redis.call('HDEL', k, 'p')
end
redis.call('PEXPIRE', k, ARGV[2])
return { 1, round, tonumber(ARGV[1]) }
