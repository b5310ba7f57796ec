-- Give a permit back (and, for a request that gives up, its place in the queue), then hand
-- the freed capacity to the waiters in order.
-- KEYS[1] holders and state, KEYS[2] queue, KEYS[3] queue entries
-- ARGV[1] member, ARGV[2] claim window ms, ARGV[3] waiter id leaving the queue ('' none)
-- Returns 1 when the permit was still ours, 0 when it had ended (nobody else's is touched).
local h, q, e = KEYS[1], KEYS[2], KEYS[3]
local member, leaving = ARGV[1], ARGV[3]
local now = clock()
local st, mine = state(h, member)
if not st.cap then
  -- Nothing is stored: the name is idle (its last permit ended and was swept).
  return 0
end
local ours = mine and mine > now
if mine then
  st.held = st.held - weight_of(member)
  st.dirty = true
end
if leaving ~= '' then
  -- Its entry: in the queue, or beside a reservation it did not claim.
  if redis.call('HDEL', e, leaving) == 1 and st.nq > 0 and redis.call('ZREM', q, leaving) == 1 then
    st.nq = st.nq - 1
    st.dirty = true
  end
end
if st.held <= 0 and st.nq <= 0 then
  -- Idle: the state (and the stored capacity) goes with the last holder, and with it any
  -- entry of a reservation never claimed.
  redis.call('DEL', h, e)
else
  if mine then redis.call('ZREM', h, member) end
  sweep(h, st, now)
  if st.nq > 0 then admit(h, q, e, st, now, tonumber(ARGV[2]), '', 0) end
  if st.held <= 0 and st.nq <= 0 then
    redis.call('DEL', h, e)
  else
    save(h, q, e, st)
  end
end
if ours then return 1 end
return 0
