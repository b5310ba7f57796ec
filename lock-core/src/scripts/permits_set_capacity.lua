-- Set the capacity stored with a name while it is in use, and pin it: while the state
-- member `#p` is there, the stored number wins over the one a request asks for (see
-- permits_acquire.lua). Raising it hands the room it makes to the waiters in order at once
-- (told as a release tells them); lowering it takes nothing from a holder and grants
-- nothing until the held weight is below it. The pin lives as long as the keys: at least
-- ARGV[2] ms from now, longer while permits or waiters keep the keys alive.
-- KEYS[1] holders and state, KEYS[2] queue
-- ARGV[1] the capacity, ARGV[2] how long the keys (and the pin) live at least (ms),
-- ARGV[3] claim window ms, ARGV[4] the calling Locker's channel ('' when it polls)
-- Returns {the capacity before (0: none stored), the capacity now}, then the lines for
-- waiters of the calling Locker, as permits_release.lua does; or {-1, weight} when a live
-- waiter asks for more than the new capacity (nothing is changed).
local h, q = KEYS[1], KEYS[2]
local cap, pin_ttl = tonumber(ARGV[1]), tonumber(ARGV[2])
local window = tonumber(ARGV[3])
local t = redis.call('TIME')
local now = math.floor((tonumber(t[1]) * 1000000 + tonumber(t[2])) / 1000)
--[[permits_lib]]
local st = decode(redis.call('ZMSCORE', h, '#c', '#w', '#l', '#q', '#h', '#e', '#t', '#f'), now)
local before = st.cap or 0
if st.nq > 0 then
  -- A waiter asking for more than the new capacity could never be granted, and would
  -- hold back everyone behind it.
  local rows = redis.call('ZRANGE', q, 0, -1, 'WITHSCORES')
  for i = 1, #rows, 2 do
    local ent = entry_of(rows[i], rows[i + 1], window)
    if ent and ent.expiry > now and ent.weight > cap then return {-1, ent.weight} end
  end
end
sweep(h, st, now)
st.cap = cap
redis.call('ZADD', h, -1, '#p')
-- The head may fit now: forget what was known of it not fitting.
st.hw, st.he = 0, 0
local out = outbox(h, ARGV[4] or '', window)
if st.nq > 0 then admit(h, q, st, now, window, '', 0, out) end
if st.nq <= 0 then st.nq, st.hw, st.he = 0, 0, 0 end
if now + pin_ttl > st.kt then st.kt = now + pin_ttl end
save(h, q, st)
flush(out)
local result = { before, cap }
for _, line in ipairs(out.locals) do result[#result + 1] = line end
return result
