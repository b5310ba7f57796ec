-- Who holds permits, by the server's clock, and how many wait.
-- KEYS[1] holders, KEYS[2] queue, KEYS[3] queue entries
-- Returns {waiting, stored capacity (0: none, the name is idle), member1, ms left 1, member2, ms left 2, ...}; reservations for a waiter
-- whose turn came are listed as holders.
local h = KEYS[1]
local now = clock()
local out = {0, tonumber(redis.call('HGET', KEYS[3], 'cap')) or 0}
local live = redis.call('ZRANGEBYSCORE', h, '(' .. num(now), '+inf', 'WITHSCORES')
for i = 1, #live, 2 do
  out[#out + 1] = live[i]
  out[#out + 1] = tonumber(live[i + 1]) - now
end
for _, id in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
  local ent = entry_of(KEYS[3], id)
  if ent and ent.expiry > now then out[1] = out[1] + 1 end
end
return out
