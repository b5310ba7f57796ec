-- The guard of a fenced write (see fenced/mod.rs), run before the write in the same script.
-- KEYS[1] the guard (a hash: `token`, the highest fencing token a write was accepted with,
-- and `lock`, the name of the lock whose tokens it compares), ARGV[1] the writer's token,
-- ARGV[2] its lock's name.
-- fence_check() returns the refusal to send back ({0, token seen, lock seen}) or nil and
-- what to record once the write is done: 2 the token and the lock (the first write), 1
-- the token (a newer holder), 0 nothing (the same holder again: equal tokens).
local function fence_check()
  local seen = redis.call('HMGET', KEYS[1], 'token', 'lock')
  if not seen[1] then
    return nil, 2
  end
  if seen[2] ~= ARGV[2] then
    return {0, seen[1], seen[2] or ''}, 0
  end
  local token, high = tonumber(ARGV[1]), tonumber(seen[1])
  if high and token < high then
    return {0, seen[1], seen[2]}, 0
  end
  if high and token == high then
    return nil, 0
  end
  return nil, 1
end

local function fence_record(what)
  if what == 2 then
    redis.call('HSET', KEYS[1], 'token', ARGV[1], 'lock', ARGV[2])
  elseif what == 1 then
    redis.call('HSET', KEYS[1], 'token', ARGV[1])
  end
end
