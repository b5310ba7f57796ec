-- A fenced HSET, after fenced_guard.lua: KEYS[2] the hash, ARGV[3..] field, value, field,
-- value, ... (sent in chunks of 100 pairs: unpack's stack is bounded).
-- Returns {1} when written, the guard's refusal otherwise.
local refused, record = fence_check()
if refused then
  return refused
end
for i = 3, #ARGV, 200 do
  redis.call('HSET', KEYS[2], unpack(ARGV, i, math.min(i + 199, #ARGV)))
end
fence_record(record)
return {1}
