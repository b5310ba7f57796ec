-- The next fencing token of the lock whose counter is `key` (see fence.rs): the server's
-- clock in microseconds, or one more than the previous token when that is not below it,
-- stored back in the counter. A restart, a flush or a failover that loses the counter
-- starts it again from the clock, above the tokens drawn before. Tokens stay below 2^53,
-- so Lua's numbers hold them exactly; they are written as integers ('%.0f': a bare number
-- would be sent in '%.14g', cut to 14 digits).
local function draw_fence(key)
  local now = redis.call('TIME')
  local token = tonumber(now[1]) * 1000000 + tonumber(now[2])
  local last = tonumber(redis.call('SET', key, string.format('%.0f', token), 'GET')) or 0
  if last >= token then
    token = last + 1
    redis.call('SET', key, string.format('%.0f', token))
  end
  return token
end
