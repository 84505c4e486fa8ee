/*
 * A batch job submitted through libslurm, as any client can, with what sbatch would not
 * send: an argv of any size (sbatch's own command line is capped by slurmctld at 1 MiB;
 * a job's argv is not). Prints the job id and the seconds the submit call took.
 *
 *   submit_argv SCRIPT WORKDIR PARTITION ARG_BYTES ARGS HOLD
 *
 * ARG_BYTES bytes of arguments in all, split over ARGS arguments of 'a's (0: none); HOLD
 * 1 submits it held (sbatch --hold), so that it never starts. The environment is the
 * caller's, as sbatch sends it.
 */
#include <slurm/slurm.h>
#include <slurm/slurm_errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static char *read_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		perror(path);
		exit(2);
	}
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *text = calloc(n + 1, 1);
	if (fread(text, 1, n, f) != (size_t)n) {
		perror(path);
		exit(2);
	}
	fclose(f);
	return text;
}

int main(int argc, char **argv)
{
	if (argc != 7) {
		fprintf(stderr, "usage: %s SCRIPT WORKDIR PARTITION ARG_BYTES ARGS HOLD\n",
			argv[0]);
		return 2;
	}
	long bytes = atol(argv[4]), args = atol(argv[5]);
	job_desc_msg_t d;
	submit_response_msg_t *resp = NULL;
	struct timespec t0, t1;

	slurm_init(NULL);
	slurm_init_job_desc_msg(&d);
	d.name = "argv";
	d.script = read_file(argv[1]);
	d.work_dir = argv[2];
	d.partition = argv[3];
	d.std_out = "/dev/null";
	d.time_limit = 1;
	d.min_nodes = 1;
	d.user_id = getuid();
	d.group_id = getgid();
	if (atoi(argv[6]))
		d.priority = 0;
	d.argc = 1 + (int)args;
	d.argv = calloc(d.argc + 1, sizeof(char *));
	d.argv[0] = argv[1];
	for (long i = 0; i < args; i++) {
		long size = bytes / args + (i < bytes % args);
		d.argv[1 + i] = malloc(size + 1);
		memset(d.argv[1 + i], 'a', size);
		d.argv[1 + i][size] = '\0';
	}
	for (d.env_size = 0; environ[d.env_size]; d.env_size++)
		;
	d.environment = environ;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	int rc = slurm_submit_batch_job(&d, &resp);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	if (rc != SLURM_SUCCESS) {
		slurm_perror("slurm_submit_batch_job");
		return 1;
	}
	printf("%u %.6f\n", resp->job_id,
	       (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9);
	slurm_free_submit_response_response_msg(resp);
	slurm_fini();
	return 0;
}
