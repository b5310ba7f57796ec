-- A Redlock waiter whose claim won fewer than a majority of masters gives back what it
-- claimed here, keeping its turn: the claim took it out of the queue, so it takes its place
-- again (its ticket), and if it still heads the line the lock stays reserved for it for the
-- claim window, rather than handed to the next in line (the other masters reserve it for
-- the same head once the previous holder's release reaches them; handing it on here would
-- split the masters between two waiters, each short of a majority, until the window ends).
-- Nobody is told: the head claims again when another master tells it its turn.
-- KEYS[1] lock key, KEYS[2] queue, KEYS[3] queue entries
-- ARGV[1] value, ARGV[2] waiter, ARGV[3] its ticket, ARGV[4] how long its entry counts,
-- in ms (the request's remaining wait), ARGV[5] claim window in ms
-- Returns 1 when the lock held our value (given back), 0 when it did not (nothing touched).
local lock, q, e = KEYS[1], KEYS[2], KEYS[3]
local value, waiter, window = ARGV[1], ARGV[2], tonumber(ARGV[5])
if unmarked(redis.call('GET', lock)) ~= value then
  return 0
end
local now = clock()
local life = tonumber(ARGV[4]) + window
redis.call('ZADD', q, ARGV[3], waiter)
redis.call('HSET', e, waiter, (now + life) .. ' ' .. value)
if redis.call('PTTL', q) < life then
  redis.call('PEXPIRE', q, life)
  redis.call('PEXPIRE', e, life)
end
if live_head(q, e, now) == waiter then
  redis.call('SET', lock, value, 'PX', window)
  redis.call('HSET', e, waiter, (now + window) .. ' ' .. value)
elseif not hand_over(lock, q, e, now, window) then
  redis.call('DEL', lock)
end
return 1
