-- The guard of a fenced write (see fenced/mod.rs), run before the write in the same script.
-- KEYS[1] the guard (a hash: `token`, the highest fencing token a write was accepted with,
-- and `lock`, the name of the lock whose tokens it compares), ARGV[1] the writer's token,
-- ARGV[2] its lock's name.
-- fence_check() returns the refusal to send back ({0, token seen, lock seen}) or nil and
-- what to record once the write is done: 2 the token and the lock (the first write), 1
-- the token (a newer holder), 0 nothing (the same holder again: equal tokens).
-- Tokens are compared as the decimal integers they are (no leading zeros: written by
-- Rust's u64 formatting), by length and then digit by digit: exact over all of u64, where
-- Lua's numbers (doubles) would round tokens above 2^53.
local function fence_cmp(a, b)
  if #a ~= #b then
    return #a < #b and -1 or 1
  end
  if a == b then
    return 0
  end
  return a < b and -1 or 1
end

local function fence_check()
  local seen = redis.call('HMGET', KEYS[1], 'token', 'lock')
  if not seen[1] then
    return nil, 2
  end
  if seen[2] ~= ARGV[2] then
    return {0, seen[1], seen[2] or ''}, 0
  end
  -- A mark that is not a decimal integer (written by hand) counts as none, as before any
  -- write; leading zeros are dropped.
  if not string.find(seen[1], '^%d+$') then
    return nil, 1
  end
  local order = fence_cmp(ARGV[1], (string.gsub(seen[1], '^0+(%d)', '%1')))
  if order < 0 then
    return {0, seen[1], seen[2]}, 0
  end
  if order == 0 then
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
