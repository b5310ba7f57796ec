-- The rest of multi_release.lua, for the locks whose value someone may listen for: each is
-- handed over to its queue's first live waiter (queue.lua's hand_over), or deleted when
-- nobody waits; then its release channel's subscribers are told, if any (as release.lua).
local now
for _, i in ipairs(marked) do
  local lock, q, e = KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i]
  local handed = false
  if redis.call('EXISTS', q) == 1 then
    now = now or clock()
    handed = hand_over(lock, q, e, now, ARGV[3])
  end
  if not handed then
    redis.call('DEL', lock)
  end
  local channel = lock .. ':released'
  if ARGV[2] == '2' or redis.call('PUBSUB', 'NUMSUB', channel)[2] > 0 then
    redis.call('PUBLISH', channel, 'released')
  end
end
return given + #marked
