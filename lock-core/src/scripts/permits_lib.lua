-- Weighted permits: the engine of semaphores (weight 1, capacity N) and read-write locks
-- (readers weight 1, a writer weight = capacity, so it fits only when nobody holds).
-- Prepended to every permits_* script. Every operation costs O(log n) in the holders and
-- waiters (plus O(1) per permit that ended or waiter handed a permit): nothing is summed or
-- walked.
--
-- h (ZSET): the holders and the name's state, in one key.
--   Holders: member "<weight> <value>", score = the server time (ms) the permit ends (> 0).
--   A reservation for a waiter whose turn came is a holder whose score is the end of its
--   claim window: it counts against the capacity, so nobody barges past the queue.
--   State: members starting with '#', scores stored negated (<= 0, so that no range of
--   ends ever meets them):
--     #c  the capacity stored with the name (set by the first request while it is idle;
--         every request must agree with it while anyone holds or waits)
--     #w  the total weight held (permits and reservations, ended ones not yet dropped)
--     #l  a lower bound on the first end among the holders (0: none): below it nothing has
--         ended, so nothing is swept
--     #q  how many entries the queue holds
--     #t  until when (server ms) the keys live: every permit and queue entry ends before
--   The key is deleted when the name falls idle (nothing held, nobody queued).
-- q (ZSET): waiters not yet handed a permit, in arrival order; member = waiter id, score =
--   arrival (server us). A waiter handed its permit leaves the queue.
-- e (HASH): waiter id -> "<expiry ms> <capacity> <weight> <channel length> <channel><value>"
--   (until when the entry counts, the capacity it asked for, its weight, where to tell it),
--   for every waiter in the queue and every reservation not claimed yet (whose waiter it
--   is; gone at the claim, or with the keys once the name falls idle).
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

local function neg(x)
  if x then return -tonumber(x) end
  return nil
end

-- The name's state, and `member`'s end (nil when it holds nothing), in one call.
local function state(h, member)
  local r = redis.call('ZMSCORE', h, '#c', '#w', '#l', '#q', '#t', member)
  local lo = neg(r[3]) or 0
  return {
    cap = neg(r[1]), held = neg(r[2]) or 0, lo = lo, nq = neg(r[4]) or 0,
    kt = neg(r[5]) or 0, adds = {}, dirty = false, rearm = false, first = nil,
  }, (r[6] and tonumber(r[6])) or nil
end

-- A holder to write with the state: `score` its end.
local function add(st, score, member)
  st.adds[#st.adds + 1] = num(score)
  st.adds[#st.adds + 1] = member
  if st.lo == 0 or score < st.lo then st.lo = score end
  if st.first ~= nil and (st.first == false or score < st.first) then st.first = score end
  st.dirty = true
end

-- The keys must live until `need` (ms): push their expiry out, twice as far as needed so
-- that steady traffic re-arms it rarely.
local function keep(st, need, now)
  if need > st.kt then
    st.kt = need + (need - now)
    st.rearm = true
  end
end

-- Writes the state and the pending holders (one ZADD), and re-arms the keys' expiry.
local function save(h, q, e, st)
  if st.dirty or st.rearm then
    local args = { 'ZADD', h,
      num(-st.cap), '#c', num(-st.held), '#w', num(-st.lo), '#l', num(-st.nq), '#q',
      num(-st.kt), '#t' }
    for _, x in ipairs(st.adds) do args[#args + 1] = x end
    redis.call(unpack(args))
  end
  if st.rearm then
    redis.call('PEXPIREAT', h, num(st.kt))
    if st.nq > 0 then
      redis.call('PEXPIREAT', q, num(st.kt))
      redis.call('PEXPIREAT', e, num(st.kt))
    end
  end
end

-- Milliseconds until the first live permit ends (-1: none held). Makes `lo` exact.
local function first_end(h, st, now)
  if st.first == nil then
    local first = redis.call('ZRANGEBYSCORE', h, '(0', '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
    local f = first[2] and tonumber(first[2]) or nil
    -- Holders not written yet end too.
    for i = 1, #st.adds, 2 do
      local score = tonumber(st.adds[i])
      if not f or score < f then f = score end
    end
    st.first = f or false
    local lo = f or 0
    if lo ~= st.lo then st.lo = lo; st.dirty = true end
  end
  if st.first then return st.first - now end
  return -1
end

-- Drops the permits that ended (by the server's clock); a no-op below `lo`.
local function sweep(h, st, now)
  if st.held <= 0 or st.lo == 0 or now < st.lo then return end
  local ended = redis.call('ZRANGEBYSCORE', h, '(0', num(now))
  if #ended > 0 then
    for _, member in ipairs(ended) do st.held = st.held - weight_of(member) end
    redis.call('ZREMRANGEBYSCORE', h, '(0', num(now))
    st.dirty = true
  end
  first_end(h, st, now)
end

local function entry_of(raw)
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

-- Hands free capacity to the queue in arrival order: each waiter at the head that fits gets
-- its permit reserved for `window` ms (it leaves the queue) and is told "g"; the first that
-- does not fit stops the walk (FIFO: no small request passes a large one), and is told when
-- to look again if anything was handed out. Waiter `me` (an id, or '') takes its permit for
-- `ttl` ms directly. Expired entries (dead, paused, gone waiters) at the head are dropped.
-- Reads the head a few entries at a time, and only while capacity is free: O(handed + 1).
-- Returns whether `me` took its permit.
local function admit(h, q, e, st, now, window, me, ttl)
  local taken, handed, blocked = false, false, nil
  while st.nq > 0 and st.held < st.cap and not blocked do
    local batch = math.min(st.cap - st.held, 16) + 1
    local ids = redis.call('ZRANGE', q, 0, batch - 1)
    if #ids == 0 then
      st.nq = 0
      st.dirty = true
      break
    end
    local raws = redis.call('HMGET', e, unpack(ids))
    local gone, dropped, reserved = {}, {}, {}
    for i, id in ipairs(ids) do
      local ent = entry_of(raws[i])
      if not ent or ent.expiry <= now then
        gone[#gone + 1] = id
        dropped[#dropped + 1] = id
      elseif st.held + ent.weight <= st.cap then
        gone[#gone + 1] = id
        st.held = st.held + ent.weight
        handed = true
        local member = num(ent.weight) .. ' ' .. ent.value
        if id == me then
          add(st, now + ttl, member)
          keep(st, now + ttl, now)
          dropped[#dropped + 1] = id
          taken = true
        else
          add(st, now + window, member)
          keep(st, now + window, now)
          -- The entry stays (not in the queue) until the claim, counting for the claim
          -- window only: it says whose the reservation is.
          reserved[#reserved + 1] = id
          reserved[#reserved + 1] = encode(now + window, ent)
          tell(h, ent, id, 'g', window)
        end
      else
        blocked = { id = id, ent = ent }
        break
      end
    end
    if #gone > 0 then
      redis.call('ZREM', q, unpack(gone))
      st.nq = st.nq - #gone
      st.dirty = true
    end
    if #dropped > 0 then redis.call('HDEL', e, unpack(dropped)) end
    if #reserved > 0 then redis.call('HSET', e, unpack(reserved)) end
    if not blocked and #ids < batch then
      -- The whole queue was read, and every entry left it.
      st.nq = 0
      break
    end
  end
  if handed and st.nq > 0 then
    if not blocked then
      local head = redis.call('ZRANGE', q, 0, 0)[1]
      if head then
        local ent = entry_of(redis.call('HGET', e, head))
        if ent then blocked = { id = head, ent = ent } end
      end
    end
    if blocked and blocked.id ~= me then
      -- When to look again: by the first end if known, else by the bound on it (a lower
      -- bound, never later than the true first end: at worst an early look), and at the
      -- latest when the reservations just made lapse.
      local at = now + window
      if st.first then at = math.min(at, st.first)
      elseif st.lo > now then at = math.min(at, st.lo) end
      tell(h, blocked.ent, blocked.id, 'h', at - now)
    end
  end
  return taken
end
