-- A latch's state, in one read.
-- KEYS[1] the latch key
-- Returns {} when there is no latch, else {round, count left, count armed, ms to live,
-- the round before it (when it had opened; '' if none)}.
local k = KEYS[1]
local r = redis.call('HMGET', k, 'r', 'c', 'n', 'p')
if not r[1] then return {} end
return { r[1], tonumber(r[2]), tonumber(r[3]), redis.call('PTTL', k), r[4] or '' }
