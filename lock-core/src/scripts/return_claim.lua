-- A Redlock waiter whose claim won fewer than a majority of masters gives back what it
-- claimed here, keeping its turn: it takes its place in line again (its ticket), and if it
-- heads the line the lock stays reserved for it for the claim window, rather than handed
-- to the next in line (the other masters reserve it for the same head once the previous
-- holder's release reaches them; handing it on here would split the masters between two
-- waiters, each short of a majority, until the window ends).
-- Nobody is told: the head claims again when another master tells it its turn.
-- KEYS[1] lock key, KEYS[2] queue
-- ARGV[1] value, ARGV[2] waiter (its member), ARGV[3] its ticket, ARGV[4] how long its
-- entry may count, in ms (the request's remaining wait), ARGV[5] claim window in ms,
-- ARGV[6] the waiters' channel prefix
-- Returns 1 when the lock held our value (given back), 0 when it did not (nothing touched).
local lock, q, waiter = KEYS[1], KEYS[2], ARGV[2]
if unmarked(redis.call('GET', lock)) ~= ARGV[1] then
  return 0
end
local life = tonumber(ARGV[4]) + tonumber(ARGV[5])
redis.call('ZADD', q, ARGV[3], waiter)
if redis.call('PTTL', q) < life then
  redis.call('PEXPIRE', q, life + life)
end
local line = redis.call('ZRANGE', q, 0, 1)
if line[1] == waiter then
  redis.call('ZREM', q, waiter)
  redis.call('SET', lock, '~?' .. waiter, 'PX', ARGV[5])
elseif not hand_over(lock, q, ARGV[5], ARGV[6]) then
  redis.call('DEL', lock)
end
return 1
