-- The waits-for records of one lock that count, for tools (lockctl waits).
-- KEYS[1] lock key, KEYS[2] its waits-for hash (see waits_for.lua).
-- Returns {holder value or '', {by records}, {for records}}:
--   a by record: {remaining ms, held key 1, held value 1, ...}: a waiter waits for this
--     lock (while its current holder holds it) holding those leases (not checked here);
--   a for record: {lock key waited for, its holder when recorded, remaining ms}: this
--     lock's holder waits for that lock.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local current = redis.call('GET', KEYS[1])
if not current then
  return {'', {}, {}}
end
if string.byte(current, 1) == 126 then current = string.sub(current, 2) end
local by, waits = {}, {}
local raw = redis.call('HGETALL', KEYS[2])
for i = 1, #raw, 2 do
  local ok, record = pcall(cjson.decode, raw[i + 1])
  if ok and type(record) == 'table' and tonumber(record.x or 0) > now then
    local left = tonumber(record.x) - now
    if string.sub(raw[i], 1, 3) == 'by:' then
      if record.t == current and type(record.held) == 'table' then
        local entry = {left}
        for j = 1, #record.held do entry[#entry + 1] = record.held[j] end
        by[#by + 1] = entry
      end
    elseif record.h == current then
      waits[#waits + 1] = {record.k, record.t, left}
    end
  end
end
return {current, by, waits}
