-- The rest of release.lua, for a release someone may listen for: hand over to the head of
-- the queue, or delete; then tell the release channel's subscribers, if any.
-- Without KEYS[2] the queue's key was left out because it does not exist (see release.lua):
-- nobody is in line.
if not (KEYS[2] and hand_over(KEYS[1], KEYS[2], ARGV[3], ARGV[4])) then
  redis.call('DEL', KEYS[1])
end
local channel = KEYS[1] .. ':released'
if ARGV[2] == '3' then
  publish(channel, 'released', true)
elseif ARGV[2] == '2' or redis.call('PUBSUB', 'NUMSUB', channel)[2] > 0 then
  publish(channel, 'released', false)
end
return 1
