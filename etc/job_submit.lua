-- slurm-synergy job_submit shim (Lua 5.1, Slurm 22.05's job_submit/lua API).
--
-- A job whose comment carries a workload fingerprint (synergy:fp=<16 hex digits>, as
-- `synergy submit` writes it):
--   * with a decision in the table for this fingerprint and the submitting uid (a
--     decision comes from the profile of the user whose jobs it sizes): its cores (cpus_per_task, min_cpus, pn_min_cpus),
--     memory and GPUs are rewritten, the loader workers and GPU power limit go into its
--     environment, and the decision is noted in its comment (so sacct shows it);
--   * without one: it is marked for profiling (SYNERGY_PROFILE=1), if the site's policy
--     says so and the job did not set SYNERGY_PROFILE itself.
-- A plain batch job (any other sbatch script), where the site's policy covers plain
-- scripts (plain=1 in the table's header): the shim computes its workload key from what
-- it sees (slurm_synergy/model/plainkey.py: the script less its comments, its arguments,
-- folder, GPUs, tasks and partition, the user), puts it in front of the job's comment
-- (synergy:fp=<key> plain=1, the user's own comment kept after it), in its admin comment
-- (which only admins can change) and in its environment (SYNERGY_FINGERPRINT and
-- SYNERGY_PLAIN, for the node's TaskProlog), and from there treats it as above. A job whose comment says
-- synergy:off, an interactive job (no script), and a job in a partition, account or of
-- a user the policy skips are left alone.
--
-- Our jobs and batch jobs make it look at its table, synergy-decisions.tbl beside this file,
-- compiled by `synergy plugin sync`. The table is opened only when it is a regular file
-- of bounded size, without blocking (lua-posix), and read again whenever its size,
-- times or inode change. What it would write is checked against the cluster: the job's
-- own partition (as asked, else the default) must be the table's, and cores, memory,
-- GPU count and type within what that partition's nodes have (slurmctld's partition
-- record, and the node facts sync took from sinfo).
--
-- The shim never forks, never calls a Slurm command and never rejects a job: on any
-- fault of its own (table missing, corrupt, hostile or too big; a Lua error) the job
-- goes through unchanged and slurmctld's log says why.

local SCRIPT_DIR = (debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$")) or "."
-- The marks, the table's name, format and hard bounds, the plain-script key's constants
-- and the environment a job must not inherit are Python's (model/comment.py,
-- model/plainkey.py, decisions/table.py, environment.py): `synergy plugin install`
-- writes them here; a test holds this copy to the same.
-- BEGIN CONTRACT (rendered from Python at install: slurm_synergy/plugin/contract.py)
local TABLE_NAME = "synergy-decisions.tbl"
local TABLE_MAGIC = "synergy-decisions"
local TABLE_FORMAT = 5
local MAX_BYTES = 16777216
local MAX_ENTRIES = 200000
local HARD = { cpus = 65536, mem_mb = 67108864, gpus = 64, workers = 4096, power_w = 5000, procs = 256 }
local FINGERPRINT_PREFIX = "synergy:fp="
local FINGERPRINT_HEX = 16
local OPT_OUT = "synergy:off"
local HETERO = "synergy:hetero"
local KEY_VERSION = "synergy-plain-1"
local KEY_BUDGET = 65536
local KEY_MODULI = { { 131, 2147483647 }, { 137, 2147483629 } }
local INHERITED = {
	"SYNERGY_FINGERPRINT",
	"SYNERGY_PLAIN",
	"SYNERGY_PROFILE",
	"SYNERGY_WORKERS",
	"SYNERGY_POWER_LIMIT_W",
	"SYNERGY_PROBE_DIR",
	"SYNERGY_PROBE_CONFIG",
	"SYNERGY_TASK_ANCHOR",
	"SYNERGY_TASK_PYTHON",
}
-- END CONTRACT
local TABLE_PATH = SCRIPT_DIR .. "/" .. TABLE_NAME
local NO_VAL = 4294967294          -- Slurm's "not set" for 32-bit fields (and above)
-- Slurm refuses a comment longer than this, after job_submit: room is kept for the marks.
local MAX_COMMENT = 1024
local COMMENT_ROOM = 160

-- Without lua-posix there is no way to tell a FIFO from a file before opening it, so
-- the table is not read at all (and the log says so).
local posix_ok, P = pcall(function()
	return { stat = require("posix.sys.stat"), fcntl = require("posix.fcntl"),
		unistd = require("posix.unistd") }
end)

-- Text a user chose (a job name, a partition, a QOS) as a log line may hold it: control
-- characters, backslashes and bytes past ASCII written as \ddd, cut at `most` bytes, so
-- that no name can start a line of its own in slurmctld's log or pass for another.
local function shown(text, most)
	text = tostring(text)
	most = most or 200
	if #text > most then
		text = text:sub(1, most) .. "..."
	end
	return (text:gsub("[%c\\\128-\255]", function(c)
		return string.format("\\%03d", c:byte())
	end))
end

-- One line of the shim's in slurmctld's log, every value shown() (slurm.log_info does
-- not escape: a newline in a job name would forge a line).
local function note(fmt, ...)
	local args, n = { ... }, select("#", ...)
	for i = 1, n do
		args[i] = shown(args[i])
	end
	-- unpack is Lua 5.1's; later Luas, which newer Slurm packages link, have table.unpack.
	slurm.log_info(fmt, (table.unpack or unpack)(args, 1, n))
end

local cache = nil    -- { id = file identity, racy, text, head, body = first entry, tail = last line }
local last_fault = { msg = nil, at = 0 }

-- A fault is logged when it changes, and at most once a minute while it lasts.
local function fault(msg, whose)
	local now = os.time()
	if msg ~= last_fault.msg or now - last_fault.at >= 60 then
		slurm.log_error("slurm-synergy: %s; %s pass through unchanged", shown(msg, 1000),
			whose or "jobs")
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
	local magic, version, rest = line:match("^(%S+) (%d+) (.*)$")
	if magic ~= TABLE_MAGIC or version ~= tostring(TABLE_FORMAT) then
		return nil, "is not a version " .. TABLE_FORMAT .. " decision table"
	end
	local h = {}
	for key, value in rest:gmatch("([%a_]+)=([%w_%.%-,:]*)") do
		h[key] = value
	end
	-- The GPU types the partition's nodes have (sync reads them from sinfo).
	local types = {}
	for t in (h.gpu_types or ""):gmatch("[%w_%.%-]+") do
		types[t] = true
	end
	-- Names the policy leaves alone: partitions, accounts, uids.
	local function set_of(list)
		local out = {}
		for name in (list or ""):gmatch("[^,]+") do
			out[name] = true
		end
		return out
	end
	-- Each QOS's per-job caps (0: none), for a job that names its QOS.
	local qos = {}
	for name, c, m, g in (h.qos or ""):gmatch("([%w_%.%-]+):c(%d+):m(%d+):g(%d+)") do
		qos[name] = { cpus = tonumber(c), mem_mb = tonumber(m), gpus = tonumber(g) }
	end
	-- Slurm lowercases a job's account after job_submit; the policy's names are compared so.
	local accounts = set_of((h.skip_accounts or ""):lower())
	local head = {
		gen = h.gen,
		partition = h.partition or "",
		user_wins = h.user_wins == "1",
		profile_new = h.profile_new == "1",
		plain = h.plain == "1",
		skip_partitions = set_of(h.skip_partitions),
		skip_accounts = accounts,
		skip_uids = set_of(h.skip_uids),
		max_cpus = whole(h.max_cpus, 1, HARD.cpus),
		max_mem_mb = whole(h.max_mem_mb, 1, HARD.mem_mb),
		max_gpus = whole(h.max_gpus, 0, HARD.gpus),
		entries = whole(h.entries, 0, MAX_ENTRIES),
		gpu_types = types,
		qos = qos,
		limits = h.limits == "1",
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

local function is_fingerprint(fp)
	return fp ~= nil and #fp == FINGERPRINT_HEX and not fp:match("[A-F]")
end

-- One entry line, checked against the header's limits and the hard ones; nil if bad.
-- "<uid> <fp> none": the workload's last marked run had nothing to measure.
local function parse_entry(line, head)
	if line:match("^%d+ %x+ none$") then
		return { none = true }
	end
	local u, fp, c, m, g, t, w, p, n, sh = line:match(
		"^(%d+) (%x+) (%d+) (%d+) (%d+) ([%w_%.%-]+) (%d+) (%d+) (%d+) ([01])$")
	if not is_fingerprint(fp) or #t > 32 or #u > 10 then
		return nil
	end
	local e = {
		cpus = whole(c, 1, math.min(head.max_cpus, HARD.cpus)),
		mem_mb = whole(m, 1, math.min(head.max_mem_mb, HARD.mem_mb)),
		gpus = whole(g, 0, math.min(head.max_gpus, HARD.gpus)),
		workers = whole(w, 0, HARD.workers),
		power_w = whole(p, 0, HARD.power_w),
		procs = whole(n, 1, HARD.procs),
		gpu_type = (t ~= "-") and t or nil,
		shared = sh == "1",
	}
	if e.cpus == nil or e.mem_mb == nil or e.gpus == nil or e.workers == nil
			or e.power_w == nil or e.procs == nil then
		return nil
	end
	return e
end

-- Order of two keys: uid as a number, then fingerprint (lowercase hex, fixed width).
local function sorts_before(u1, f1, u2, f2)
	if u1 ~= u2 then
		return u1 < u2
	end
	return f1 < f2
end

-- The entry of (uid, fp): found by halving over the body's lines, which sync writes
-- sorted (decisions/table.py), so a lookup reads about twenty lines of a table at its
-- cap. nil when there is none; nil and true when the line found, or one on the way, is
-- malformed (the job then passes unchanged, its workload not marked either).
local function find_entry(tbl, uid, fp)
	local text, lo, hi = tbl.text, tbl.body, tbl.tail
	-- Line starts are searched in [lo, hi); lo is always one.
	while lo < hi do
		local mid = math.floor((lo + hi) / 2)
		local s = lo
		if mid > lo then
			local nl = text:find("\n", mid - 1, true)
			s = nl and (nl + 1) or hi
		end
		if s >= hi then
			hi = mid
		else
			local e = text:find("\n", s, true)
			local line = text:sub(s, e - 1)
			local u, f = line:match("^(%d+) (%x+) ")
			u = tonumber(u)
			if u == nil or not is_fingerprint(f) then
				return nil, true
			end
			if u == uid and f == fp then
				local entry = parse_entry(line, tbl.head)
				return entry, entry == nil
			elseif sorts_before(u, f, uid, fp) then
				lo = e + 1
			else
				hi = s
			end
		end
	end
	return nil
end

-- What identifies one version of the file: any write changes its ctime, which nobody
-- can set back.
local function identity(st)
	return string.format("%.0f:%.0f:%.0f:%.0f:%.0f", st.st_dev, st.st_ino, st.st_size,
		st.st_mtime, st.st_ctime)
end

-- The table's text and identity, or nil and why. Never blocks: a FIFO, socket or
-- directory is refused before it is opened, and O_NONBLOCK covers a swap in between.
local function read_file()
	if not posix_ok then
		return nil, nil, "lua-posix is not installed (Debian: lua-posix), so the decision "
			.. "table cannot be opened safely"
	end
	local st, err = P.stat.stat(TABLE_PATH)
	if st == nil then
		return nil, nil, "cannot open the decision table (" .. tostring(err) .. ")"
	end
	if P.stat.S_ISREG(st.st_mode) == 0 then
		return nil, nil, "decision table " .. TABLE_PATH .. " is not a regular file"
	end
	if st.st_size > MAX_BYTES then
		return nil, nil, string.format("decision table %s is %.0f bytes, over the limit "
			.. "of %d", TABLE_PATH, st.st_size, MAX_BYTES)
	end
	local id = identity(st)
	if cache ~= nil and cache.id == id and not cache.racy then
		return nil, id
	end
	local fd, oerr = P.fcntl.open(TABLE_PATH, P.fcntl.O_RDONLY + P.fcntl.O_NONBLOCK)
	if fd == nil then
		return nil, nil, "cannot open the decision table (" .. tostring(oerr) .. ")"
	end
	local parts, total = {}, 0
	while total <= st.st_size do
		local chunk = P.unistd.read(fd, 65536)
		if chunk == nil or chunk == "" then
			break
		end
		parts[#parts + 1] = chunk
		total = total + #chunk
	end
	P.unistd.close(fd)
	local after = P.stat.stat(TABLE_PATH)
	if total ~= st.st_size or after == nil or identity(after) ~= id then
		return nil, nil, "decision table " .. TABLE_PATH .. " changed while it was read"
	end
	-- Written within the last second: a second write in the same second would keep
	-- these times, so the next submission reads it again.
	return table.concat(parts), id, st.st_ctime >= os.time() - 1
end

-- The table, from the cache while the file is unchanged; nil and why on a fault. Only
-- its first and last lines are read here: entries are found when a job asks (find_entry).
local function load_table()
	local text, id, racy_or_why = read_file()
	if text == nil then
		if id ~= nil then
			return cache
		end
		return nil, racy_or_why
	end
	if cache ~= nil and cache.text == text then
		cache.id, cache.racy = id, racy_or_why
		return cache
	end
	local first = text:match("^([^\n]*)\n")
	local head, why = parse_header(first)
	if head == nil then
		return nil, "decision table " .. TABLE_PATH .. " " .. why
	end
	-- The last line closes the generation: a table cut short has none.
	local last = text:sub(-128):match("\n(end gen=%x+ entries=%d+)\n$")
	local gen, count = (last or ""):match("^end gen=(%x+) entries=(%d+)$")
	if gen ~= head.gen or tonumber(count) ~= head.entries then
		return nil, string.format("decision table %s generation %s is not whole (its last "
			.. "line does not close it)", TABLE_PATH, head.gen)
	end
	local note = (cache ~= nil and cache.head.gen == head.gen)
		and " (changed under the same header)" or ""
	cache = { id = id, racy = racy_or_why, text = text, head = head, body = #first + 2,
		tail = #text - #last }
	slurm.log_info("slurm-synergy: loaded decision table %s generation %s%s: %d "
		.. "decision(s)", TABLE_PATH, head.gen, note, head.entries)
	return cache
end

local function is_set(n)
	return n ~= nil and n < NO_VAL
end

local function whole_text(n)
	return n and string.format("%.0f", n) or "?"
end

-- A number slurmctld filled in, or nil where it means "not set" or "unlimited".
local function limit(n)
	n = tonumber(n)
	if n == nil or n <= 0 or n >= 2 ^ 50 or n == NO_VAL or n == NO_VAL - 1 then
		return nil
	end
	return n
end

-- The partition the job will run in (its own, else the default) and slurmctld's record
-- of it; nil and why when there is no single one.
local function partition_of(job_desc, part_list)
	local name = job_desc.partition
	if name ~= nil and name ~= "" then
		if name:find(",", 1, true) then
			return nil, nil, "several partitions (" .. name .. ")"
		end
		return name, part_list and part_list[name]
	end
	for key, part in pairs(part_list or {}) do
		if (tonumber(part.flag_default) or 0) ~= 0 then
			return part.name or key, part
		end
	end
	return nil, nil, "no partition named and none is the default"
end

-- Why a decided job is left as asked, or nil: the decision is per task on one node of
-- the table's partition, Slurm refuses --cpus-per-task or --mem beside their per-GPU
-- forms, and nothing may ask more than the partition's nodes have.
local function leave_alone(job_desc, head, entry, part_list)
	if is_set(job_desc.num_tasks) and job_desc.num_tasks > 1
			or is_set(job_desc.min_nodes) and job_desc.min_nodes > 1
			or job_desc.ntasks_per_node ~= nil and job_desc.ntasks_per_node < 65534
				and job_desc.ntasks_per_node > 1 then
		return "more than one task or node: left as asked"
	end
	for _, field in ipairs({ "cpus_per_tres", "mem_per_tres", "tres_per_job",
			"tres_per_socket", "tres_per_task" }) do
		local value = job_desc[field]
		-- From 23.11 --cpus-per-task also sets tres_per_task to cpu=N: that one is
		-- sized with the cores (apply).
		if value ~= nil and value ~= "" and not (field == "tres_per_task"
				and value:match("^cpu=%d+$")) then
			return field .. " is set: left as asked"
		end
	end
	local sized_for = head.partition ~= "" and head.partition or "the default partition"
	local part, rec, why = partition_of(job_desc, part_list)
	if part == nil then
		return why .. ": left as asked"
	end
	if head.partition ~= "" and part ~= head.partition then
		return "partition " .. part .. ": the decisions are sized for " .. sized_for
	end
	if rec == nil then
		return "partition " .. part .. " is not one slurmctld lists for this job: left as asked"
	end
	-- The most cores one node can have: the partition's total less one per other node.
	local cores = limit(rec.total_cpus)
	local nodes = limit(rec.total_nodes)
	if cores and nodes then
		cores = cores - (nodes - 1)
	end
	local per_node = limit(rec.max_cpus_per_node)
	if per_node and (cores == nil or per_node < cores) then
		cores = per_node
	end
	if cores == nil or head.max_cpus > cores then
		return string.format("the table says nodes of %s have %d cores; slurmctld says at "
			.. "most %s: not this cluster's table, left as asked", part, head.max_cpus,
			cores and string.format("%.0f", cores) or "unknown")
	end
	local mem = limit(rec.max_mem_per_node)
	if entry.cpus > head.max_cpus or entry.mem_mb > head.max_mem_mb
			or mem and entry.mem_mb > mem or entry.gpus > head.max_gpus then
		return string.format("decision c%d,m%d,g%d is more than a node of %s has: left as "
			.. "asked", entry.cpus, entry.mem_mb, entry.gpus, part)
	end
	if entry.gpu_type and not head.gpu_types[entry.gpu_type] then
		return "GPU type " .. entry.gpu_type .. " is not in partition " .. part
			.. ": left as asked"
	end
	-- A job that names its QOS is held to that QOS's limits too (sync checked the QOS
	-- a job gets without naming one); one the table does not know is left alone.
	local qos = job_desc.qos
	if head.limits and qos ~= nil and qos ~= "" then
		local cap = head.qos[qos]
		if cap == nil then
			return "QOS " .. qos .. " is not one the table holds limits of: left as asked"
		end
		if cap.cpus > 0 and entry.cpus > cap.cpus or cap.mem_mb > 0 and entry.mem_mb > cap.mem_mb
				or cap.gpus > 0 and entry.gpus > cap.gpus then
			return string.format("decision c%d,m%d,g%d is past QOS %s's limits for one job: "
				.. "left as asked", entry.cpus, entry.mem_mb, entry.gpus, qos)
		end
	end
	return nil
end

-- A script less its comment lines (#SBATCH among them) and blank lines, spacing squeezed.
local function normalised(script)
	local lines = {}
	for line in (script .. "\n"):gmatch("([^\n]*)\n") do
		line = line:gsub("%s+", " "):gsub("^ ", ""):gsub(" $", "")
		if line ~= "" and line:sub(1, 1) ~= "#" then
			lines[#lines + 1] = line
		end
	end
	return table.concat(lines, "\n")
end

-- Two polynomial hashes modulo primes below 2^31: exact in Lua 5.1's doubles.
local function key_hash(text)
	local byte, out = string.byte, {}
	for _, m in ipairs(KEY_MODULI) do
		local base, modulus, h = m[1], m[2], 0
		for i = 1, #text do
			h = (h * base + byte(text, i)) % modulus
		end
		out[#out + 1] = string.format("%08x", h)
	end
	return table.concat(out)
end

-- A GPU request in 22.05's spelling (gres:gpu:1) whichever release spelled it (from
-- 23.02, gres/gpu:1): a workload keeps its key across an upgrade.
local function gres_colon(tres)
	return (tres:gsub("gres/", "gres:"))
end

-- A plain batch job's workload key and its normalised text, or nil and why it has none.
-- Sizes are checked before anything is copied, normalised or hashed: the script, the
-- folder and the argument count, then the arguments (Slurm caps none of them: a client
-- of libslurm may send megabytes), against KEY_BUDGET in all.
local function plain_key(job_desc, submit_uid, script)
	if #script > 4 * KEY_BUDGET then
		return nil, string.format("script over %d bytes: not keyed", 4 * KEY_BUDGET)
	end
	local fields = { KEY_VERSION, string.format("%.0f", submit_uid), job_desc.work_dir or "",
		job_desc.partition or "", gres_colon(job_desc.tres_per_node or ""),
		is_set(job_desc.num_tasks) and whole_text(job_desc.num_tasks) or "" }
	local size = #fields          -- the separators, one a field
	for _, f in ipairs(fields) do
		size = size + #f
	end
	-- argc counts argv[0], the script's path, which is not hashed.
	local argc = tonumber(job_desc.argc)
	if argc ~= nil and size + argc - 1 > KEY_BUDGET then
		return nil, string.format("folder and %.0f arguments over %d bytes: not keyed",
			argc - 1, KEY_BUDGET)
	end
	local argv = (argc == nil or argc > 1) and job_desc.argv or nil   -- a read copies all
	if type(argv) == "table" then
		local i = 1         -- argv[0] is the script's own path
		while argv[i] ~= nil do
			size = size + #argv[i] + 1
			if size > KEY_BUDGET then
				return nil, string.format("arguments over %d bytes: not keyed", KEY_BUDGET)
			end
			fields[#fields + 1] = argv[i]
			i = i + 1
		end
	end
	local text = normalised(script)
	if size + #text > KEY_BUDGET then
		return nil, string.format("script and arguments over %d bytes: not keyed", KEY_BUDGET)
	end
	fields[#fields + 1] = text
	return key_hash(table.concat(fields, "\0")), text
end

-- Whether the script's own steps ask for cores, memory, tasks or GPUs (srun -c 8,
-- --mem=...): in a smaller allocation Slurm would refuse them.
local function steps_ask(text)
	for line in (text .. "\n"):gmatch("([^\n]*)\n") do
		local l = " " .. line .. " "
		if l:find("[%s;&|(/]srun%s") and (l:find("%s%-[cnG][%s%d=]") or l:find("%-%-cpus%-per%-task")
				or l:find("%-%-mem") or l:find("%-%-ntasks") or l:find("%-%-gres")
				or l:find("%-%-gpus")) then
			return true
		end
	end
	return false
end

-- Why the policy leaves this job alone, or nil.
local function skipped(job_desc, head, part_list, submit_uid)
	if head.skip_uids[string.format("%.0f", submit_uid)] then
		return "its user is one the policy skips"
	end
	local part = job_desc.partition
	if part == nil or part == "" then
		part = partition_of(job_desc, part_list)
	end
	for name in (part or ""):gmatch("[^,]+") do
		if head.skip_partitions[name] then
			return "partition " .. name .. " is one the policy skips"
		end
	end
	if next(head.skip_accounts) ~= nil then
		local account = job_desc.account
		if account == nil or account == "" then
			account = job_desc.default_account
		end
		if account ~= nil and head.skip_accounts[account:lower()] then
			return "account " .. account .. " is one the policy skips"
		end
	end
	return nil
end

-- What a shared decision may not change in this job (it only grows cores or memory the
-- job asked less of: slurm_synergy/model/rightsize.py's grow_only), or nil where it would
-- grow nothing.
local function grow_only(job_desc, entry)
	local fixed = { gpus = true }
	local cpus, mem = job_desc.cpus_per_task, job_desc.pn_min_memory
	if is_set(cpus) and cpus < 65534 and cpus >= entry.cpus then
		fixed.cpus = true
	end
	if is_set(mem) and mem < 2 ^ 40 and mem >= entry.mem_mb then
		fixed.mem = true
	end
	if fixed.cpus and fixed.mem then
		return nil
	end
	return fixed
end

-- What to change in a job, worked out without touching it: nil when nothing. `comment`
-- is the job's, or for a plain job the one the shim gives it (its key in front).
local function plan(job_desc, tbl, part_list, submit_uid, comment, fixed)
	if comment == nil then
		return nil
	end
	local fp = comment:match("^" .. FINGERPRINT_PREFIX .. "(%x+)")
	if not is_fingerprint(fp) then
		return nil
	end
	local entry, broken = find_entry(tbl, submit_uid, fp)
	if broken then
		-- A bad line's workload is not marked either: its jobs pass through unchanged.
		-- Said once for each table read: a lasting fault is not a line a job.
		if not tbl.bad_said then
			tbl.bad_said = true
			slurm.log_error("slurm-synergy: decision table %s generation %s has a malformed "
				.. "line (found looking up uid %s's workload %s); the jobs of the workloads "
				.. "it hides pass through unchanged", TABLE_PATH, tbl.head.gen,
				whole_text(submit_uid), fp)
		end
		return nil
	end
	if entry ~= nil and entry.none then
		-- Nothing to measure in its last marked run: left as asked, not marked again.
		return { fp = fp, skip = "its last marked run had nothing to measure: left as "
			.. "asked, not marked" }
	end
	local env = job_desc.environment
	local grown = {}
	if entry ~= nil and entry.shared then
		-- Another member's decision (share_group): it only grows the job; one that would
		-- not grow it is none, and the job's own run is measured.
		grown = grow_only(job_desc, entry)
		if grown == nil then
			entry = nil
		end
	end
	if entry == nil then
		if tbl.head.profile_new and env ~= nil
				and (env.SYNERGY_PROFILE == nil or env.SYNERGY_PROFILE == "") then
			-- (user mode may have marked the comment already)
			local marked = (comment .. " "):find(" profile=1 ", 1, true)
			return { fp = fp, profile = true, comment = marked and comment
				or comment .. " profile=1" }
		end
		return nil
	end
	local why = leave_alone(job_desc, tbl.head, entry, part_list)
	if why then
		return { fp = fp, skip = why }
	end
	local pinned = {}
	if tbl.head.user_wins then
		for word in (comment:match(" req=([%a,]+)") or ""):gmatch("%a+") do
			pinned[word] = true
		end
	end
	for word in pairs(fixed or {}) do
		pinned[word] = true
	end
	for word in pairs(grown) do
		pinned[word] = true
	end
	local p = { fp = fp, entry = entry, power_w = entry.shared and 0 or entry.power_w }
	local cpus, mem = job_desc.cpus_per_task, job_desc.pn_min_memory
	if not pinned.cpus then
		p.cpus, cpus = entry.cpus, entry.cpus
	end
	if not pinned.mem then
		p.mem_mb, mem = entry.mem_mb, entry.mem_mb
	end
	-- Workers follow the cores the job ends up with: one core stays with each training
	-- process (slurm_synergy/model/rightsize.py, the rule this mirrors).
	p.workers = entry.workers
	if pinned.cpus and is_set(cpus) and cpus < 65534 then
		p.workers = math.max(1, math.floor(cpus / entry.procs) - 1)
	end
	local tpn = job_desc.tres_per_node
	local gpus = entry.gpus
	local count, gtype
	-- gres:gpu:N until 22.05, gres/gpu:N from 23.02: written back as it came.
	local form = tpn ~= nil and tpn:match("^gres[:/]") or "gres:"
	if tpn ~= nil then
		count = tpn:match("^gres[:/]gpu:(%d+)$")
		if count == nil then
			gtype, count = tpn:match("^gres[:/]gpu:([%w_%.%-]+):(%d+)$")
		end
	end
	local asked_type = gtype
	if pinned.gpus or entry.gpus == 0 or count == nil then
		gpus = tonumber(count) or 0
	else
		-- The decision's GPU type where it names one, else the type the job asked for.
		gtype = entry.gpu_type or gtype
		p.tres_per_node = form .. "gpu:" .. (gtype and (gtype .. ":") or "") .. entry.gpus
	end
	local function typed(n, t)
		return tostring(n) .. (t and (":" .. t) or "")
	end
	local summary = string.format("c%s,m%s,g%s,w%d", whole_text(cpus), whole_text(mem),
		typed(gpus, gpus > 0 and gtype or nil), p.workers)
	if p.power_w > 0 then
		summary = summary .. ",p" .. p.power_w
	end
	-- What the job asked before the rewrite, so reports can set it beside the decision;
	-- a request a client applied its comment's decision to already (user mode) keeps
	-- the asked= the client wrote.
	local asked_mem = job_desc.pn_min_memory
	local prior = comment:match(" asked=([%w,:_%.%-]+)")
	local pc, pm = comment:match(" decision=c(%d+),m(%d+),")
	if not (prior and tonumber(pc) == job_desc.cpus_per_task
			and tonumber(pm) == job_desc.pn_min_memory) then
		prior = nil
	end
	-- What the shim itself saw the job ask (never a client's asked=, the user's text):
	-- root's rescue of a job that ran out of memory at the decided size (decisions/
	-- rescue.py) trusts this copy alone, in the admin comment.
	local seen = string.format("c%s,m%s,g%s",
		-- cpus_per_task is 16-bit: 65534 (NO_VAL16) is "not set".
		(is_set(job_desc.cpus_per_task) and job_desc.cpus_per_task < 65534)
			and whole_text(job_desc.cpus_per_task) or "-",
		(is_set(asked_mem) and asked_mem < 2 ^ 40) and whole_text(asked_mem) or "-",
		typed(count or "0", asked_type))
	p.admin = FINGERPRINT_PREFIX .. fp .. " asked=" .. seen .. " decision=" .. summary
	p.comment = comment:gsub(" decision=%S*", ""):gsub(" asked=%S*", "")
		.. " asked=" .. (prior or seen) .. " decision=" .. summary
	return p
end

local function apply(job_desc, p)
	local result
	if p.entry then
		local before = string.format("cpus %s, mem %s MB, %s",
			tostring(job_desc.cpus_per_task), tostring(job_desc.pn_min_memory),
			tostring(job_desc.tres_per_node))
		if p.cpus then
			job_desc.cpus_per_task = p.cpus
			-- slurmctld does not derive these again from cpus_per_task.
			job_desc.min_cpus = p.cpus
			job_desc.pn_min_cpus = p.cpus
			-- From 23.11 the cores are also in tres_per_task (leave_alone let only a
			-- lone cpu=N through): stale, the job's steps would ask the old count.
			local tpt = job_desc.tres_per_task
			if tpt ~= nil and tpt:match("^cpu=%d+$") then
				job_desc.tres_per_task = "cpu=" .. whole_text(p.cpus)
			end
		end
		if p.mem_mb then
			job_desc.pn_min_memory = p.mem_mb
		end
		if p.tres_per_node then
			job_desc.tres_per_node = p.tres_per_node
		end
		result = string.format("%s -> cpus %s, mem %s MB, %s, workers %d", before,
			tostring(job_desc.cpus_per_task), tostring(job_desc.pn_min_memory),
			tostring(job_desc.tres_per_node), p.workers)
	elseif p.profile then
		result = "no decision yet: marked for profiling"
	else
		result = p.skip or "keyed"
	end
	job_desc.comment = p.comment
	if p.plain or p.admin then
		-- Where the job's owner cannot change it: the reports trust this copy, and root's
		-- rescue acts on its asked= and decision= alone.
		local admin = job_desc.admin_comment
		job_desc.admin_comment = ((admin ~= nil and admin ~= "") and (admin .. " ") or "")
			.. (p.admin or (FINGERPRINT_PREFIX .. p.fp))
	end
	-- The environment last: what is set there cannot be put back.
	local env = job_desc.environment
	if env ~= nil then
		if p.plain then
			-- Both, equal: the TaskProlog acts for a plain job alone (a CSV job's script
			-- exports its own fingerprint and runs its own probe).
			env.SYNERGY_FINGERPRINT = p.fp
			env.SYNERGY_PLAIN = p.fp
		end
		if p.profile then
			env.SYNERGY_PROFILE = "1"
		end
		-- The decision's loader workers are not set here: the comment holds them, and
		-- the node prolog hands them to the tasks (hooks/taskenv.py), the one route for
		-- a decision made now and for one made in place while the job waits.
		if p.entry and p.power_w > 0 then
			env.SYNERGY_POWER_LIMIT_W = tostring(p.power_w)
		end
	end
	return result
end

-- Restored as they were when a rewrite fails midway ("" puts back a field that was unset).
local SAVED = { "cpus_per_task", "min_cpus", "pn_min_cpus", "pn_min_memory",
	"tres_per_node", "tres_per_task", "comment", "admin_comment" }

-- The plan for a plain batch job, keyed; nil and why where it is left alone.
local function plain_plan(job_desc, tbl, part_list, submit_uid, script)
	if not tbl.head.plain then
		return nil
	end
	local fp, text = plain_key(job_desc, submit_uid, script)
	if fp == nil then
		return nil, text
	end
	local own = job_desc.comment
	if own ~= nil and #own > MAX_COMMENT - COMMENT_ROOM then
		return nil, "comment too long to add the workload's key: not keyed"
	end
	-- What the script set itself, which the site may let win (user_request_wins).
	local req = {}
	if is_set(job_desc.cpus_per_task) and job_desc.cpus_per_task < 65534 then
		req[#req + 1] = "cpus"
	end
	if is_set(job_desc.pn_min_memory) and job_desc.pn_min_memory < 2 ^ 40 then
		req[#req + 1] = "mem"
	end
	if job_desc.tres_per_node ~= nil and job_desc.tres_per_node ~= "" then
		req[#req + 1] = "gpus"
	end
	local comment = FINGERPRINT_PREFIX .. fp .. " plain=1"
		.. (#req > 0 and (" req=" .. table.concat(req, ",")) or "")
		.. ((own ~= nil and own ~= "") and (" " .. own) or "")
	-- A script launches its steps for its GPUs (torchrun --nproc_per_node, one rank a
	-- GPU): their count stays. Steps that ask for cores or memory of their own keep all.
	local fixed = steps_ask(text) and { cpus = true, mem = true, gpus = true }
		or { gpus = true }
	local p = plan(job_desc, tbl, part_list, submit_uid, comment, fixed)
		or { fp = fp, comment = comment }
	p.plain = true
	p.comment = p.comment or comment
	return p
end

function slurm_job_submit(job_desc, part_list, submit_uid)
	local ok, err = pcall(function()
		local comment = job_desc.comment
		-- A job over two GPU types (synergy:hetero) is no one workload's.
		if comment ~= nil and comment:match("^" .. HETERO) then
			return
		end
		local plain = comment == nil or not comment:match("^" .. FINGERPRINT_PREFIX)
		-- A plain job is looked at only where it could be keyed: a batch script (srun and
		-- salloc jobs have none, nor an environment) its user did not opt out. The script
		-- is read once: each read of job_desc.script copies it.
		local script
		if plain then
			local env = job_desc.environment
			script = job_desc.script
			if script == nil or env == nil then
				return
			end
			for _, name in ipairs(INHERITED) do
				if env[name] ~= nil then
					env[name] = ""
				end
			end
			if (comment or ""):find(OPT_OUT, 1, true) then
				return
			end
		end
		local tbl, why = load_table()
		if tbl == nil then
			-- Without a readable table the policy is unknown too: nothing is marked.
			fault(why)
			return
		end
		-- A fault that ends and comes back is logged again.
		last_fault.msg = nil
		local name = job_desc.name
		local skip = skipped(job_desc, tbl.head, part_list, submit_uid)
		if skip then
			if not plain then
				note("slurm-synergy: job %s (uid %s): %s", name, submit_uid, skip)
			end
			return
		end
		local p, nokey
		if plain then
			p, nokey = plain_plan(job_desc, tbl, part_list, submit_uid, script)
		else
			p = plan(job_desc, tbl, part_list, submit_uid, comment)
		end
		if p == nil then
			if nokey then
				note("slurm-synergy: job %s (uid %s): %s", name, submit_uid, nokey)
			end
			return
		end
		if p.skip and not p.plain then
			note("slurm-synergy: job %s (uid %s, fp %s): %s", name, submit_uid, p.fp, p.skip)
			return
		end
		local saved = {}
		for _, field in ipairs(SAVED) do
			saved[field] = job_desc[field]
		end
		local done, result = pcall(apply, job_desc, p)
		if done then
			note("slurm-synergy: job %s (uid %s, fp %s%s): %s", name, submit_uid, p.fp,
				p.plain and ", a plain script" or "", result)
			return
		end
		-- Put back what was changed before the error, then report it.
		for _, field in ipairs(SAVED) do
			local was = saved[field]
			if was == nil and type(job_desc[field]) == "string" then
				was = ""
			end
			if was ~= nil then
				pcall(function() job_desc[field] = was end)
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
