-- Runs etc/job_submit.lua outside slurmctld, for the unit tests (tests/unit/test_job_submit.py).
-- usage: lua5.1 harness.lua SHIM JOBS [PARTITIONS]
-- JOBS holds jobs as "key=value" lines (env.NAME=value for the environment, argv.N=value
-- for the script's argv (argv.0 its path), script_from=FILE for the batch script's text,
-- fail_on=FIELD to make writing FIELD raise, table_from=FILE to put FILE's text at the
-- decision table's path just before this job, as a sync between two submissions would),
-- separated by blank lines; a value's newlines, returns and backslashes escaped. PARTITIONS is what slurmctld
-- would hand the shim: "name:total_cpus:total_nodes:default[:max_mem_per_node],..."
-- (default gpu:16:1:1). Prints each job's fields after slurm_job_submit, and everything
-- the shim logged; with HARNESS_TIMES=1, the CPU seconds the shim took on each job.

slurm = { SUCCESS = 0, ERROR = -1 }
local logs = {}
slurm.log_info = function(fmt, ...) table.insert(logs, "info " .. string.format(fmt, ...)) end
slurm.log_error = function(fmt, ...) table.insert(logs, "error " .. string.format(fmt, ...)) end

local function numeric(key)
	return key == "cpus_per_task" or key == "min_cpus" or key == "pn_min_cpus"
		or key == "pn_min_memory" or key == "num_tasks" or key == "min_nodes"
		or key == "ntasks_per_node"
end

local function make_job(fields)
	local data, env, fail_on = {}, {}, fields.fail_on
	local argv = nil
	for key, value in pairs(fields) do
		local name = key:match("^env%.(.*)$")
		local index = key:match("^argv%.(%d+)$")
		if name then
			env[name] = value
		elseif index then
			argv = argv or {}
			argv[tonumber(index)] = value
		elseif key == "script_from" then
			data.script = assert(io.open(value, "rb")):read("*a")
		elseif key ~= "fail_on" and key ~= "table_from" then
			data[key] = numeric(key) and tonumber(value) or value
		end
	end
	-- slurmctld hands argc beside argv (argv[0] counted); argc=N in JOBS overrides it, as
	-- a client of libslurm may send any.
	if argv ~= nil and data.argc == nil then
		local n = 0
		while argv[n] ~= nil do n = n + 1 end
		data.argc = n
	end
	if data.argc ~= nil then data.argc = tonumber(data.argc) end
	-- srun and salloc jobs reach job_submit without an environment.
	local environment = nil
	if not fields.no_env then
		environment = setmetatable({}, {
			__index = env, __newindex = function(_, k, v) env[k] = v end })
	end
	data.no_env = nil
	local job = setmetatable({}, {
		__index = function(_, k)
			if k == "environment" then return environment end
			if k == "argv" then
				-- slurmctld builds the table anew, every string pushed again, at each
				-- read: a pass over its bytes, as sub's is (it meets the string interned).
				if argv == nil then return nil end
				local copy = {}
				for n, v in pairs(argv) do copy[n] = v:sub(1) end
				return copy
			end
			if k == "script" then
				-- ... and copies the script at each read too.
				return data.script and data.script:sub(1)
			end
			return data[k]
		end,
		__newindex = function(_, k, v)
			if k == fail_on then error("refused to set " .. k) end
			if v == "" then v = nil end     -- slurmctld unsets a string field set to ""
			data[k] = v
		end })
	return job, data, env
end

local part_list = {}
for spec in (arg[3] or "gpu:16:1:1"):gmatch("[^,]+") do
	local name, cpus, nodes, default, mem = spec:match("^([^:]+):(%d+):(%d+):(%d):?(%d*)$")
	part_list[name] = { name = name, total_cpus = tonumber(cpus), total_nodes = tonumber(nodes),
		flag_default = tonumber(default), max_cpus_per_node = 4294967294,
		max_mem_per_node = tonumber(mem) or 2 ^ 64 - 2 }
end

local loaded = dofile(arg[1])
assert(loaded == slurm.SUCCESS, "the shim did not return slurm.SUCCESS when loaded")

local jobs, current = {}, {}
for line in io.lines(arg[2]) do
	if line == "" then
		if next(current) then table.insert(jobs, current) end
		current = {}
	else
		local k, v = line:match("^([^=]+)=(.*)$")
		-- Values are written escaped (\n, \r, \\), so that one may hold a newline.
		current[k] = v:gsub("\\(.)", { n = "\n", r = "\r", ["\\"] = "\\" })
	end
end
if next(current) then table.insert(jobs, current) end

local table_path = (arg[1]:match("^(.*)/[^/]*$") or ".") .. "/synergy-decisions.tbl"
for i, fields in ipairs(jobs) do
	if fields.table_from then
		local text = assert(io.open(fields.table_from)):read("*a")
		local out = assert(io.open(table_path, "w"))
		out:write(text)
		out:close()
	end
	local job, data, env = make_job(fields)
	local started = os.clock()
	local rc = slurm_job_submit(job, part_list, 1000)
	local took = os.clock() - started
	print("JOB " .. i .. " rc=" .. tostring(rc))
	-- HARNESS_TIMES=1: the CPU time the shim took on each job (bench/bench_shim.py).
	if os.getenv("HARNESS_TIMES") == "1" then
		print(string.format("TIME %d %.6f", i, took))
	end
	local keys = {}
	for k in pairs(data) do table.insert(keys, k) end
	for k in pairs(env) do table.insert(keys, "env." .. k) end
	table.sort(keys)
	for _, k in ipairs(keys) do
		local name = k:match("^env%.(.*)$")
		if k ~= "script" and k ~= "argc" then       -- the tests know them
			print(k .. "=" .. tostring(name and env[name] or data[k]))
		end
	end
end
for _, line in ipairs(logs) do print("LOG " .. line) end
