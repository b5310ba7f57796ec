-- Give a permit back (and, for a request that gives up, its place in the queue), then hand
-- the freed capacity to the waiters in order.
-- KEYS[1] holders, KEYS[2] queue, KEYS[3] queue entries
-- ARGV[1] member, ARGV[2] claim window ms, ARGV[3] waiter id leaving the queue ('' none)
-- Returns 1 when the permit was still ours, 0 when it had ended (nobody else's is touched).
local h, q, e = KEYS[1], KEYS[2], KEYS[3]
local now = clock()
local held = redis.call('ZSCORE', h, ARGV[1])
local ours = held and tonumber(held) > now
redis.call('ZREM', h, ARGV[1])
if ARGV[3] ~= '' then dequeue(q, e, ARGV[3]) end
local sum = load(h, now)
local cap = tonumber(redis.call('HGET', e, 'cap'))
if redis.call('EXISTS', q) == 1 then
  admit(h, q, e, now, tonumber(ARGV[2]), sum, cap, '', 0, true)
elseif redis.call('EXISTS', h) == 0 then
  -- Idle: the stored capacity goes with the last holder.
  redis.call('DEL', e)
end
keep_holders(h, e, now)
if ours then return 1 end
return 0
