-- A waiter gives up: leave the queue, and if the lock was reserved for it meanwhile, pass
-- the reservation on (or free the lock). A waiter that left from the first two places
-- moves the ones behind it up, and their timers depend on their place: the new first two
-- are told what the lock is doing now, so that nobody sleeps while the lock lies free (the
-- lock free with waiters queued: the new head's turn at once).
-- KEYS[1] lock key, KEYS[2] queue
-- ARGV[1] waiter (its member), ARGV[2] claim window in ms, ARGV[3] the waiters' channel
-- prefix, ARGV[4] (optional) "1" to leave only the queue: a Redlock waiter granted on a
-- majority, still queued on this node, whose reservation here (if any) is its own lock
-- now, deleted by its release
local lock, q, me, window, waiters = KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3]
local place = redis.call('ZRANK', q, me)
redis.call('ZREM', q, me)
if ARGV[4] == '1' then
  return 1
end
local held = redis.call('GET', lock)
local current = unmarked(held)
if current == '?' .. me then
  if not hand_over(lock, q, window, waiters) then
    redis.call('DEL', lock)
  end
  return 1
end
-- Others still in line behind a holder whose value lacks the mark (a newcomer's plain SET
-- took the lock while it lay free after an expiry, before anyone in line looked again):
-- marked, so that its release hands the lock over and tells the line. Told below only when
-- that lease ends, the next in line would otherwise sleep on while the lock, released,
-- lay free.
if held and redis.call('EXISTS', q) == 1 then
  mark_listened(lock, held)
end
if not place or place > 1 then
  return 1
end
if not current then
  hand_over(lock, q, window, waiters)
  return 1
end
local pttl = redis.call('PTTL', lock)
if pttl < 0 then
  return 1
end
local line = redis.call('ZRANGE', q, 0, 1)
if place == 0 and line[1] then
  -- First in line now: behind a holder, its lease's end ("h"); behind a reservation, the
  -- reservation's end, after which the lock is its to take ("s").
  local hint = 'h:'
  if string.byte(current, 1) == 63 then
    hint = 's:'
  end
  notify(waiters, line[1], hint .. pttl .. ':' .. lock, lock)
end
if line[2] then
  -- Second now: its turn one claim window after that, should the head be gone too.
  notify(waiters, line[2], 's:' .. (pttl + tonumber(window)) .. ':' .. lock, lock)
end
return 1
