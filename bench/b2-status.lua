-- wrk script for B2: POST /getsubscriptionstatusv2 with pre-sealed bodies, round robin.
local bodies = {}
local index = 0

function init(args)
  for line in io.lines(args[1]) do
    if #line > 0 then bodies[#bodies + 1] = line end
  end
  index = math.random(#bodies)
end

function request()
  index = index % #bodies + 1
  return wrk.format("POST", "/getsubscriptionstatusv2",
    {["Content-Type"] = "application/json", ["ApiToken"] = os.getenv("ENS_TOKEN")}, bodies[index])
end

function response(status, headers, body)
  if status ~= 200 or not body:find("UserSubscribed", 1, true) then
    io.stderr:write("unexpected answer: " .. status .. " " .. body .. "\n")
  end
end
