-- Weighted permits: the engine of semaphores (weight 1, capacity N) and read-write locks
-- (readers weight 1, a writer weight = capacity, so it fits only when nobody holds).
-- Inserted into every permits_* script after its fast path, so that a call that takes or
-- gives back a permit with nobody waiting defines none of these functions. Every operation
-- costs O(log n) in the holders and waiters (plus O(1) per permit that ended or waiter
-- handed a permit): nothing is summed or walked.
--
-- h (ZSET): the holders and the name's state, in one key.
--   Holders: member "<weight> <value>", score = the server time (ms) the permit ends (> 0).
--   A reservation for a waiter of another Locker whose turn came is a holder whose score is
--   the end of its claim window: it counts against the capacity, so nobody barges past the
--   queue, and its claim only has to find it still there.
--   State: members starting with '#', scores stored negated (<= 0, so that no range of
--   ends ever meets them), each written only when it changes:
--     #c  the capacity stored with the name (set by the first request while it is idle;
--         every request must agree with it while anyone holds or waits)
--     #w  the total weight held (permits and reservations, ended ones not yet dropped),
--         plus 0.5 while anyone waits: a release reads it back from its ZINCRBY and knows
--         whether it must hand anything out
--     #l  a lower bound on the first end among the holders (0: none): below it nothing has
--         ended, so nothing is swept
--     #q  how many entries the queue holds
--     #h  the weight of the queue's head (0: not known), #e  until when its entry counts:
--         while the head does not fit, a release does not read the queue at all
--     #t  until when (server ms) the keys live: every permit and queue entry ends before
--     #f  when (server ms) a permit or reservation last ended sooner than every holder
--         then (lowered the first end): a blocked waiter that arrived later knows the
--         first end it has to look at by (its queued attempt read it, or a bound on it),
--         so only a head that arrived by then needs to be told when to look again
--   The key stays when the name falls idle (it expires at #t): no delete and re-arm per
--   cycle.
-- q (ZSET): waiters not yet handed a permit, in arrival order; score = arrival (server
--   us), member = the waiter's entry "<weight> <life ms> <ttl ms> <id> <channel length>
--   <channel><value>": it counts until arrival + life + the claim window; a waiter handed
--   its permit leaves the queue. The member is built by the waiter, the same on every
--   attempt, so it finds (and leaves) its place without a side table.
-- Times are the server's (TIME), never a client's clock.

local function decode(r, now)
  local w = r[2] and -tonumber(r[2]) or 0
  local held = math.floor(w)
  local st = {
    cap = r[1] and -tonumber(r[1]) or nil,
    held = held,
    lo = r[3] and -tonumber(r[3]) or 0,
    nq = r[4] and -tonumber(r[4]) or 0,
    hw = r[5] and -tonumber(r[5]) or 0,
    he = r[6] and -tonumber(r[6]) or 0,
    kt = r[7] and -tonumber(r[7]) or 0,
    lf = r[8] and -tonumber(r[8]) or 0,
    now = now, adds = {}, first = nil, qnew = false,
  }
  if st.held < 0 then st.held = 0 end
  if st.nq < 0 then st.nq = 0 end
  st.old = {
    cap = st.cap, w = w, lo = st.lo, nq = st.nq, hw = st.hw, he = st.he, kt = st.kt, lf = st.lf,
  }
  return st
end

local function weight_of(member)
  return tonumber(string.match(member, '^(%d+) ')) or 1
end

-- A holder to write with the state: `score` its end. One that ends before every holder
-- known (`lo` is a lower bound on their ends) lowers the first end: recorded in `lf`.
local function add(st, score, member)
  st.adds[#st.adds + 1] = score
  st.adds[#st.adds + 1] = member
  if st.lo == 0 or score < st.lo then
    st.lo = score
    st.lf = st.now
  end
  if st.first ~= nil and (st.first == false or score < st.first) then st.first = score end
end

-- The keys must live until `need` (ms): push their expiry out, twice as far as needed so
-- that steady traffic re-arms it rarely.
local function keep(st, need, now)
  if need > st.kt then st.kt = need + (need - now) end
end

-- Writes the pending holders and the state that changed (one ZADD), and re-arms the keys'
-- expiry when it moved.
local function save(h, q, st)
  local o = st.old
  local args = { 'ZADD', h }
  for i = 1, #st.adds do args[#args + 1] = st.adds[i] end
  local w = st.held
  if st.nq > 0 then w = w + 0.5 end
  local function put(value, old, name)
    if value ~= old then
      args[#args + 1] = -value
      args[#args + 1] = name
    end
  end
  put(st.cap, o.cap, '#c')
  put(w, o.w, '#w')
  put(st.lo, o.lo, '#l')
  put(st.nq, o.nq, '#q')
  put(st.hw, o.hw, '#h')
  put(st.he, o.he, '#e')
  put(st.kt, o.kt, '#t')
  put(st.lf, o.lf, '#f')
  if #args > 2 then redis.call(unpack(args)) end
  if st.kt ~= o.kt then
    redis.call('PEXPIREAT', h, st.kt)
    if st.nq > 0 then redis.call('PEXPIREAT', q, st.kt) end
  elseif st.qnew then
    redis.call('PEXPIREAT', q, st.kt)
  end
end

-- Milliseconds until the first live permit ends (-1: none held). Makes `lo` exact.
local function first_end(h, st, now)
  if st.first == nil then
    local first = redis.call('ZRANGEBYSCORE', h, '(0', '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
    local f = first[2] and tonumber(first[2]) or nil
    -- Holders not written yet end too.
    for i = 1, #st.adds, 2 do
      local score = st.adds[i]
      if not f or score < f then f = score end
    end
    st.first = f or false
    st.lo = f or 0
  end
  if st.first then return math.max(st.first - now, 0) end
  return -1
end

-- Drops the permits that ended (by the server's clock); a no-op below `lo`.
local function sweep(h, st, now)
  if st.held <= 0 or st.lo == 0 or now < st.lo then return end
  local ended = redis.call('ZRANGEBYSCORE', h, '(0', now)
  if #ended > 0 then
    for _, member in ipairs(ended) do st.held = st.held - weight_of(member) end
    if st.held < 0 then st.held = 0 end
    redis.call('ZREMRANGEBYSCORE', h, '(0', now)
  end
  first_end(h, st, now)
end

-- A queue member's fields, and until when it counts.
local function entry_of(member, score, window)
  local weight, life, ttl, id, clen, rest =
    string.match(member, '^(%d+) (%d+) (%d+) (%x+) (%d+) (.*)$')
  if not weight then return nil end
  clen = tonumber(clen)
  return {
    member = member, score = score, weight = tonumber(weight), ttl = tonumber(ttl), id = id,
    channel = string.sub(rest, 1, clen), value = string.sub(rest, clen + 1),
    expiry = math.floor(tonumber(score) / 1000) + tonumber(life) + window,
  }
end

-- What to tell whom, gathered while handing out: permits granted outright to another
-- Locker's waiters (`G` for one waiter, `B` listing them, with the server time of the
-- grant) and reservations for them to claim (`g` for one, `b` listing them), one message
-- per Locker and kind, and, for waiters of the calling Locker (`own`), lines returned in the
-- reply instead of a message.
local function outbox(h, own, window)
  return {
    h = h, own = own, window = window, chans = {}, by = {}, locals = {},
    gchans = {}, given = {},
  }
end

-- Publishes `msg` for the Locker listening on `channel`. A channel that begins with '$' is
-- a Cluster Locker's, which listens in the permit set's shard, on `<h>:t:<channel>` (the
-- holders key's slot): told with SPUBLISH there, so that the message stays in the shard
-- (with PUBLISH on the channel itself on a server without sharded pub/sub).
-- Returns false when the message provably reached nobody: no connection listens on the
-- channel, so its Locker is gone (its process died: Redis dropped its subscription with
-- its connection). True otherwise, and where the count proves nothing (a Cluster's plain
-- PUBLISH counts one node's listeners only).
local function send(out, channel, msg)
  if string.byte(channel, 1) == 36 then
    local heard = redis.pcall('SPUBLISH', out.h .. ':t:' .. channel, msg)
    if type(heard) == 'number' then return heard > 0 end
    redis.call('PUBLISH', channel, msg)
    return true
  end
  return redis.call('PUBLISH', channel, msg) > 0
end

-- The list kept for `channel` in `by`: created, and the channel added to `order` (the
-- order its messages go out in), the first time.
local function list_for(by, order, channel)
  local list = by[channel]
  if not list then
    list = {}
    by[channel] = list
    order[#order + 1] = channel
  end
  return list
end

-- A permit granted outright to `ent`, a waiter of another Locker, as holder `member`: told
-- by `give_told`.
local function give(out, ent, member)
  local list = list_for(out.given, out.gchans, ent.channel)
  list[#list + 1] = { id = ent.id, member = member, weight = ent.weight }
end

-- Drops the pending holder `member` (written by `add`, not yet saved).
local function unadd(st, member)
  for i = 1, #st.adds, 2 do
    if st.adds[i + 1] == member then
      table.remove(st.adds, i + 1)
      table.remove(st.adds, i)
      return
    end
  end
end

-- Tells each Locker the permits granted outright to its waiters since the last call, one
-- message each ("G:<server ms>:<h>#<id>", or "B:<server ms>:<id>,<id>,...:<h>"). A Locker
-- that provably heard nothing is gone: its grants are taken back (never written), and
-- true is returned, so that the caller hands the room to the next in line.
local function give_told(out, st, now)
  local took_back = false
  for _, channel in ipairs(out.gchans) do
    local list = out.given[channel]
    local msg
    if #list == 1 then
      msg = 'G:' .. now .. ':' .. out.h .. '#' .. list[1].id
    else
      local ids = {}
      for i, g in ipairs(list) do ids[i] = g.id end
      msg = 'B:' .. now .. ':' .. table.concat(ids, ',') .. ':' .. out.h
    end
    if not send(out, channel, msg) then
      for _, g in ipairs(list) do
        st.held = st.held - g.weight
        unadd(st, g.member)
      end
      if st.held < 0 then st.held = 0 end
      took_back = true
    end
  end
  out.gchans, out.given = {}, {}
  return took_back
end

local function tell(out, ent, kind, ms)
  if ent.channel == '' then return end
  if ent.channel == out.own then
    out.locals[#out.locals + 1] = kind .. ':' .. ms .. ':' .. ent.id
  elseif kind == 'g' then
    local ids = list_for(out.by, out.chans, ent.channel)
    ids[#ids + 1] = ent.id
  else
    send(out, ent.channel, kind .. ':' .. ms .. ':' .. out.h .. '#' .. ent.id)
  end
end

local function flush(out)
  for _, channel in ipairs(out.chans) do
    local ids = out.by[channel]
    if #ids == 1 then
      send(out, channel, 'g:' .. out.window .. ':' .. out.h .. '#' .. ids[1])
    else
      send(out, channel, 'b:' .. out.window .. ':' .. table.concat(ids, ',') .. ':' .. out.h)
    end
  end
end

-- One pass of `admit`: grants outright to other Lockers' waiters are gathered in `out`,
-- not yet told.
local function admit_once(h, q, st, now, window, me, ttl, out)
  local taken, handed, blocked, exhausted = false, false, nil, false
  -- The arrival (queue score) of the last waiter handed a permit.
  local last
  while st.nq > 0 and st.held < st.cap do
    if st.hw > 0 and st.he > now and st.held + st.hw > st.cap then break end
    local want = st.cap - st.held
    if st.hw > 1 then want = math.floor(want / st.hw) end
    want = math.max(math.min(want, 32), 1)
    local rows = redis.call('ZPOPMIN', q, want)
    local back = {}
    for i = 1, #rows, 2 do
      local ent = entry_of(rows[i], rows[i + 1], window)
      if blocked then
        back[#back + 1] = rows[i + 1]
        back[#back + 1] = rows[i]
      elseif not ent or ent.expiry <= now then
        st.nq = st.nq - 1
      elseif st.held + ent.weight <= st.cap then
        st.nq = st.nq - 1
        st.held = st.held + ent.weight
        handed = true
        last = ent.score
        local member = ent.weight .. ' ' .. ent.value
        if ent.member == me then
          add(st, now + ttl, member)
          keep(st, now + ttl, now)
          taken = true
        elseif ent.channel ~= '' and ent.channel == out.own then
          add(st, now + ent.ttl, member)
          keep(st, now + ent.ttl, now)
          tell(out, ent, 't', 0)
        elseif ent.channel ~= '' then
          add(st, now + ent.ttl, member)
          keep(st, now + ent.ttl, now)
          give(out, ent, member)
        else
          add(st, now + window, member)
          keep(st, now + window, now)
          tell(out, ent, 'g', window)
        end
      else
        blocked = ent
        back[#back + 1] = rows[i + 1]
        back[#back + 1] = rows[i]
      end
    end
    if #back > 0 then redis.call('ZADD', q, unpack(back)) end
    if #rows < want * 2 and not blocked then
      -- The whole queue was read, and every entry left it.
      exhausted = true
      st.nq = 0
    end
    if st.nq < 0 then st.nq = 0 end
    if blocked then
      st.hw, st.he = blocked.weight, blocked.expiry
      break
    end
    st.hw, st.he = 0, 0
    if exhausted then break end
  end
  if st.nq <= 0 then st.nq, st.hw, st.he = 0, 0, 0 end
  if handed and st.nq > 0 then
    -- Whoever is at the head now arrived after the last waiter handed a permit (the queue
    -- is in arrival order): unless the first end moved sooner since then, it needs no
    -- word (see below), and the queue is not read for it. Its weight stays unknown then:
    -- the next release reads the head as it hands out.
    if not blocked and math.floor(tonumber(last) / 1000) <= st.lf then
      local head = redis.call('ZRANGE', q, 0, 0, 'WITHSCORES')
      if head[1] then
        blocked = entry_of(head[1], head[2], window)
        if blocked then st.hw, st.he = blocked.weight, blocked.expiry end
      end
    end
    -- The blocked head is told when to look again if the first end was lowered since it
    -- arrived (its timer may be later than the first end now), or when that costs no
    -- message (a waiter of the calling Locker). Otherwise the first end is no sooner than
    -- the one its queued attempt told it (see `#f`): its own timer looks in time.
    if blocked and blocked.member ~= me
      and (blocked.channel == out.own or math.floor(tonumber(blocked.score) / 1000) <= st.lf) then
      -- When to look again: by the first end if known, else by the bound on it (a lower
      -- bound, never later than the true first end: at worst an early look; a reservation
      -- just made is among the holders, so both come no later than it lapses), else
      -- after a claim window.
      local at = st.first or (st.lo > now and st.lo) or (now + window)
      tell(out, blocked, 'h', math.max(at - now, 0))
    end
  end
  return taken
end

-- How many times a hand-out goes on past Lockers found gone, in one script (the rest at the
-- next one), so that a script's work stays bounded.
local GONE_ROUNDS = 8

-- Hands free capacity to the queue in arrival order: each waiter at the head that fits
-- leaves the queue with its permit. A waiter of the calling Locker (`out.own`) takes it
-- for its own TTL at once (it never leaves this process: the reply wakes it, granted). A
-- waiter of another Locker that listens gets it for its own TTL too, told "G" with the
-- server time of the grant, from which its Locker bounds the permit's validity on its own
-- clock: no claim follows (unless that Locker must have replicas acknowledge the grant: it
-- claims it then, and waits for them). A waiter that polls gets it reserved for `window`
-- ms and finds it at its next look.
-- The first that does not fit stops the walk (FIFO: no small request passes a large one)
-- and goes back in its place. If anything was handed out, the waiter now at the head is
-- told when to look again only if the first end moved sooner since it arrived (`#f`):
-- otherwise the first end it was told (or a bound on it) still comes no later, and its
-- own timer looks in time.
-- Waiter `me` (a queue member, or '') takes its permit for `ttl` ms directly. Expired
-- entries (dead, paused, gone waiters) at the head are dropped, and so are waiters granted
-- outright whose Locker provably heard nothing (its process died while they were queued):
-- their permits go to the next in line. While the head is known not to fit, nothing is
-- read: O(handed + 1) calls at most, O(1) when blocked.
-- Returns whether `me` took its permit.
local function admit(h, q, st, now, window, me, ttl, out)
  local taken = admit_once(h, q, st, now, window, me, ttl, out)
  for _ = 1, GONE_ROUNDS do
    if not give_told(out, st, now) then break end
    if st.nq <= 0 or st.held >= st.cap then break end
    -- The head may fit now: forget what was known of it not fitting.
    st.hw, st.he = 0, 0
    if admit_once(h, q, st, now, window, me, ttl, out) then taken = true end
  end
  -- Past the last round: told whatever came of it.
  give_told(out, st, now)
  return taken
end
