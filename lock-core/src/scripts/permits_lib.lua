-- Weighted permits: the engine of semaphores (weight 1, capacity N) and read-write locks
-- (readers weight 1, a writer weight = capacity, so it fits only when nobody holds).
-- Prepended to every permits_* script.
-- h (ZSET): holders; member "<weight> <value>", score = the server time (ms) the permit
--   ends. A reservation for a waiter whose turn came is a holder whose score is the end of
--   its claim window: it counts against the capacity, so nobody barges past the queue.
-- q (ZSET): waiters in arrival order; member = waiter id, score = arrival (server us).
-- e (HASH): field "cap": the capacity stored with the name (set by the first request while
--   it is idle; every request must agree with it while anyone holds or waits); and waiter
--   id -> "<expiry ms> <capacity> <weight> <channel length> <channel><value>" (until when
--   the entry counts, the waiter's capacity and weight, where to tell it). Waiter ids are
--   hex tokens, never "cap". The hash lives as long as the last permit or queue entry.
-- Times are the server's (TIME), never a client's clock.

local function clock()
  local t = redis.call('TIME')
  local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  return math.floor(us / 1000), us
end

local function num(x)
  return string.format('%.0f', x)
end

local function weight_of(member)
  return tonumber(string.match(member, '^(%d+) ')) or 1
end

-- Drops ended permits; returns the live holders' total weight.
local function load(h, now)
  redis.call('ZREMRANGEBYSCORE', h, '-inf', num(now))
  local sum = 0
  for _, member in ipairs(redis.call('ZRANGE', h, 0, -1)) do
    sum = sum + weight_of(member)
  end
  return sum
end

-- Milliseconds until the first live permit ends, -1 when nobody holds one.
local function first_end(h, now)
  local first = redis.call('ZRANGE', h, 0, 0, 'WITHSCORES')
  if first[2] then return tonumber(first[2]) - now end
  return -1
end

-- The holders key, and the entries hash with the stored capacity, live as long as the last
-- permit (the entries hash longer if a queue entry needs it).
local function keep_holders(h, e, now)
  local last = redis.call('ZRANGE', h, -1, -1, 'WITHSCORES')
  if last[2] then
    local ms = math.max(tonumber(last[2]) - now, 1)
    redis.call('PEXPIRE', h, num(ms))
    if redis.call('PTTL', e) < ms then redis.call('PEXPIRE', e, num(ms)) end
  end
end

local function entry_of(e, id)
  local raw = redis.call('HGET', e, id)
  if not raw then return nil end
  local expiry, cap, weight, clen, rest = string.match(raw, '^(%d+) (%d+) (%d+) (%d+) (.*)$')
  if not expiry then return nil end
  clen = tonumber(clen)
  return { expiry = tonumber(expiry), cap = tonumber(cap), weight = tonumber(weight),
           channel = string.sub(rest, 1, clen), value = string.sub(rest, clen + 1) }
end

local function encode(expiry, ent)
  return num(expiry) .. ' ' .. num(ent.cap) .. ' ' .. num(ent.weight) .. ' '
    .. #ent.channel .. ' ' .. ent.channel .. ent.value
end

-- Tells waiter `id` on its Locker's channel: "g" (claim your reserved permit now) or "h"
-- (you are first in line: look again in `ms`, when the first permit ends). Polling waiters
-- (no channel) are told nothing.
local function tell(h, ent, id, kind, ms)
  if ent.channel ~= '' then
    redis.call('PUBLISH', ent.channel, kind .. ':' .. num(math.max(ms, 0)) .. ':' .. h .. '#' .. id)
  end
end

local function dequeue(q, e, id)
  redis.call('ZREM', q, id)
  redis.call('HDEL', e, id)
end

-- Hands free capacity to the queue in arrival order: every waiter that fits gets its permit
-- reserved for `window` ms and is told "g"; the first that does not fit stops everyone
-- behind it (FIFO: no small request passes a large one). Waiter `me` (an id, or '') is
-- given its permit for `ttl` ms directly. Expired entries (dead, paused, gone waiters) are
-- dropped on the way. When `announce` is true or a permit was handed out, the first
-- blocked waiter is told when to look again.
-- Returns: whether `me` took its permit, `me`'s place among the blocked waiters (0 = first,
-- -1 = not blocked), whether anyone is blocked, and the total weight held afterwards.
local function admit(h, q, e, now, window, sum, cap, me, ttl, announce)
  local blocked, place, taken, handed = nil, -1, false, false
  for _, id in ipairs(redis.call('ZRANGE', q, 0, -1)) do
    local ent = entry_of(e, id)
    if not ent or ent.expiry <= now then
      dequeue(q, e, id)
    else
      local member = num(ent.weight) .. ' ' .. ent.value
      if redis.call('ZSCORE', h, member) then
        -- Reserved already (it counts in `sum`).
      elseif blocked == nil and sum + ent.weight <= (cap or ent.cap) then
        sum = sum + ent.weight
        handed = true
        if id == me then
          redis.call('ZADD', h, num(now + ttl), member)
          dequeue(q, e, id)
          taken = true
        else
          redis.call('ZADD', h, num(now + window), member)
          redis.call('HSET', e, id, encode(now + window, ent))
          tell(h, ent, id, 'g', window)
        end
      else
        blocked = { id = id, ent = ent }
        if id == me then
          place = 0
        elseif me ~= '' then
          -- Our place among the blocked waiters is our rank after the first of them: the
          -- entries in between need not be read (walking them made every queued attempt
          -- cost two calls per waiter ahead). Expired ones among them are dropped when
          -- they reach the front.
          local mine, first = redis.call('ZRANK', q, me), redis.call('ZRANK', q, id)
          if mine and mine > first then place = mine - first end
        end
        break
      end
    end
  end
  if blocked and (announce or handed) and blocked.id ~= me then
    tell(h, blocked.ent, blocked.id, 'h', first_end(h, now))
  end
  return taken, place, blocked ~= nil, sum
end
