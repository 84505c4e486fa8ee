-- slurm-synergy job_submit shim (Lua 5.1, Slurm 22.05's job_submit/lua API).
--
-- A job whose comment carries a workload fingerprint (synergy:fp=<16 hex digits>, as
-- `synergy submit` writes it):
--   * with a decision in the table: its cores (cpus_per_task, min_cpus, pn_min_cpus),
--     memory and GPUs are rewritten, the loader workers and GPU power limit go into its
--     environment, and the decision is noted in its comment (so sacct shows it);
--   * without one: it is marked for profiling (SYNERGY_PROFILE=1), if the site's policy
--     says so and the job did not set SYNERGY_PROFILE itself.
-- Every other job is left alone.
--
-- The table is compiled by `synergy plugin sync` into synergy-decisions.tbl beside this
-- file. Its first line holds a generation; each submission reads that line alone and
-- reloads the rest only when it changed.
--
-- The shim never forks, never calls a Slurm command and never rejects a job: on any
-- fault of its own (table missing, corrupt, hostile or too big; a Lua error) the job
-- goes through unchanged and slurmctld's log says why.

local SCRIPT_DIR = (debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$")) or "."
local TABLE_PATH = SCRIPT_DIR .. "/synergy-decisions.tbl"
local MAX_BYTES = 16 * 1024 * 1024
local MAX_ENTRIES = 200000
-- Whatever the table's header claims, no decision goes beyond these.
local HARD = { cpus = 65536, mem_mb = 64 * 1024 * 1024, gpus = 64, workers = 4096,
               power_w = 5000 }
local NO_VAL = 4294967294          -- Slurm's "not set" for 32-bit fields (and above)

local cache = nil    -- { line = first line, head, entries, broken = fingerprints of bad lines }
local last_fault = { msg = nil, at = 0 }

-- A fault is logged when it changes, and at most once a minute while it lasts.
local function fault(msg, whose)
	local now = os.time()
	if msg ~= last_fault.msg or now - last_fault.at >= 60 then
		slurm.log_error("slurm-synergy: %s; %s pass through unchanged", msg, whose or "jobs")
		last_fault.msg, last_fault.at = msg, now
	end
end

local function whole(text, low, high)
	local n = tonumber(text)
	if n == nil or n ~= math.floor(n) or n < low or n > high then
		return nil
	end
	return n
end

local function parse_header(line)
	if line == nil then
		return nil, "is empty"
	end
	local version, rest = line:match("^synergy%-decisions (%d+) (.*)$")
	if version ~= "1" then
		return nil, "is not a version 1 decision table"
	end
	local h = {}
	for key, value in rest:gmatch("([%a_]+)=([%w_%.%-]*)") do
		h[key] = value
	end
	local head = {
		gen = h.gen,
		partition = h.partition or "",
		user_wins = h.user_wins == "1",
		profile_new = h.profile_new == "1",
		max_cpus = whole(h.max_cpus, 1, HARD.cpus),
		max_mem_mb = whole(h.max_mem_mb, 1, HARD.mem_mb),
		max_gpus = whole(h.max_gpus, 0, HARD.gpus),
		entries = whole(h.entries, 0, MAX_ENTRIES),
	}
	for _, key in ipairs({ "max_cpus", "max_mem_mb", "max_gpus", "entries" }) do
		if head[key] == nil then
			return nil, "has a missing or out-of-range " .. key .. " in its header"
		end
	end
	if head.gen == nil or not head.gen:match("^%x+$") then
		return nil, "has no generation in its header"
	end
	return head
end

-- One entry line, checked against the header's limits and the hard ones; nil if bad.
local function parse_entry(line, head)
	local fp, c, m, g, t, w, p = line:match(
		"^(%x+) (%d+) (%d+) (%d+) ([%w_%.%-]+) (%d+) (%d+)$")
	if fp == nil or #fp ~= 16 or fp:match("[A-F]") or #t > 32 then
		return nil
	end
	local e = {
		cpus = whole(c, 1, math.min(head.max_cpus, HARD.cpus)),
		mem_mb = whole(m, 1, math.min(head.max_mem_mb, HARD.mem_mb)),
		gpus = whole(g, 0, math.min(head.max_gpus, HARD.gpus)),
		workers = whole(w, 0, HARD.workers),
		power_w = whole(p, 0, HARD.power_w),
		gpu_type = (t ~= "-") and t or nil,
	}
	if e.cpus == nil or e.mem_mb == nil or e.gpus == nil or e.workers == nil
			or e.power_w == nil then
		return nil
	end
	return fp, e
end

-- The table, from the cache while its first line is unchanged; nil and why on a fault.
local function load_table()
	local f, err = io.open(TABLE_PATH, "r")
	if f == nil then
		return nil, "cannot open the decision table (" .. tostring(err) .. ")"
	end
	local size = f:seek("end")
	if size == nil or size > MAX_BYTES then
		f:close()
		return nil, string.format("decision table %s is %s bytes, over the limit of %d",
			TABLE_PATH, tostring(size), MAX_BYTES)
	end
	f:seek("set", 0)
	local first = f:read("*l")
	if cache ~= nil and first == cache.line then
		f:close()
		return cache
	end
	local head, why = parse_header(first)
	if head == nil then
		f:close()
		return nil, "decision table " .. TABLE_PATH .. " " .. why
	end
	-- A bad line's workload is not re-profiled either: its jobs pass through unchanged.
	local entries, broken, count, bad, first_bad = {}, {}, 0, 0, nil
	for line in f:lines() do
		count = count + 1
		if count > head.entries then
			break
		end
		local fp, e = parse_entry(line, head)
		if fp then
			entries[fp] = e
		else
			bad = bad + 1
			first_bad = first_bad or (count + 1)
			local lead = line:match("^(%x+) ")
			if lead then
				broken[lead] = true
			end
		end
	end
	f:close()
	if count ~= head.entries then
		return nil, string.format("decision table %s has %s lines where its header "
			.. "says %d (cut short or tampered with)", TABLE_PATH,
			count > head.entries and "more" or tostring(count), head.entries)
	end
	if bad > 0 then
		fault(string.format("decision table %s generation %s has %d bad line(s), the "
			.. "first is line %d", TABLE_PATH, head.gen, bad, first_bad),
			"the jobs of those workloads")
	end
	cache = { line = first, head = head, entries = entries, broken = broken }
	slurm.log_info("slurm-synergy: loaded decision table %s generation %s: %d decision(s)",
		TABLE_PATH, head.gen, count - bad)
	return cache
end

local function is_set(n)
	return n ~= nil and n < NO_VAL
end

local function whole_text(n)
	return n and string.format("%.0f", n) or "?"
end

-- Why a decided job is left as asked, or nil: the decision is per task on one node of
-- the table's partition, and Slurm refuses --cpus-per-task or --mem beside their
-- per-GPU forms.
local function leave_alone(job_desc, head)
	if is_set(job_desc.num_tasks) and job_desc.num_tasks > 1
			or is_set(job_desc.min_nodes) and job_desc.min_nodes > 1
			or job_desc.ntasks_per_node ~= nil and job_desc.ntasks_per_node < 65534
				and job_desc.ntasks_per_node > 1 then
		return "more than one task or node: left as asked"
	end
	for _, field in ipairs({ "cpus_per_tres", "mem_per_tres", "tres_per_job",
			"tres_per_socket", "tres_per_task" }) do
		local value = job_desc[field]
		if value ~= nil and value ~= "" then
			return field .. " is set: left as asked"
		end
	end
	local part = job_desc.partition
	if part ~= nil and part ~= "" and part ~= head.partition then
		return "partition " .. part .. ": the decisions are sized for "
			.. (head.partition ~= "" and head.partition or "the default partition")
	end
	return nil
end

-- What to change in a job, worked out without touching it: nil when nothing.
local function plan(job_desc, tbl)
	local comment = job_desc.comment
	if comment == nil then
		return nil
	end
	local fp = comment:match("^synergy:fp=(%x+)")
	if fp == nil or #fp ~= 16 or fp:match("[A-F]") or tbl.broken[fp] then
		return nil
	end
	local env = job_desc.environment
	local entry = tbl.entries[fp]
	if entry == nil then
		if tbl.head.profile_new and env ~= nil and env.SYNERGY_PROFILE == nil then
			-- (user mode may have marked the comment already)
			local marked = (comment .. " "):find(" profile=1 ", 1, true)
			return { fp = fp, profile = true, comment = marked and comment
				or comment .. " profile=1" }
		end
		return nil
	end
	local why = leave_alone(job_desc, tbl.head)
	if why then
		return { fp = fp, skip = why }
	end
	local pinned = {}
	if tbl.head.user_wins then
		for word in (comment:match(" req=([%a,]+)") or ""):gmatch("%a+") do
			pinned[word] = true
		end
	end
	local p = { fp = fp, entry = entry, env = env ~= nil }
	local cpus, mem = job_desc.cpus_per_task, job_desc.pn_min_memory
	if not pinned.cpus then
		p.cpus, cpus = entry.cpus, entry.cpus
	end
	if not pinned.mem then
		p.mem_mb, mem = entry.mem_mb, entry.mem_mb
	end
	-- Workers follow the cores the job ends up with: one core stays with the trainer.
	p.workers = entry.workers
	if pinned.cpus and is_set(cpus) and cpus < 65534 then
		p.workers = math.max(1, cpus - 1)
	end
	local tpn = job_desc.tres_per_node
	local gpus = entry.gpus
	local count, gtype
	if tpn ~= nil then
		count = tpn:match("^gres:gpu:(%d+)$")
		if count == nil then
			gtype, count = tpn:match("^gres:gpu:([%w_%.%-]+):(%d+)$")
		end
	end
	if pinned.gpus or entry.gpus == 0 or count == nil then
		gpus = tonumber(count) or 0
	else
		-- The decision's GPU type where it names one, else the type the job asked for.
		gtype = entry.gpu_type or gtype
		p.tres_per_node = "gres:gpu:" .. (gtype and (gtype .. ":") or "") .. entry.gpus
	end
	local summary = string.format("c%s,m%s,g%d,w%d", whole_text(cpus), whole_text(mem),
		gpus, p.workers)
	if entry.power_w > 0 then
		summary = summary .. ",p" .. entry.power_w
	end
	-- What the job asked before the rewrite, so reports can set it beside the decision.
	local asked_mem = job_desc.pn_min_memory
	local asked = string.format("c%s,m%s,g%s",
		-- cpus_per_task is 16-bit: 65534 (NO_VAL16) is "not set".
		(is_set(job_desc.cpus_per_task) and job_desc.cpus_per_task < 65534)
			and whole_text(job_desc.cpus_per_task) or "-",
		(is_set(asked_mem) and asked_mem < 2 ^ 40) and whole_text(asked_mem) or "-",
		count or "0")
	p.comment = comment:gsub(" decision=%S*", ""):gsub(" asked=%S*", "")
		.. " asked=" .. asked .. " decision=" .. summary
	return p
end

local function apply(job_desc, p)
	if p.profile then
		job_desc.environment.SYNERGY_PROFILE = "1"
		job_desc.comment = p.comment
		return "no decision yet: marked for profiling"
	end
	local before = string.format("cpus %s, mem %s MB, %s", tostring(job_desc.cpus_per_task),
		tostring(job_desc.pn_min_memory), tostring(job_desc.tres_per_node))
	if p.cpus then
		job_desc.cpus_per_task = p.cpus
		-- slurmctld does not derive these again from cpus_per_task.
		job_desc.min_cpus = p.cpus
		job_desc.pn_min_cpus = p.cpus
	end
	if p.mem_mb then
		job_desc.pn_min_memory = p.mem_mb
	end
	if p.tres_per_node then
		job_desc.tres_per_node = p.tres_per_node
	end
	job_desc.comment = p.comment
	if p.env then
		job_desc.environment.SYNERGY_WORKERS = tostring(p.workers)
		if p.entry.power_w > 0 then
			job_desc.environment.SYNERGY_POWER_LIMIT_W = tostring(p.entry.power_w)
		end
	end
	return string.format("%s -> cpus %s, mem %s MB, %s, workers %d", before,
		tostring(job_desc.cpus_per_task), tostring(job_desc.pn_min_memory),
		tostring(job_desc.tres_per_node), p.workers)
end

local SAVED = { "cpus_per_task", "min_cpus", "pn_min_cpus", "pn_min_memory",
	"tres_per_node", "comment" }

function slurm_job_submit(job_desc, part_list, submit_uid)
	local ok, err = pcall(function()
		local tbl, why = load_table()
		if tbl == nil then
			-- Without a readable table the policy is unknown too: nothing is marked.
			if job_desc.comment ~= nil and job_desc.comment:match("^synergy:fp=") then
				fault(why)
			end
			return
		end
		local p = plan(job_desc, tbl)
		if p == nil then
			return
		end
		local name = tostring(job_desc.name)
		if p.skip then
			slurm.log_info("slurm-synergy: job %s (uid %s, fp %s): %s", name,
				tostring(submit_uid), p.fp, p.skip)
			return
		end
		local saved = {}
		for _, field in ipairs(SAVED) do
			saved[field] = job_desc[field]
		end
		local done, result = pcall(apply, job_desc, p)
		if done then
			slurm.log_info("slurm-synergy: job %s (uid %s, fp %s): %s", name,
				tostring(submit_uid), p.fp, result)
			return
		end
		-- Put back what was changed before the error, then report it.
		for _, field in ipairs(SAVED) do
			if saved[field] ~= nil then
				pcall(function() job_desc[field] = saved[field] end)
			end
		end
		error(result, 0)
	end)
	if not ok then
		fault("error in job_submit.lua: " .. tostring(err))
	end
	return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
	return slurm.SUCCESS
end

slurm.log_info("slurm-synergy: job_submit.lua loaded; decision table %s", TABLE_PATH)
return slurm.SUCCESS
