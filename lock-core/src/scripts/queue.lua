-- The waiter queue of a lock, shared by the scripts that touch it (prepended to each).
-- q (ZSET): waiters in arrival order; member = the waiting Locker's channel, score = the
--   server time it first queued, in microseconds (ZADD NX keeps a waiter's place).
-- e (HASH): member -> "<expiry ms> <value>": until when the entry counts (the waiter's
--   deadline, or the end of its claim window once the lock is reserved for it), and the
--   value the lock is reserved with for it.
-- Times are the server's (TIME), never a client's clock.
--
-- The lock's value starts with '~' (a "listened" mark) while someone may wait for its
-- release: a queued waiter, or `lockctl watch`. Only a release of a marked value looks at
-- the queue and the release channel; any other release is a plain compare-and-delete (GET,
-- DEL), as cheap as a lock without a queue. The mark never changes the token or the TTL.

-- A value without its mark.
local function unmarked(v)
  if v and string.byte(v, 1) == 126 then
    return string.sub(v, 2)
  end
  return v
end

-- Marks the value on the lock (if any) as listened for, keeping its TTL.
local function mark_listened(lock)
  local v = redis.call('GET', lock)
  if v and string.byte(v, 1) ~= 126 then
    redis.call('SET', lock, '~' .. v, 'KEEPTTL')
  end
end

-- The server's time: milliseconds (entry expiries) and microseconds (arrival order).
local function clock()
  local t = redis.call('TIME')
  local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  return math.floor(us / 1000), us
end

-- expiry, value of a waiter's entry (nil when it has none)
local function entry_of(e, waiter)
  local raw = redis.call('HGET', e, waiter)
  if not raw then return nil, nil end
  local space = string.find(raw, ' ', 1, true)
  if not space then return nil, nil end
  return tonumber(string.sub(raw, 1, space - 1)), string.sub(raw, space + 1)
end

-- The first waiter whose entry still counts, and its value; expired ones (dead, paused,
-- partitioned or gone waiters) are dropped on the way.
-- Stops once it dropped the last entry: on a Cluster whose slot is migrating, a script may
-- not touch a key it emptied (Redis answers "non local key").
local function live_head(q, e, now)
  while true do
    local two = redis.call('ZRANGE', q, 0, 1)
    local head = two[1]
    if not head then return nil, nil end
    local expiry, value = entry_of(e, head)
    if expiry and expiry > now then return head, value end
    redis.call('ZREM', q, head)
    redis.call('HDEL', e, head)
    if not two[2] then return nil, nil end
  end
end

-- Publishes `msg` on `channel`: with SPUBLISH when `sharded` (a Redis Cluster's sharded
-- pub/sub: the message stays in the channel's shard instead of reaching every node),
-- falling back to PUBLISH on a server without it (before Redis 7).
local function publish(channel, msg, sharded)
  if sharded and type(redis.pcall('SPUBLISH', channel, msg)) == 'number' then
    return
  end
  redis.call('PUBLISH', channel, msg)
end

-- Tells queued waiter `to` (its Locker's channel) `msg` about `lock`. A channel that begins
-- with '$' is a Locker on a Cluster that listens in the lock's shard, on
-- `<lock>:t:<channel>` (the lock's slot); on a server without sharded pub/sub it listens on
-- its channel, as every other Locker does.
local function tell(to, msg, lock)
  if string.byte(to, 1) == 36 then
    if type(redis.pcall('SPUBLISH', lock .. ':t:' .. to, msg)) == 'number' then
      return
    end
  end
  redis.call('PUBLISH', to, msg)
end

-- Reserves the free lock for the queue's live head for `window` ms (its value on the key,
-- so newcomers' SET NX fails and nobody barges), tells the head ("g") and the one after it
-- ("s": take over if the head has not claimed it within the window). False when nobody
-- waits.
local function hand_over(lock, q, e, now, window)
  local head, value = live_head(q, e, now)
  if not head then return false end
  redis.call('SET', lock, value, 'PX', window)
  redis.call('HSET', e, head, (now + tonumber(window)) .. ' ' .. value)
  tell(head, 'g:' .. window .. ':' .. lock, lock)
  local second = redis.call('ZRANGE', q, 1, 1)[1]
  if second then
    tell(second, 's:' .. window .. ':' .. lock, lock)
  end
  return true
end
