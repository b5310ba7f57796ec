-- Lighten a held permit in place (a read-write lock's writer stepping down to a reader):
-- its member becomes ARGV[2] (the same value, a smaller weight) with the same end, and the
-- weight it frees goes to the waiters in order in the same step, so that no other request
-- (a writer above all) takes it in between.
-- KEYS[1] holders and state, KEYS[2] queue
-- ARGV[1] the member held, ARGV[2] the lighter member, ARGV[3] claim window ms,
-- ARGV[4] the calling Locker's channel ('' when it polls)
-- Returns {1 when reweighed, 0 when the permit had ended (nothing is changed)}, then the
-- lines for waiters of the calling Locker, as permits_release.lua does.
local h, q = KEYS[1], KEYS[2]
local held, lighter = ARGV[1], ARGV[2]
local t = redis.call('TIME')
local now = math.floor((tonumber(t[1]) * 1000000 + tonumber(t[2])) / 1000)
local score = redis.call('ZSCORE', h, held)
if not score or tonumber(score) <= now then return { 0 } end
--[[permits_lib]]
local st = decode(redis.call('ZMSCORE', h, '#c', '#w', '#l', '#q', '#h', '#e', '#t', '#f'), now)
if not st.cap then return { 0 } end
redis.call('ZREM', h, held)
-- Its end is unchanged: `#l` (a bound on the first end) still holds.
redis.call('ZADD', h, score, lighter)
st.held = st.held - weight_of(held) + weight_of(lighter)
if st.held < 0 then st.held = 0 end
local window = tonumber(ARGV[3])
local out = outbox(h, ARGV[4] or '', window)
sweep(h, st, now)
-- The head may fit now: forget what was known of it not fitting.
st.hw, st.he = 0, 0
if st.nq > 0 then admit(h, q, st, now, window, '', 0, out) end
if st.nq <= 0 then st.nq, st.hw, st.he = 0, 0, 0 end
save(h, q, st)
flush(out)
local result = { 1 }
for _, line in ipairs(out.locals) do result[#result + 1] = line end
return result
