-- Take a permit: claim the one reserved for us, or take one if it fits and nobody waits
-- ahead; a waiting request (ARGV[5] set) otherwise joins (keeps its place in) the queue.
-- KEYS[1] holders and state, KEYS[2] queue, KEYS[3] queue entries
-- ARGV[1] member ("<weight> <value>"), ARGV[2] ttl ms, ARGV[3] capacity, ARGV[4] weight,
-- ARGV[5] waiter id ('' for a plain try), ARGV[6] waiter's channel ('' when it polls),
-- ARGV[7] how long the entry counts (ms, the request's remaining wait), ARGV[8] claim
-- window ms
-- Returns {-1, the stored capacity, -1} when ARGV[3] disagrees with the capacity stored
-- while the name is in use (nothing of the request is written; ended permits are dropped), {1, 0, -1} when taken, {0, ms until the
-- first permit ends (-1: none, or not read for a waiter behind the first two), our place
-- among the waiters (-1 for a plain try)} when not.
local h, q, e = KEYS[1], KEYS[2], KEYS[3]
local member, ttl = ARGV[1], tonumber(ARGV[2])
local cap, weight = tonumber(ARGV[3]), tonumber(ARGV[4])
local me, window = ARGV[5], tonumber(ARGV[8])
local now, now_us = clock()
local st, mine = state(h, member)
-- The capacity is the name's, not the request's: stored by the first request while the
-- name is idle (nothing held, nobody queued), binding on every request until it is idle
-- again.
if st.cap and st.cap ~= cap then
  sweep(h, st, now)
  if st.held > 0 or st.nq > 0 then
    -- The sweep dropped the permits that ended: write the weight they took with them, or
    -- the stored total keeps counting them and the name stays that much fuller.
    save(h, q, e, st)
    return {-1, st.cap, -1}
  end
end
st.cap = cap
-- Reserved for us (or taken by an attempt whose reply was lost): claim it.
if mine and mine > now then
  redis.call('ZADD', h, 'XX', num(now + ttl), member)
  if me ~= '' then redis.call('HDEL', e, me) end
  keep(st, now + ttl, now)
  save(h, q, e, st)
  return {1, 0, -1}
end
sweep(h, st, now)
-- Hand freed capacity to the queue first (a queued request at its head takes its own).
if st.nq > 0 and admit(h, q, e, st, now, window, me, ttl) then
  save(h, q, e, st)
  return {1, 0, -1}
end
if st.nq == 0 and st.held + weight <= cap then
  -- Free, and nobody waits: take it (the queue is not touched).
  st.held = st.held + weight
  add(st, now + ttl, member)
  keep(st, now + ttl, now)
  save(h, q, e, st)
  return {1, 0, -1}
end
local place = -1
if me ~= '' then
  local expiry = now + tonumber(ARGV[7]) + window
  if redis.call('ZADD', q, 'NX', num(now_us), me) == 1 then
    -- Everyone in the queue is blocked (the walk above stopped at its head): a newcomer's
    -- place is the queue's size.
    place = st.nq
    local ent = { cap = cap, weight = weight, channel = ARGV[6],
                  value = string.sub(member, #ARGV[4] + 2) }
    redis.call('HSET', e, me, encode(expiry, ent))
    st.nq = st.nq + 1
    st.dirty = true
    if st.nq == 1 then st.rearm = true end
    keep(st, expiry, now)
  else
    place = redis.call('ZRANK', q, me) or -1
  end
end
-- The first end matters to a plain try (its Busy error says when to retry) and to the
-- first two waiters (when to look again); the others wait for their turn message.
local left = -1
if me == '' or place <= 1 then
  left = first_end(h, st, now)
end
save(h, q, e, st)
return {0, left, place}
