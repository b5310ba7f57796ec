-- Give up every lock of a multi-lock that still holds our value, in one script; the others
-- are left as they are (nobody else's lock is touched).
-- KEYS: two per lock, in order: its lock key and its queue (`<lock key>:q`), as release.lua
-- declares them (a Cluster routes by them)
-- ARGV[1] value, ARGV[2], ARGV[3] and ARGV[4] as release.lua's: "3" to announce a marked
-- release with SPUBLISH without asking PUBSUB NUMSUB (anything else: PUBLISH, only to
-- subscribers), the claim window in ms, the waiters' channel prefix
-- Returns how many locks held our value (all given up).
-- The common path first: one MGET over the lock keys, one DEL of those holding the
-- unmarked value (nobody listens for them). A value marked as listened for (see queue.lua)
-- goes the way release.lua takes it: the queue.lua functions and multi_release_listened.lua
-- follow this part, and are only defined when a release gets past it.
local locks = {}
for i = 2, #KEYS, 2 do
  locks[#locks + 1] = KEYS[i - 1]
end
local value, marked_value = ARGV[1], '~' .. ARGV[1]
local n = #locks
local given, marked = 0, {}
for first = 1, n, 1000 do
  local last = math.min(first + 999, n)
  local values = redis.call('MGET', unpack(locks, first, last))
  local plain = {}
  for j = 1, last - first + 1 do
    local current = values[j]
    if current == value then
      plain[#plain + 1] = locks[first + j - 1]
    elseif current == marked_value then
      marked[#marked + 1] = first + j - 1
    end
  end
  if #plain > 0 then
    redis.call('DEL', unpack(plain))
    given = given + #plain
  end
end
if #marked == 0 then
  return given
end
