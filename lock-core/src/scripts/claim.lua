-- A waiter's claim of the lock reserved for it (`?<member>`, see queue.lua), on a Cluster,
-- as soon as it is told its turn. It declares the lock key and nothing of the queue: the
-- release that reserved the lock popped the waiter from the queue, and deleted the queue's
-- key if that was its last entry. While the lock's slot migrates between nodes, Redis
-- refuses a script whose declared keys are only partly present (TRYAGAIN) until the
-- migration ends, longer than the claim window; this one runs wherever the lock key is.
-- The claim is the queued attempt's (acquire_queued.lua): the same value, mark and fencing
-- token. Anything but a reservation for us is left alone (the queued attempt follows).
-- KEYS[1] lock key, KEYS[2] fencing counter (the lock key again when no token is drawn)
-- ARGV[1] value, ARGV[2] ttl in ms, ARGV[3] "1" to draw a fencing token, ARGV[4] waiter
-- (the Locker's member in the queue)
-- Returns {1, fencing token or 0, 1 if our value carries the mark} when claimed,
--         {0, 0, 0} when the lock is not reserved for us.
local current = redis.call('GET', KEYS[1])
if not current then
  return {0, 0, 0}
end
local marked = string.byte(current, 1) == 126
local reserved = current
if marked then
  reserved = string.sub(current, 2)
end
if reserved ~= '?' .. ARGV[4] then
  return {0, 0, 0}
end
local value = ARGV[1]
if marked then
  value = '~' .. value
end
redis.call('SET', KEYS[1], value, 'PX', ARGV[2])
local token = 0
if ARGV[3] == '1' then
  token = draw_fence(KEYS[2])
end
return {1, token, marked and 1 or 0}
