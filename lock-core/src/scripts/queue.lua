-- The waiter queue of a lock, shared by the scripts that touch it (prepended to each).
-- q (ZSET): the waiting Lockers in line; member = the Locker's waiter id (the 16 hex digits
--   of its channel, then `:<holder label>` when it has one), score = when it first queued:
--   the server's time in microseconds (ZADD NX keeps a waiter's place), or on Redlock's
--   masters the waiter's ticket. The key lives as long as its longest-waiting entry could
--   (PEXPIRE on joining); a waiter that gives up takes its member out (leave_queue.lua).
-- The head is popped when the lock is reserved for it: the lock's value is then
-- `~?<member>` for the claim window (PX), so newcomers' SET NX fails and nobody barges; the
-- head claims it by putting its own value there, and if it never does (dead, paused,
-- partitioned), the reservation lapses by itself and the next in line, told to stand by,
-- takes the lock. A waiter that died while queued costs the line one claim window, when
-- its turn comes.
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

-- Marks the value `v` on the lock (nil: free) as listened for, keeping its TTL. On a
-- reservation the mark is passed on: its claim writes a marked value.
local function mark_listened(lock, v)
  if v and string.byte(v, 1) ~= 126 then
    redis.call('SET', lock, '~' .. v, 'KEEPTTL')
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

-- Tells waiter `member` (see above) `message` about `lock` on its Locker's channel:
-- `waiters` (the channels' common prefix, `<prefix>waiters:`) and the member's first 16
-- characters. A prefix that begins with '$' is a Cluster's, whose Lockers listen in the
-- lock's shard, on `<lock>:t:<channel>` (the lock's slot): told with SPUBLISH there (with
-- PUBLISH on the channel itself on a server without sharded pub/sub). The one place a
-- queue script tells a waiter.
-- Returns false when the message provably reached nobody: no connection listens on the
-- member's channel, so its Locker is gone (a process that died or was killed: Redis
-- dropped its subscription with its connection). True otherwise, and where the count
-- proves nothing (a Cluster's plain PUBLISH counts one node's listeners only).
local function notify(waiters, member, message, lock)
  local channel = waiters .. string.sub(member, 1, 16)
  if string.byte(channel, 1) == 36 then
    local heard = redis.pcall('SPUBLISH', lock .. ':t:' .. channel, message)
    if type(heard) == 'number' then
      return heard > 0
    end
    redis.call('PUBLISH', channel, message)
    return true
  end
  return redis.call('PUBLISH', channel, message) > 0
end

-- Reserves the free lock for the head of the queue for `window` ms (popping it), tells it
-- its turn ("g") and the one after it to stand by ("s": take the lock if the head has not
-- claimed it within the window; one that no longer listens is dropped, and the next told
-- instead). The reservation always carries the mark, and the head's claim passes it on:
-- under contention the releasing Locker queues again at once, and would otherwise have to
-- mark the reservation itself (one more call per hand-over); the price is one hand-over
-- path (a queue read) at the release that ends a run of contention.
-- A head whose Locker no longer listens (its process died while queued: the turn message
-- reached nobody) is dropped from the line instead, and the next one gets the turn: a
-- killed waiter costs the line nothing, where a reservation for it would have kept the
-- lock free for a whole claim window, one window per dead waiter in line. At most
-- `SKIP_DEAD` are dropped in one go (the rest at the next hand-over), so that a script's
-- work stays bounded. A waiter alive but cut off from its pub/sub connection at that
-- moment loses its place too; its Locker wakes its waiters when the connection comes
-- back, and they queue again.
-- `taker` (optional): the member of the Locker running the script, which takes a lock
-- reserved for itself at once, untold.
-- Returns the member the lock is now reserved for, or false when nobody (alive) waits.
local SKIP_DEAD = 8
local function hand_over(lock, q, window, waiters, taker)
  for skipped = 0, SKIP_DEAD do
    local line = redis.call('ZRANGE', q, 0, 1)
    local head, second = line[1], line[2]
    if not head then return false end
    redis.call('ZREM', q, head)
    local alive = head == taker
      or notify(waiters, head, 'g:' .. window .. ':' .. lock, lock)
      or skipped == SKIP_DEAD
    if alive then
      redis.call('SET', lock, '~?' .. head, 'PX', window)
      -- The one to stand by must listen too: a dead one would leave nobody to take the
      -- lock should the head not claim it. Dropped like a dead head, within the same bound.
      local dropped = skipped
      while second and head ~= taker
        and not notify(waiters, second, 's:' .. window .. ':' .. lock, lock)
        and dropped < SKIP_DEAD do
        redis.call('ZREM', q, second)
        dropped = dropped + 1
        second = redis.call('ZRANGE', q, 0, 0)[1]
      end
      return head
    end
  end
  return false
end
