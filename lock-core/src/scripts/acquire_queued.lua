-- A waiting Locker's attempt: take the lock if it is free and nobody is queued ahead, or
-- claim it if it is reserved for us; otherwise join (or keep our place in) the queue.
-- KEYS[1] lock key, KEYS[2] fencing counter, KEYS[3] queue, KEYS[4] queue entries
-- ARGV[1] value, ARGV[2] ttl in ms, ARGV[3] "1" to draw a fencing token,
-- ARGV[4] waiter (the Locker's channel), ARGV[5] how long the entry counts, in ms (the
-- request's remaining wait), ARGV[6] claim window in ms, ARGV[7] (Redlock masters only)
-- the waiter's ticket: its place in line, the same on every master, so that their queues
-- agree on the order (one Redis orders by its own clock, and keeps a Locker's place)
-- Returns {1, fencing token or 0, '', 0, 0} when taken,
--         {0, lock's remaining ttl in ms, holder value, our place (0 = head),
--          1 if the lock is reserved for the head} when queued.
-- GET on a non-string key raises WRONGTYPE: a foreign value is an error, never "taken".
local lock, q, e = KEYS[1], KEYS[3], KEYS[4]
local waiter, window = ARGV[4], ARGV[6]
local now, now_us = clock()
local current = redis.call('GET', lock)
local head, head_value = live_head(q, e, now)
local ours = false
if current then
  -- Reserved for us: the head's value is on the key.
  ours = head == waiter and head_value == unmarked(current)
elseif head == nil or head == waiter then
  ours = true
else
  -- Free (its holder expired or crashed), but someone is queued ahead: their turn.
  hand_over(lock, q, e, now, window)
  current = head_value
end
if ours then
  local value = ARGV[1]
  if head == waiter then
    -- The next in line is read before we leave: a Cluster refuses a key the script
    -- emptied while its slot migrates.
    local next_head = redis.call('ZRANGE', q, 1, 1)[1]
    redis.call('ZREM', q, waiter)
    redis.call('HDEL', e, waiter)
    if next_head then
      -- Others wait: our release must hand over, so the value carries the mark.
      value = '~' .. value
      -- Now first in line: wake at our lease's end if we never release it (a crash).
      tell(next_head, 'h:' .. ARGV[2] .. ':' .. lock, lock)
    end
  end
  redis.call('SET', lock, value, 'PX', ARGV[2])
  local token = 0
  if ARGV[3] == '1' then
    token = redis.call('INCR', KEYS[2])
  end
  return {1, token, '', 0, 0}
end
if ARGV[7] then
  redis.call('ZADD', q, ARGV[7], waiter)
else
  redis.call('ZADD', q, 'NX', now_us, waiter)
end
local life = tonumber(ARGV[5]) + tonumber(window)
redis.call('HSET', e, waiter, (now + life) .. ' ' .. ARGV[1])
if redis.call('PTTL', q) < life then
  redis.call('PEXPIRE', q, life)
  redis.call('PEXPIRE', e, life)
end
-- The holder's release (or a reservation's claim) must now hand over.
mark_listened(lock)
local position = 0
local reserved = 0
if head and head ~= waiter then
  position = redis.call('ZRANK', q, waiter)
  if head_value == unmarked(current) then
    reserved = 1
  end
end
return {0, redis.call('PTTL', lock), current or '', position, reserved}
