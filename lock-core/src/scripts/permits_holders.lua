-- Who holds permits, by the server's clock, how many wait, and the stored capacity.
-- KEYS[1] holders and state, KEYS[2] queue, KEYS[3] queue entries
-- Returns {waiting, stored capacity (0: none, the name is idle), member1, ms left 1,
-- member2, ms left 2, ...}; reservations for a waiter whose turn came are listed as
-- holders. O(holders + waiters): an inspection, not on any acquisition's path.
local h = KEYS[1]
local now = clock()
local st = state(h, '#c')
local out = {0, 0}
local live = redis.call('ZRANGEBYSCORE', h, '(' .. num(now), '+inf', 'WITHSCORES')
for i = 1, #live, 2 do
  out[#out + 1] = live[i]
  out[#out + 1] = tonumber(live[i + 1]) - now
end
if st.nq > 0 then
  for _, raw in ipairs(redis.call('HVALS', KEYS[3])) do
    local ent = entry_of(raw)
    if ent and ent.expiry > now then out[1] = out[1] + 1 end
  end
end
if #live > 0 or out[1] > 0 then out[2] = st.cap or 0 end
return out
