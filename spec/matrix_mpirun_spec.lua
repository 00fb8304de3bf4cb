-- matrix_mpirun_spec.lua - the mpirun launcher with Open MPI and with
-- MPICH (its hydra mpiexec, `command = "mpiexec.mpich"`): 4 ranks on this
-- host (Open MPI: --oversubscribe; root allowed, as CI runs as root). The
-- ranks learn their numbers from OMPI_COMM_WORLD_* or PMI_* and meet at the
-- coordinator; on one host the soft device's shared memory reaches between
-- them. Heavy: the normal build only.
local H = require("helpers")
local E = require("matrix_env")
local proc = require("tbrt.matrix.proc")
local task = require("tbrt.task")

local ARGS = { "--oversubscribe", "--allow-run-as-root" }

-- nil when command (mpirun: Open MPI's) can start processes here, else why not.
local function mpirun_skip(command, package)
  command = command or "mpirun"
  if not proc.which(command) then
    return command .. " is not installed (" .. (package or "openmpi-bin") .. ")"
  end
  local argv = { command }
  if command == "mpirun" then
    for _, a in ipairs(ARGS) do argv[#argv + 1] = a end
  end
  for _, a in ipairs { "-np", "1", "true" } do argv[#argv + 1] = a end
  local r = task.run(function() return proc.run(argv, { timeout = 30 }) end)
  if not r or r.code ~= 0 then
    return "mpirun cannot start a process here: " .. ((r and (r.stderr .. r.stdout)) or "timed out"):sub(1, 300)
  end
end

-- Run the matrix file `text` of 4 ranks and check every rank, cell and
-- measurement: the ranks numbered 0..3 from `rank_from`, ncells cells and
-- nmeas measurements, all ok.
local function run_4(text, rank_from, ncells, nmeas)
  local r, out, _, dir = E.run_matrix(text, {}, { timeout = 120 })
  assert.equal(0, r.code, H.describe(r))
  local list = E.results(out)
  local run = E.of_kind(list, "run")[1]
  assert.equal(4, #run.hosts)
  for i, h in ipairs(run.hosts) do
    assert.equal(i - 1, h.rank)
    assert.equal(rank_from, h.rank_from)
  end
  local cells_ = E.of_kind(list, "cell")
  assert.equal(ncells, #cells_)
  for _, c in ipairs(cells_) do assert.equal("ok", c.status, c.cell) end
  local n = 0
  for _, m in ipairs(E.of_kind(list, "measurement")) do
    assert.is_true(m.ok, m.error)
    n = n + 1
  end
  assert.equal(nmeas, n)
  H.rmtree(dir)
end

describe("tbrt matrix under mpirun", function()
  it("runs 4 Open MPI ranks pairwise and in bisection over tcp and soft", function()
    local why = E.heavy_skip() or mpirun_skip()
    if why then return pending(why) end
    run_4([[return {
  name = "mpi4",
  hosts = { mpirun = { np = 4, args = { "--oversubscribe", "--allow-run-as-root" } } },
  patterns = { "pairwise", "bisection" },
  axes = { device = { "tcp", "soft" }, size = { 4096, 65536 } },
  link = { personality = "linux-rc" },
  measure = { lat_bytes = 2 ^ 18, bw_bytes = 2 ^ 21 },
  timeout = 30,
}]], "openmpi", 8, 2 * 2 * (6 + 2))
  end)

  it("runs 4 MPICH ranks (hydra, PMI_RANK) pairwise over tcp and soft", function()
    local why = E.heavy_skip() or mpirun_skip("mpiexec.mpich", "mpich")
    if why then return pending(why) end
    -- 2 devices x the 6 pairs of 4 ranks
    run_4([[return {
  name = "mpich4",
  hosts = { mpirun = { np = 4, command = "mpiexec.mpich" } },
  patterns = { "pairwise" },
  axes = { device = { "tcp", "soft" }, size = { 4096 } },
  link = { personality = "linux-rc" },
  measure = { lat_bytes = 2 ^ 18, bw_bytes = 2 ^ 21 },
  timeout = 30,
}]], "pmi", 2, 2 * 6)
  end)
end)
