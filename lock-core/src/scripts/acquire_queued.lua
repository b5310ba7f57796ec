-- A waiting Locker's attempt: take the lock if it is free and nobody is queued ahead, or
-- claim it if it is reserved for us; otherwise join (or keep our place in) the queue.
-- KEYS[1] lock key, KEYS[2] fencing counter (the lock key again when no token is drawn: a
-- declared key that does not exist makes a Cluster refuse the script while its slot
-- migrates), KEYS[3] queue
-- ARGV[1] value, ARGV[2] ttl in ms, ARGV[3] "1" to draw a fencing token,
-- ARGV[4] waiter (the Locker's member in the queue, see queue.lua), ARGV[5] how long the
-- entry may count, in ms (the request's remaining wait), ARGV[6] claim window in ms,
-- ARGV[7] the waiters' channel prefix, ARGV[8] (Redlock masters only) the waiter's ticket:
-- its place in line, the same on every master, so that their queues agree on the order
-- (one Redis orders by its own clock, and keeps a Locker's place)
-- Returns {1, fencing token or 0, '', 0, 1 if our value carries the mark} when taken,
--         {0, lock's remaining ttl in ms (-1: not asked), holder value, our place (0 =
--          first), 1 if the lock is reserved for a waiter ahead of us} when queued.
-- GET on a non-string key raises WRONGTYPE: a foreign value is an error, never "taken".
local lock, q, me = KEYS[1], KEYS[3], ARGV[4]
local current = redis.call('GET', lock)
local take = false
-- Whether others may wait after us: our release must then hand over, so our value
-- carries the mark.
local marked = false
if current then
  -- Reserved for us (popped from the queue already); marked when others wait.
  take = unmarked(current) == '?' .. me
  marked = string.byte(current, 1) == 126
else
  local line = redis.call('ZRANGE', q, 0, 1)
  local head = line[1]
  if head == nil then
    take = true
  elseif head == me then
    redis.call('ZREM', q, me)
    take = true
    marked = line[2] ~= nil
  else
    -- Free (its holder expired, or a reservation lapsed) with someone queued ahead: their
    -- turn (and ours to stand by, should we be next); ours at once if every waiter ahead
    -- of us is gone (see hand_over).
    local reserved = hand_over(lock, q, ARGV[6], ARGV[7], me)
    if reserved == me then
      current = redis.call('GET', lock)
      take = true
      marked = string.byte(current, 1) == 126
    elseif reserved then
      current = '?' .. reserved
    else
      take = true
    end
  end
end
if take then
  local value = ARGV[1]
  if marked then
    value = '~' .. value
  end
  redis.call('SET', lock, value, 'PX', ARGV[2])
  local token = 0
  if ARGV[3] == '1' then
    token = draw_fence(KEYS[2])
  end
  return {1, token, '', 0, marked and 1 or 0}
end
local life = tonumber(ARGV[5]) + tonumber(ARGV[6])
local queue_ttl = redis.call('PTTL', q)
if ARGV[8] then
  redis.call('ZADD', q, ARGV[8], me)
else
  local t = redis.call('TIME')
  redis.call('ZADD', q, 'NX', t[1] .. string.format('%06d', tonumber(t[2])), me)
end
if queue_ttl < life then
  -- Twice the life, so that the next few waiters need not extend it again.
  redis.call('PEXPIRE', q, life + life)
end
-- The holder's release must now hand over.
mark_listened(lock, current)
-- A queue that did not exist holds us alone: first in line, without asking.
local position = 0
if queue_ttl ~= -2 then
  position = redis.call('ZRANK', q, me)
end
local reserved = 0
if string.byte(unmarked(current), 1) == 63 then
  reserved = 1
end
-- How long the lock stays as it is matters to the first two in line only.
local pttl = -1
if position < 2 then
  pttl = redis.call('PTTL', lock)
end
return {0, pttl, current, position, reserved}
