-- The rest of multi_release.lua, for the locks whose value someone may listen for: each is
-- reserved for the head of its queue (queue.lua's hand_over), or deleted when nobody
-- waits; then its release channel's subscribers are told, if any (as release.lua).
for _, i in ipairs(marked) do
  local lock, q = KEYS[2 * i - 1], KEYS[2 * i]
  if not hand_over(lock, q, ARGV[3], ARGV[4]) then
    redis.call('DEL', lock)
  end
  local channel = lock .. ':released'
  if ARGV[2] == '3' then
    publish(channel, 'released', true)
  elseif redis.call('PUBSUB', 'NUMSUB', channel)[2] > 0 then
    publish(channel, 'released', false)
  end
end
return given + #marked
