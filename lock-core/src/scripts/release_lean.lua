-- Give the lock up if it still holds our value, for a value granted without the listened-
-- for mark (see queue.lua): a compare-and-delete with nothing else to send. Should a waiter
-- have marked the value since, nothing is touched and the caller runs release.lua, which
-- hands the lock over.
-- KEYS[1] lock key; ARGV[1] value
-- Returns 1 when deleted, 0 when the lock was no longer ours, 2 when it is ours but marked.
local current = redis.call('GET', KEYS[1])
if current == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
if current == '~' .. ARGV[1] then
  return 2
end
return 0
