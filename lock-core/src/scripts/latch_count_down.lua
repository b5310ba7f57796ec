-- Count a latch's current round down by `n`; at zero it opens, and one message on
-- `<latch key>:opened` ("o:<round>") tells every process that waits on it.
-- KEYS[1] the latch key
-- ARGV[1] n (>= 1), ARGV[2] "3" to announce with SPUBLISH (a Cluster, whose Lockers
-- listen in the latch's shard), else "0"
-- Returns {1, round, count left}; {-1} when there is no latch (never armed, or expired);
-- {-2, round, count left} when n is more than is left (nothing is changed).
local k = KEYS[1]
local r = redis.call('HMGET', k, 'r', 'c')
if not r[1] then return { -1 } end
local left, n = tonumber(r[2]), tonumber(ARGV[1])
if n > left then return { -2, r[1], left } end
left = left - n
redis.call('HSET', k, 'c', left)
if left == 0 then
  local channel, msg = k .. ':opened', 'o:' .. r[1]
  if ARGV[2] == '3' and type(redis.pcall('SPUBLISH', channel, msg)) == 'number' then
    return { 1, r[1], 0 }
  end
  redis.call('PUBLISH', channel, msg)
end
return { 1, r[1], left }
