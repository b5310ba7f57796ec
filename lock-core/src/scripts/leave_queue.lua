-- A waiter gives up: leave the queue, and if the lock was reserved for it meanwhile, pass
-- the reservation on (or free the lock).
-- KEYS[1] lock key, KEYS[2] queue, KEYS[3] queue entries
-- ARGV[1] waiter, ARGV[2] claim window in ms, ARGV[3] (optional) "1" to leave only the
-- queue: a Redlock waiter granted on a majority, still queued on this node, whose value
-- the lock here may carry (reserved for it) and which its release will delete
local _, value = entry_of(KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
if ARGV[3] == '1' then
  return 1
end
if value and unmarked(redis.call('GET', KEYS[1])) == value then
  if not hand_over(KEYS[1], KEYS[2], KEYS[3], clock(), ARGV[2]) then
    redis.call('DEL', KEYS[1])
  end
end
return 1
