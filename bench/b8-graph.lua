-- wrk script for B8: replays Graph change-notification batches, each for a different
-- new message (from bench/devices.py b8-setup), in order, to their notification URLs.
local requests = {}
local index = 0
local threads = 0

function setup(thread)
  thread:set("id", threads)
  threads = threads + 1
end

function init(args)
  -- Each line: the notification path, a tab, and the JSON batch on one line.
  for line in io.lines(args[1]) do
    local path, body = line:match("^(%S+)\t(.+)$")
    if path then
      requests[#requests + 1] = wrk.format("POST", path, {["Content-Type"] = "application/json; charset=utf-8"}, body)
    end
  end
  -- Each of wrk's (two) threads takes its own half of the messages.
  index = math.floor(#requests * (id or 0) / 2)
end

function request()
  index = index % #requests + 1
  return requests[index]
end

function response(status, headers, body)
  if status ~= 202 then
    io.stderr:write("unexpected answer: " .. status .. " " .. body:sub(1, 200) .. "\n")
  end
end
