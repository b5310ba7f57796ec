-- Deadlock detection: a waiter that holds other leases records what it waits for, unless
-- that would close a cycle of waiters, which it reports instead (it is the victim).
--
-- KEYS come in pairs: a lock key, then its waits-for hash (`<lock key>:wf`).
--   Pair 1: the lock waited for (W). Pairs 2 .. 1+n: the locks the waiter holds.
--   Further pairs: other locks the walk may read (asked for by an earlier reply).
-- ARGV[1] the wait's id (a field in each held lock's hash), ARGV[2] how long the record
--   counts, in ms (the wait's remaining time), ARGV[3] n, ARGV[4 .. 3+n] the held values
--   (unmarked), ARGV[4+n] the holder of W seen by this wait's last record ('' if none),
--   ARGV[5+n] '1' to record even when the walk could not read every lock it reached.
--
-- A record, in the hash of each lock L the waiter holds: field = wait id, value = JSON
--   {h = the waiter's value on L, k = W's lock key, t = W's holder when recorded,
--    x = until when it counts (server ms)}; and in W's own hash, field 'by:' .. wait id,
--   value JSON {t = W's holder when recorded, x = as above, held = {key1, value1, ...}}:
--   who waits for W while holding what (for tools; the walk does not read it).
-- A record counts only while L still holds h, W still holds t (a grant, a release or an
-- expiry changes the holder, and values are never reused) and x has not passed; a wait
-- that ends deletes it. So every cycle found through counted records is a cycle of
-- requests that hold what the previous one waits for, as of this script.
--
-- Replies: {0}: W is free (nothing recorded; earlier records of this wait deleted)
--          {1, holder}: recorded, the walk saw every lock it reached
--          {2, key, ...}: nothing recorded; the walk needs these lock keys declared
--          {3, key1, holder1, key2, holder2, ...}: a cycle: W (key1) held by holder1, who
--            waits for key2, ..., the last held by this waiter; nothing recorded (and
--            earlier records of this wait deleted)
--          {4, holder}: recorded; some locks reached could not be read (not declared)
--          {5}: W's holder is the one recorded before: nothing to do
--          {6}: the waiter no longer holds any of the given leases: nothing recorded
local id, life, n = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local seen_before, force = ARGV[4 + n], ARGV[5 + n] == '1'
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- The waits-for hash of each declared lock key.
local hash_of = {}
for i = 1, #KEYS, 2 do
  hash_of[KEYS[i]] = KEYS[i + 1]
end

local function holder(key)
  local v = redis.call('GET', key)
  if not v then return nil end
  if string.byte(v, 1) == 126 then v = string.sub(v, 2) end
  return v
end

-- The leases the waiter still holds: its value -> true; and the hashes to record in.
local mine, held = {}, {}
for i = 1, n do
  local key, value = KEYS[2 * i + 1], ARGV[3 + i]
  if holder(key) == value then
    mine[value] = true
    held[#held + 1] = {KEYS[2 * i + 2], value, key}
  end
end

local function forget()
  for i = 1, n do
    redis.call('HDEL', KEYS[2 * i + 2], id)
  end
  redis.call('HDEL', KEYS[2], 'by:' .. id)
end

if #held == 0 then
  forget()
  return {6}
end
local wanted = KEYS[1]
local top = holder(wanted)
if not top then
  forget()
  return {0}
end
if seen_before ~= '' and seen_before == top then
  return {5}
end

-- Walks from W: a lock -> (its holder's counted records) -> the locks they wait for.
local function cycle_from(key, parent, value_of)
  local path = {}
  while key do
    table.insert(path, 1, value_of[key])
    table.insert(path, 1, key)
    key = parent[key]
  end
  table.insert(path, 1, 3)
  return path
end

local value_of, parent, visited = {[wanted] = top}, {}, {[wanted] = true}
if mine[top] then
  forget()
  return cycle_from(wanted, parent, value_of)
end
local frontier, need, needed = {wanted}, {}, false
local head = 1
while frontier[head] do
  local key = frontier[head]
  head = head + 1
  local h = value_of[key]
  local raw = redis.call('HGETALL', hash_of[key])
  for i = 1, #raw, 2 do
    local ok, record = pcall(cjson.decode, raw[i + 1])
    if ok and type(record) == 'table' and record.h == h and tonumber(record.x or 0) > now then
      local target = record.k
      if not hash_of[target] then
        if not need[target] then
          need[target] = true
          need[#need + 1] = target
          needed = true
        end
      elseif not visited[target] then
        local th = holder(target)
        if th and th == record.t then
          visited[target] = true
          parent[target] = key
          value_of[target] = th
          if mine[th] then
            forget()
            return cycle_from(target, parent, value_of)
          end
          frontier[#frontier + 1] = target
        end
      end
    end
  end
end

if needed and not force then
  local reply = {2}
  for i = 1, #need do reply[#reply + 1] = need[i] end
  return reply
end

-- Record, in each held lock's hash; drop the records there that no longer count.
local until_ms = now + life
for i = 1, #held do
  local hash, value, key = held[i][1], held[i][2], held[i][3]
  local raw = redis.call('HGETALL', hash)
  for j = 1, #raw, 2 do
    if string.sub(raw[j], 1, 3) ~= 'by:' then
      local ok, record = pcall(cjson.decode, raw[j + 1])
      if not ok or type(record) ~= 'table' or record.h ~= value
          or tonumber(record.x or 0) <= now then
        redis.call('HDEL', hash, raw[j])
      end
    end
  end
  redis.call('HSET', hash, id, cjson.encode({h = value, k = wanted, t = top,
    x = string.format('%d', until_ms)}))
  if redis.call('PTTL', hash) < life then
    redis.call('PEXPIRE', hash, life)
  end
end
local by, list = KEYS[2], {}
for i = 1, #held do
  list[#list + 1] = held[i][3]
  list[#list + 1] = held[i][2]
end
local raw = redis.call('HGETALL', by)
for j = 1, #raw, 2 do
  if string.sub(raw[j], 1, 3) == 'by:' then
    local ok, record = pcall(cjson.decode, raw[j + 1])
    if not ok or type(record) ~= 'table' or tonumber(record.x or 0) <= now
        or record.t ~= top then
      redis.call('HDEL', by, raw[j])
    end
  end
end
redis.call('HSET', by, 'by:' .. id, cjson.encode({t = top, x = string.format('%d', until_ms),
  held = list}))
if redis.call('PTTL', by) < life then
  redis.call('PEXPIRE', by, life)
end
if needed then
  return {4, top}
end
return {1, top}
