-- slurm-synergy job_submit shim.
-- Pass-through until the plugin issue lands: it must never reject a job because of
-- its own fault, never fork and never call Slurm commands.

function slurm_job_submit(job_desc, part_list, submit_uid)
	return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
	return slurm.SUCCESS
end

slurm.log_info("slurm-synergy job_submit.lua loaded (pass-through)")
return slurm.SUCCESS
