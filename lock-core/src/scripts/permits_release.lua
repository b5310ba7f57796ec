-- Give a permit back (and, for a request that gives up, its place in the queue), then hand
-- the freed capacity to the waiters in order.
-- KEYS[1] holders and state, KEYS[2] queue
-- ARGV[1] member, ARGV[2] claim window ms, ARGV[3] queue member leaving the queue ('' none),
-- ARGV[4] the calling Locker's channel ('' when it polls)
-- Returns {1 when the permit was still there, else 0 (nobody else's is touched)}, then one
-- line "<kind>:<ms>:<waiter id>" per waiter of the calling Locker handed a permit or told
-- when to look again (see the lib's `admit`). Needs no clock unless someone waits: a permit
-- that ended is released all the same (its holder's own clock says it was lost).
local h, q = KEYS[1], KEYS[2]
local member, leaving = ARGV[1], ARGV[3]
local ours = redis.call('ZREM', h, member)
local waiting = false
if ours == 1 then
  local w = -tonumber(redis.call('ZINCRBY', h, tonumber(string.match(member, '^(%d+) ')) or 1, '#w'))
  waiting = w > math.floor(w)
end
if not waiting and leaving == '' then return { ours } end
--[[permits_lib]]
local t = redis.call('TIME')
local now = math.floor((tonumber(t[1]) * 1000000 + tonumber(t[2])) / 1000)
local st = decode(redis.call('ZMSCORE', h, '#c', '#w', '#l', '#q', '#h', '#e', '#t', '#f'), now)
if not st.cap then
  -- Nothing is stored: the keys expired.
  return { ours }
end
if leaving ~= '' and st.nq > 0 and redis.call('ZREM', q, leaving) == 1 then
  st.nq = st.nq - 1
  -- It may have been the head.
  st.hw, st.he = 0, 0
end
local window = tonumber(ARGV[2])
local out = outbox(h, ARGV[4] or '', window)
sweep(h, st, now)
if st.nq > 0 then admit(h, q, st, now, window, '', 0, out) end
if st.nq <= 0 then st.nq, st.hw, st.he = 0, 0, 0 end
save(h, q, st)
flush(out)
local result = { ours }
for _, line in ipairs(out.locals) do result[#result + 1] = line end
return result
