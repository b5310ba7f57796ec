-- Take a permit: claim the one reserved for us, or take one if it fits and nobody waits
-- ahead; a waiting request (ARGV[5] set) otherwise joins (keeps its place in) the queue.
-- KEYS[1] holders, KEYS[2] queue, KEYS[3] queue entries
-- ARGV[1] member ("<weight> <value>"), ARGV[2] ttl ms, ARGV[3] capacity, ARGV[4] weight,
-- ARGV[5] waiter id ('' for a plain try), ARGV[6] waiter's channel ('' when it polls),
-- ARGV[7] how long the entry counts (ms, the request's remaining wait), ARGV[8] claim
-- window ms
-- Returns {-1, the stored capacity, -1} when ARGV[3] disagrees with the capacity stored
-- while the name is in use (nothing is changed), {1, 0, -1} when taken, {0, ms until the first permit ends (-1: none), our place
-- among the blocked waiters (-1 for a plain try)} when not.
local h, q, e = KEYS[1], KEYS[2], KEYS[3]
local member, ttl = ARGV[1], tonumber(ARGV[2])
local cap, weight = tonumber(ARGV[3]), tonumber(ARGV[4])
local me, window = ARGV[5], tonumber(ARGV[8])
local now, now_us = clock()
local sum = load(h, now)
-- The capacity is the name's, not the request's: stored by the first request while the
-- name is idle (no live permit, no queue), and binding on every request until it is idle
-- again.
local stored = tonumber(redis.call('HGET', e, 'cap'))
if stored ~= cap then
  if stored and (sum > 0 or redis.call('EXISTS', q) == 1) then
    return {-1, stored, -1}
  end
  redis.call('HSET', e, 'cap', num(cap))
end
-- Reserved for us (or taken by an attempt whose reply was lost): claim it.
if redis.call('ZSCORE', h, member) then
  redis.call('ZADD', h, 'XX', num(now + ttl), member)
  if me ~= '' then dequeue(q, e, me) end
  keep_holders(h, e, now)
  return {1, 0, -1}
end
if me ~= '' then
  local life = tonumber(ARGV[7]) + window
  redis.call('ZADD', q, 'NX', num(now_us), me)
  local ent = { cap = cap, weight = weight, channel = ARGV[6], value = string.sub(member, #ARGV[4] + 2) }
  redis.call('HSET', e, me, encode(now + life, ent))
  if redis.call('PTTL', q) < life then
    redis.call('PEXPIRE', q, num(life))
    redis.call('PEXPIRE', e, num(life))
  end
end
local taken, place, blocked
taken, place, blocked, sum = admit(h, q, e, now, window, sum, cap, me, ttl, false)
if not taken and me == '' and not blocked and sum + weight <= cap then
  redis.call('ZADD', h, num(now + ttl), member)
  taken = true
end
keep_holders(h, e, now)
if taken then return {1, 0, -1} end
return {0, first_end(h, now), place}
