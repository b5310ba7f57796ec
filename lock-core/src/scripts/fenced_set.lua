-- A fenced SET, after fenced_guard.lua: KEYS[2] the key, ARGV[3] its value.
-- Returns {1} when written, the guard's refusal otherwise.
local refused, record = fence_check()
if refused then
  return refused
end
redis.call('SET', KEYS[2], ARGV[3])
fence_record(record)
return {1}
