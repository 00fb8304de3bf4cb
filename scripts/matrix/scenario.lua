-- scenario.lua - a pattern of your own: every host streams to all the
-- others at once (an all-to-all), each link checked by perf. A scenario
-- runs on every rank with ctx = { rank, size, peers, cell, opts, link,
-- measure, serve, done, log }; what it returns is recorded (a perf row
-- becomes latency and bandwidth figures).
--   build/tbrt matrix scripts/matrix/scenario.lua --out /tmp/a2a
local function all_to_all(ctx)
  local task = require("tbrt.task")
  local jobs = {}
  for peer = 0, ctx.size - 1 do
    if peer ~= ctx.rank then
      jobs[#jobs + 1] = function()
        local l = assert(ctx.link(peer))
        -- the lower rank of each pair measures, the other answers
        if ctx.rank < peer then
          local row = ctx.measure(l, ctx.cell.size, { bw_only = true, iters = 64 })
          ctx.done(l)
          l:close()
          return row.bw_push
        end
        assert(ctx.serve(l))
        l:close()
        return 0
      end
    end
  end
  local got = assert(task.all(jobs, ctx.timeout))
  local sum = 0
  for _, v in ipairs(got) do sum = sum + v end
  return { bw_out_gbps = sum }
end

return {
  name = "all-to-all",
  hosts = { ["local"] = 4 },
  patterns = { { name = "all_to_all", scenario = all_to_all } },
  axes = { device = { "tcp", "soft" }, size = { 65536, "1M" } },
  link = { personality = "linux-rc" },
  timeout = 60,
}
