-- A user's script under the guard, after fenced_guard.lua: the user's text goes where the
-- `--@body` line is, as the body of a function of its own KEYS and ARGV (ours without the
-- guard's key and arguments), so that the same text runs here as it would alone.
-- Returns {1, the script's reply} when it ran, the guard's refusal otherwise. The guard
-- records the token once the script returned: a script that raises an error records
-- nothing (what it wrote before the error stays, as for any Redis script).
local refused, record = fence_check()
if refused then
  return refused
end
local keys, args = {}, {}
for i = 2, #KEYS do
  keys[i - 1] = KEYS[i]
end
for i = 3, #ARGV do
  args[i - 2] = ARGV[i]
end
local result = (function(KEYS, ARGV)
--@body
end)(keys, args)
fence_record(record)
return {1, result}
