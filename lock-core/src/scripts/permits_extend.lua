-- Reset a permit's end to `ttl` ms from now, if it is still ours.
-- KEYS[1] holders and state, KEYS[2] queue, KEYS[3] queue entries; ARGV[1] member, ARGV[2] ttl ms
-- Returns 1 when extended, 0 when the permit had ended.
local h = KEYS[1]
local now = clock()
local st, mine = state(h, ARGV[1])
if mine and mine > now then
  local ttl = tonumber(ARGV[2])
  redis.call('ZADD', h, 'XX', num(now + ttl), ARGV[1])
  keep(st, now + ttl, now)
  -- A shorter end than before: the bound on the first end must not be above it.
  if now + ttl < st.lo then st.lo = now + ttl; st.dirty = true end
  save(h, KEYS[2], KEYS[3], st)
  return 1
end
return 0
