-- Take a permit: claim the one reserved for us, or take one if it fits and nobody waits
-- ahead; a waiting request (ARGV[5] set) otherwise joins (keeps its place in) the queue.
-- KEYS[1] holders and state, KEYS[2] queue
-- ARGV[1] member ("<weight> <value>"), ARGV[2] ttl ms, ARGV[3] capacity, ARGV[4] weight,
-- ARGV[5] the waiter's queue member ('' for a plain try), ARGV[6] claim window ms,
-- ARGV[7] how long the queue member counts (ms, the request's wait; it is in the member
-- too), ARGV[8] the calling Locker's channel ('' when it polls)
-- A capacity set by `permits_set_capacity` (the state member `#p` is there) wins over
-- ARGV[3]: the request is judged against the stored number.
-- Returns {-1, the stored capacity, -1, 0, 0} when ARGV[3] disagrees with the capacity
-- stored while the name is in use, or the weight is above a set capacity (nothing of the
-- request is written; ended permits are dropped), {1, 0, -1, 0 or the capacity, 0} when
-- taken, {0, ms until the first permit ends (-1: none held; for a waiter behind the first
-- two, a lower bound on it), our place among the waiters (-1 for a plain try), the capacity the request
-- was judged against (a set one, pinned, wins over ARGV[3]), the server's time (ms): a
-- grant to this waiter told later with its own server time happened that much later} when
-- not; then, after these five, one line "<kind>:<ms>:<waiter id>" per waiter of the
-- calling Locker handed a permit or told when to look again (see the lib's `admit`).
local h, q = KEYS[1], KEYS[2]
local member, ttl = ARGV[1], tonumber(ARGV[2])
local cap, weight = tonumber(ARGV[3]), tonumber(ARGV[4])
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now = math.floor(now_us / 1000)
local r = redis.call('ZMSCORE', h, '#c', '#w', '#l', '#q', '#h', '#e', '#t', '#f', member, '#p')
local mine = r[9] and tonumber(r[9])
local kt = r[7] and -tonumber(r[7]) or 0
if mine and mine > now then
  -- Reserved for us (or taken by an attempt whose reply was lost): claim it.
  local e = now + ttl
  local args = { 'ZADD', h, e, member }
  local lo = r[3] and -tonumber(r[3]) or 0
  if lo == 0 or e < lo then
    -- A TTL shorter than what was left of the reservation: the first end moves sooner.
    args[#args + 1] = -e
    args[#args + 1] = '#l'
    args[#args + 1] = -now
    args[#args + 1] = '#f'
  end
  local rearm = e > kt
  if rearm then
    kt = e + ttl
    args[#args + 1] = -kt
    args[#args + 1] = '#t'
  end
  redis.call(unpack(args))
  if rearm then
    redis.call('PEXPIREAT', h, kt)
    if r[4] and -tonumber(r[4]) > 0 then redis.call('PEXPIREAT', q, kt) end
  end
  return {1, 0, -1, 0, 0}
end
local stored = r[1] and -tonumber(r[1])
if stored and r[10] then
  -- The capacity was set (pinned): it is the name's whatever the request asks.
  if weight > stored then return {-1, stored, -1, 0, 0} end
  cap = stored
end
local w = r[2] and -tonumber(r[2]) or 0
if not mine and (not stored or stored == cap) and w == math.floor(w) and w + weight <= cap then
  -- Free, and nobody waits: take it, writing only the state that changed.
  local e = now + ttl
  local args = { 'ZADD', h, e, member, -(math.max(w, 0) + weight), '#w' }
  if not stored then
    args[#args + 1] = -cap
    args[#args + 1] = '#c'
  end
  local lo = r[3] and -tonumber(r[3]) or 0
  if lo == 0 or e < lo or (w <= 0 and lo <= now) then
    args[#args + 1] = -e
    args[#args + 1] = '#l'
  end
  local rearm = e > kt
  if rearm then
    kt = e + ttl
    args[#args + 1] = -kt
    args[#args + 1] = '#t'
  end
  redis.call(unpack(args))
  if rearm then redis.call('PEXPIREAT', h, kt) end
  return {1, 0, -1, 0, 0}
end
local me = ARGV[5]
if me ~= '' and not r[9] and stored and stored == cap then
  -- A waiter joining a line that cannot move: every permit is taken and none has ended
  -- (so the lib's sweep and walk would free and hand out nothing), and at least two wait
  -- ahead (so its answer is the bound on the first end). What the lib would do, without
  -- defining it: the contended request's usual case.
  local held = math.floor(w)
  local lo = r[3] and -tonumber(r[3]) or 0
  local nq = r[4] and -tonumber(r[4]) or 0
  if nq >= 2 and held >= cap and lo > now and redis.call('ZADD', q, 'NX', now_us, me) == 1 then
    local args = { 'ZADD', h, -(nq + 1), '#q' }
    if w ~= held + 0.5 then
      args[#args + 1] = -(held + 0.5)
      args[#args + 1] = '#w'
    end
    local expiry = now + tonumber(ARGV[7]) + tonumber(ARGV[6])
    local rearm = expiry > kt
    if rearm then
      kt = expiry + (expiry - now)
      args[#args + 1] = -kt
      args[#args + 1] = '#t'
    end
    redis.call(unpack(args))
    if rearm then
      redis.call('PEXPIREAT', h, kt)
      redis.call('PEXPIREAT', q, kt)
    end
    return {0, lo - now, nq, cap, now}
  end
  -- Already in line (its place is to be read), or the line may move: the lib's way (a
  -- `ZADD NX` that found the entry changed nothing).
end
--[[permits_lib]]
local window = tonumber(ARGV[6])
local st = decode(r, now)
local out = outbox(h, ARGV[8] or '', window)
local function reply(taken, left, place)
  flush(out)
  local result = { taken, left, place, cap, now }
  for _, line in ipairs(out.locals) do result[#result + 1] = line end
  return result
end
-- The capacity is the name's, not the request's: stored by the first request while the
-- name is idle (nothing held, nobody queued), binding on every request until it is idle
-- again.
if st.cap and st.cap ~= cap then
  sweep(h, st, now)
  if st.held > 0 or st.nq > 0 then
    -- The sweep dropped the permits that ended: write the weight they took with them, or
    -- the stored total keeps counting them and the name stays that much fuller.
    save(h, q, st)
    return {-1, st.cap, -1, 0, 0}
  end
end
st.cap = cap
sweep(h, st, now)
-- Hand freed capacity to the queue first (a queued request at its head takes its own).
if st.nq > 0 and admit(h, q, st, now, window, me, ttl, out) then
  save(h, q, st)
  return reply(1, 0, -1)
end
if st.nq == 0 and st.held + weight <= cap then
  -- Free, and nobody waits (any more): take it.
  st.held = st.held + weight
  add(st, now + ttl, member)
  keep(st, now + ttl, now)
  save(h, q, st)
  return reply(1, 0, -1)
end
local place = -1
if me ~= '' then
  if redis.call('ZADD', q, 'NX', now_us, me) == 1 then
    -- Everyone in the queue is blocked (the walk above stopped at its head): a newcomer's
    -- place is the queue's size.
    local expiry = now + tonumber(ARGV[7]) + window
    place = st.nq
    if st.nq == 0 then
      st.hw, st.he, st.qnew = weight, expiry, true
    end
    st.nq = st.nq + 1
    keep(st, expiry, now)
  else
    place = redis.call('ZRANK', q, me) or -1
  end
end
-- The first end matters to a plain try (its Busy error says when to retry) and to every
-- waiter: each looks again by then at the latest, unless told its turn first (a head is
-- told when to look again only if the first end moves sooner than this; see `#f`). The
-- first two read it exactly; the others take the bound on it (an early look at worst).
local left = -1
if me == '' or place <= 1 then
  left = first_end(h, st, now)
elseif st.first then
  left = math.max(st.first - now, 0)
elseif st.lo > 0 then
  left = math.max(st.lo - now, 0)
end
save(h, q, st)
return reply(0, left, place)
