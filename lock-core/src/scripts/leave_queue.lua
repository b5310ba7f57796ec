-- A waiter gives up: leave the queue, and if the lock was reserved for it meanwhile, pass
-- the reservation on (or free the lock).
-- KEYS[1] lock key, KEYS[2] queue
-- ARGV[1] waiter (its member), ARGV[2] claim window in ms, ARGV[3] the waiters' channel
-- prefix, ARGV[4] (optional) "1" to leave only the queue: a Redlock waiter granted on a
-- majority, still queued on this node, whose reservation here (if any) is its own lock
-- now, deleted by its release
redis.call('ZREM', KEYS[2], ARGV[1])
if ARGV[4] == '1' then
  return 1
end
if unmarked(redis.call('GET', KEYS[1])) == '?' .. ARGV[1] then
  if not hand_over(KEYS[1], KEYS[2], ARGV[2], ARGV[3]) then
    redis.call('DEL', KEYS[1])
  end
end
return 1
