-- wrk script for B6: replays real new-mail SendNotification callbacks (one per
-- registered user, from bench/devices.py b6-setup), round robin, to their sealed URLs.
local requests = {}
local index = 0

function init(args)
  -- Each line: the callback path, a tab, and the file holding its SOAP body.
  for line in io.lines(args[1]) do
    local path, file = line:match("^(%S+)\t(%S+)$")
    if path then
      local handle = assert(io.open(file, "rb"))
      local body = handle:read("*a")
      handle:close()
      requests[#requests + 1] = wrk.format("POST", path, {["Content-Type"] = "text/xml; charset=utf-8"}, body)
    end
  end
  index = math.random(#requests)
end

function request()
  index = index % #requests + 1
  return requests[index]
end

function response(status, headers, body)
  if status ~= 200 or not body:find(">OK<", 1, true) then
    io.stderr:write("unexpected answer: " .. status .. " " .. body:sub(1, 200) .. "\n")
  end
end
