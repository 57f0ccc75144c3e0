-- wrk script for Apache's floor under B2 (bench/b1b2-fronts.sh): B2's bodies, with B2's
-- headers, POSTed to /alive, which ENS answers at once (405): what the front itself
-- spends on a check-in-shaped request. Each connection waits GAP ms before each
-- request, so the requests arrive at B2's pace (a front's cost per request depends on
-- its pace, as the capacity work's fifth round found).
--   wrk ... -s bench/b2-paced-alive.lua URL/alive -- BODIES GAP
local bodies = {}
local index = 0
local gap = 0

function init(args)
  for line in io.lines(args[1]) do
    if #line > 0 then bodies[#bodies + 1] = line end
  end
  gap = tonumber(args[2])
  index = math.random(#bodies)
end

function delay()
  return gap
end

function request()
  index = index % #bodies + 1
  return wrk.format("POST", "/alive",
    {["Content-Type"] = "application/json", ["ApiToken"] = os.getenv("ENS_TOKEN")}, bodies[index])
end

function response(status, headers, body)
  if status ~= 405 then io.stderr:write("unexpected answer: " .. status .. "\n") end
end
