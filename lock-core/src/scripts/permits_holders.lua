-- Who holds permits, by the server's clock, how many wait, and the stored capacity.
-- KEYS[1] holders and state, KEYS[2] queue; ARGV[1] claim window ms
-- Returns {waiting, stored capacity (0: none, the name is idle and its capacity not set), member1, ms left 1,
-- member2, ms left 2, ...}; reservations for a waiter whose turn came are listed as
-- holders. O(holders + waiters): an inspection, not on any acquisition's path.
local h, q = KEYS[1], KEYS[2]
local window = tonumber(ARGV[1])
local t = redis.call('TIME')
local now = math.floor((tonumber(t[1]) * 1000000 + tonumber(t[2])) / 1000)
local r = redis.call('ZMSCORE', h, '#c', '#q', '#p')
local out = {0, 0}
local live = redis.call('ZRANGEBYSCORE', h, '(' .. now, '+inf', 'WITHSCORES')
for i = 1, #live, 2 do
  out[#out + 1] = live[i]
  out[#out + 1] = tonumber(live[i + 1]) - now
end
if r[2] and -tonumber(r[2]) > 0 then
  local rows = redis.call('ZRANGE', q, 0, -1, 'WITHSCORES')
  for i = 1, #rows, 2 do
    local life = string.match(rows[i], '^%d+ (%d+) ')
    if life and math.floor(tonumber(rows[i + 1]) / 1000) + tonumber(life) + window > now then
      out[1] = out[1] + 1
    end
  end
end
if (#live > 0 or out[1] > 0 or r[3]) and r[1] then out[2] = -tonumber(r[1]) end
return out
