-- Reset a permit's end to `ttl` ms from now, if it is still ours.
-- KEYS[1] holders and state, KEYS[2] queue; ARGV[1] member, ARGV[2] ttl ms
-- Returns 1 when extended, 0 when the permit had ended. A permit shortened below every
-- other holder's end while someone waits tells the waiter at the head to look by its end.
local h, q = KEYS[1], KEYS[2]
local member, ttl = ARGV[1], tonumber(ARGV[2])
local t = redis.call('TIME')
local now = math.floor((tonumber(t[1]) * 1000000 + tonumber(t[2])) / 1000)
local r = redis.call('ZMSCORE', h, '#l', '#q', '#t', member)
local mine = r[4] and tonumber(r[4])
if not mine or mine <= now then return 0 end
local e = now + ttl
local args = { 'ZADD', h, e, member }
-- A shorter end than before: the bound on the first end must not be above it.
local lo = r[1] and -tonumber(r[1]) or 0
local sooner = lo == 0 or e < lo
if sooner then
  -- Shortened below every other holder's end: the first end moves sooner (see the lib's
  -- `#f`), which a blocked head that arrived earlier must be told at the next hand-out.
  args[#args + 1] = -e
  args[#args + 1] = '#l'
  args[#args + 1] = -now
  args[#args + 1] = '#f'
end
local kt = r[3] and -tonumber(r[3]) or 0
local rearm = e > kt
if rearm then
  kt = e + ttl
  args[#args + 1] = -kt
  args[#args + 1] = '#t'
end
redis.call(unpack(args))
local waiting = r[2] and -tonumber(r[2]) > 0
if rearm then
  redis.call('PEXPIREAT', h, kt)
  if waiting then redis.call('PEXPIREAT', q, kt) end
end
if not (sooner and waiting) then return 1 end
--[[permits_lib]]
-- And someone waits: the waiter at the head may be timed to look at a later end than this
-- permit's new one (should its holder die): it is told to look by then.
local head = redis.call('ZRANGE', q, 0, 0, 'WITHSCORES')
local ent = head[1] and entry_of(head[1], head[2], 0)
if ent and ent.channel ~= '' then
  send(outbox(h, '', 0), ent.channel, 'h:' .. ttl .. ':' .. h .. '#' .. ent.id)
end
return 1
