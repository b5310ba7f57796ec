-- An election's record: who leads (or last led), in which term, since when by the server's
-- clock; written and announced only by the current holder of the election's lock.
-- KEYS[1] lock key, KEYS[2] record key (also the channel its changes are published on)
-- ARGV[1] value (token[:label]), ARGV[2] 'L' (elected) or 'R' (resigned), ARGV[3] term,
-- ARGV[4] label
-- Returns the server time written (ms since the epoch), or -1 when the lock is not ours
-- (nothing is written or published then).
local current = redis.call('GET', KEYS[1])
if current ~= ARGV[1] and current ~= '~' .. ARGV[1] then
  return -1
end
local t = redis.call('TIME')
local now = string.format('%d', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
local record = ARGV[2] .. ' ' .. ARGV[3] .. ' ' .. now .. ' ' .. ARGV[4]
redis.call('SET', KEYS[2], record)
redis.call('PUBLISH', KEYS[2], record)
return tonumber(now)
