/* plan_cli.c - `stoker plan`: what to buy for a job. Offline: from a job
 * file (images per step, bytes on the wire, samples per epoch), the
 * accelerator instance type, measured figures given as options (step
 * compute time, images per CPU-second on each CPU type, the training
 * host's receiving cost) and the instance table (deploy/instances.tsv,
 * overridable), it prices every option with common/costmodel.c: the
 * homogeneous shape, larger types of the accelerator's family, 1..N data
 * hosts of each candidate CPU type; prints the table with the cheapest
 * $/step marked (or JSON), and for that shape a SageMaker instance_groups
 * snippet and a Slurm heterogeneous-job header. Live (--coordinator): the
 * same from the running job's Status (plan_live.c: its shape, the ranks'
 * step and receiving cost, the workers' measured rates), with the running
 * shape marked and the purchase said. Owns only its option table's
 * strings; prints to stdout, errors to stderr. */
#include "plan_cli.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/costmodel.h"
#include "daemon.h"
#include "daemon_options.h"
#include "plan_live.h"
#include "stoker/core.h"

#define PLAN_OPTIONS_MAX 512

static struct {
  char *job, *accel, *data, *instances, *calibrate, *data_root, *coordinator, *token,
      *token_file, *worker_type;
  stk__strlist rates;
  stk__tls_opts tls;
  double step_ms, stall_pct, compute_ms, images_per_cpu_s, spare_cores, data_cores;
  double recv;
  long long accel_count, max_data_hosts, batch_bytes, samples, calibrate_s, timeout_ms;
  int local_loading, json;
} popt;

/* clang-format off */
static stk__option plan_options[] = {
    {"coordinator", OPT_STR, "", stk__opt_hostport,
     "host:port of a running job's stoker-coordinator: plan from its measured figures "
     "(the ranks' step and stall, the workers' images per CPU-second, the receiving "
     "cost) and its shape (the instance types stoker-launch told it); the running shape "
     "is marked and the purchase said. Empty = offline, from --job and the figures "
     "below", &popt.coordinator, 0, 0},
    {"token-file", OPT_STR, "", NULL,
     "--coordinator: read the bearer token from the first line of FILE (else "
     "$STOKER_TOKEN, else the file $STOKER_TOKEN_FILE names)", &popt.token_file, 0, 0},
    {"token", OPT_STR, "", NULL,
     "--coordinator: the bearer token itself (visible in ps: prefer --token-file)",
     &popt.token, 0, 0},
    STK__TLS_CLIENT_OPTIONS(popt.tls),
    {"timeout-ms", OPT_INT, "5000", NULL, "--coordinator: give up after this long",
     &popt.timeout_ms, 1, 3600000},
    {"worker-type", OPT_STR, "", stk__opt_instance_type,
     "--coordinator: the instance type of workers that did not tell theirs "
     "(stoker-worker --instance-type)", &popt.worker_type, 0, 0},
    {"job", OPT_STR, "", NULL,
     "the job file (batch_size x world_size = images per step; the batch's bytes on the "
     "wire; num_samples, when set, the samples per epoch)", &popt.job, 0, 0},
    {"accel", OPT_STR, "", NULL,
     "the accelerator instance type the job trains on (a name in the instance table, "
     "e.g. ml.p4d.24xlarge; --coordinator: instead of the coordinator's --accel-type)",
     &popt.accel, 0, 0},
    {"accel-count", OPT_INT, "0", NULL,
     "accelerator instances; 0 = world_size / the type's accelerators, rounded up",
     &popt.accel_count, 0, 4096},
    {"step-ms", OPT_DOUBLE, "0", NULL,
     "the measured step time on the accelerator instance, ms (with --stall-pct gives "
     "the compute time); 0 = not measured", &popt.step_ms, 0, 86400000},
    {"stall-pct", OPT_DOUBLE, "-1", NULL,
     "the measured input stall, % of the step (the train loop's 'stall N%', stoker "
     "status); -1 = not measured", &popt.stall_pct, -1, 100},
    {"compute-ms", OPT_DOUBLE, "0", NULL,
     "the step's compute time, ms (step minus stall), instead of --step-ms and "
     "--stall-pct; 0 = not given", &popt.compute_ms, 0, 86400000},
    {"images-per-cpu-s", OPT_DOUBLE, "0", NULL,
     "images the job's pipeline builds per CPU-second, on every CPU type not named "
     "in --rate; 0 = none", &popt.images_per_cpu_s, 0, 100000000},
    {"rate", OPT_LIST, "", NULL,
     "TYPE=N: images per CPU-second measured on instance type TYPE (repeatable; "
     "--coordinator: instead of the running workers' figure)",
     &popt.rates, 0, 0},
    {"data", OPT_STR, "", NULL,
     "candidate data-host types, comma-separated; empty = every CPU type (no "
     "accelerators) in the table", &popt.data, 0, 0},
    {"max-data-hosts", OPT_INT, "4", NULL, "try 1..N data hosts of each candidate type",
     &popt.max_data_hosts, 0, 256},
    {"spare-cores", OPT_DOUBLE, "0", NULL,
     "cores each accelerator instance can spare for loading and receiving; 0 = its "
     "vCPU minus one per training process on it (assumed, and said so)", &popt.spare_cores, 0,
     100000},
    {"data-cores", OPT_DOUBLE, "0", NULL,
     "usable cores per data host; 0 = all its vCPU", &popt.data_cores, 0, 100000},
    {"local-loading", OPT_BOOL, "false", NULL,
     "with data hosts, the accelerator instances keep loading on their spare cores "
     "too (stoker-launch runs no worker on them in a heterogeneous job)",
     &popt.local_loading, 0, 0},
    {"recv-cpu-s-per-gb", OPT_DOUBLE, "0", NULL,
     "CPU-seconds the training host spends per GB of batches taken in; 0 = measured "
     "(--coordinator: the ranks' figure), else 0.5, docs/benchmarks.md's client figure "
     "rounded up", &popt.recv, 0, 1000},
    {"batch-bytes", OPT_INT, "0", NULL,
     "bytes of one rank's batch on the wire; 0 = from the job's layout",
     &popt.batch_bytes, 0, 1LL << 40},
    {"samples", OPT_INT, "0", NULL,
     "samples per epoch (for $/epoch); 0 = the job's num_samples, else not shown",
     &popt.samples, 0, 1LL << 50},
    {"instances", OPT_STR, "", NULL,
     "an instance table of your own (same format as the shipped one): its rows add "
     "types or replace the shipped rows of the same name", &popt.instances, 0, 0},
    {"calibrate", OPT_STR, "", NULL,
     "TYPE: first measure the job's pipeline on this host (stoker-worker --calibrate, "
     "one builder thread, --calibrate-s seconds, dataset under --data-root) and take "
     "the result as the images per CPU-second of instance type TYPE (this host's type "
     "or its match)", &popt.calibrate, 0, 0},
    {"calibrate-s", OPT_INT, "5", NULL, "how long --calibrate builds", &popt.calibrate_s,
     1, 3600},
    {"data-root", OPT_STR, "", NULL,
     "--calibrate: the directory the job's dataset is under (as stoker-worker's)",
     &popt.data_root, 0, 0},
    {"json", OPT_BOOL, "false", NULL,
     "print one JSON object (inputs, options, cheapest, snippets) instead of the table",
     &popt.json, 0, 0},
};
/* clang-format on */
#define NPLAN (sizeof(plan_options) / sizeof(plan_options[0]))

static const char plan_synopsis[] =
    "Says what to buy for a job: every shape (homogeneous, a larger instance of the\n"
    "accelerator's family, 1..N data hosts of each candidate CPU type) with its\n"
    "predicted step time, the term that binds it (compute, data supply, link,\n"
    "receive), accelerator utilisation, $/h, $/step and $/epoch; the cheapest\n"
    "$/step marked; for it a SageMaker instance_groups snippet and a Slurm\n"
    "heterogeneous-job header. Offline: from the job file and figures you\n"
    "measured (--step-ms and --stall-pct, or --compute-ms; --images-per-cpu-s or\n"
    "--rate TYPE=N, or --calibrate TYPE to measure this host). A figure missing\n"
    "shows as 'missing: ...', never a guess.\n"
    "Prices: the shipped instance table (SageMaker on-demand, us-east-1; see its\n"
    "header for the date and source), overridden by --instances FILE.\n"
    "Live: --coordinator ADDR plans from the running job instead (its figures and\n"
    "shape as measured; the running shape marked '>'), and says what to buy.\n"
    "The model: docs/price-performance.md.\n\n"
    "examples: stoker plan --job job.conf --accel ml.p4d.24xlarge --step-ms 192 \\\n"
    "            --stall-pct 74 --images-per-cpu-s 111 --data ml.c5.18xlarge\n"
    "          stoker plan --coordinator algo-3:7070 --token-file admin.token";

static const char plan_exit_codes[] =
    "  0  the plan printed (some options may say what they miss)\n"
    "  1  no option could be priced: the figures it misses are printed; or\n"
    "     --calibrate failed (its message printed)\n"
    "  2  usage error (a bad option, job file or instance table)\n";

static stk__instance_table table; /* 25 KB */
static stk__cm_option options[PLAN_OPTIONS_MAX];

static double calibrated; /* --calibrate's images per CPU-second, 0 = none */

/* The images per CPU-second measured on type name, or 0: --calibrate's
 * for its type, else the last --rate naming it, else --images-per-cpu-s. */
static double rate_of(const char *name) {
  if (calibrated > 0 && !strcmp(name, popt.calibrate)) return calibrated;
  for (size_t i = popt.rates.n; i-- > 0;) {
    const char *eq = strchr(popt.rates.v[i], '=');
    if ((size_t)(eq - popt.rates.v[i]) == strlen(name) &&
        !strncmp(popt.rates.v[i], name, strlen(name)))
      return strtod(eq + 1, NULL);
  }
  return popt.images_per_cpu_s;
}

/* Run `stoker-worker --calibrate JOB` (the binary next to this one) and
 * read its images per CPU-second into calibrated. 0, or -1 after saying
 * why on stderr. The child is always reaped. */
static int run_calibration(void) {
  char self[PATH_MAX], worker[PATH_MAX + 32], secs[32];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) {
    fprintf(stderr, "stoker plan --calibrate: cannot find this program's directory\n");
    return -1;
  }
  self[n] = 0;
  char *slash = strrchr(self, '/');
  if (slash) *slash = 0;
  snprintf(worker, sizeof(worker), "%s/stoker-worker", self);
  snprintf(secs, sizeof(secs), "%lld", popt.calibrate_s);
  char *args[] = {
      worker,         "--calibrate", popt.job, "--calibrate-s",
      secs,           "--log-level", "warn",   *popt.data_root ? "--data-root" : NULL,
      popt.data_root, NULL};
  int fd[2];
  if (pipe(fd)) {
    fprintf(stderr, "stoker plan --calibrate: pipe: %s\n", strerror(errno));
    return -1;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fd[1], 1);
  posix_spawn_file_actions_addclose(&fa, fd[0]);
  posix_spawn_file_actions_addclose(&fa, fd[1]);
  extern char **environ;
  pid_t pid;
  int err = posix_spawn(&pid, worker, &fa, NULL, args, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(fd[1]);
  if (err) {
    close(fd[0]);
    fprintf(stderr, "stoker plan --calibrate: cannot run %s: %s\n", worker,
            strerror(err));
    return -1;
  }
  char out[1024];
  size_t got = 0;
  for (;;) {
    ssize_t r = read(fd[0], out + got, sizeof(out) - 1 - got);
    if (r > 0 && (got += (size_t)r) < sizeof(out) - 1) continue;
    if (r < 0 && errno == EINTR) continue;
    break;
  }
  out[got] = 0;
  close(fd[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  const char *p = strstr(out, "images_per_cpu_s=");
  if (!WIFEXITED(status) || WEXITSTATUS(status) || !p) {
    fprintf(stderr,
            "stoker plan --calibrate: %s --calibrate %s failed (%s %d; its message "
            "is above)\n",
            worker, popt.job, WIFEXITED(status) ? "exit" : "signal",
            WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    return -1;
  }
  calibrated = strtod(p + strlen("images_per_cpu_s="), NULL);
  if (!(calibrated > 0)) {
    fprintf(stderr, "stoker plan --calibrate: no images built: %s", out);
    return -1;
  }
  char *nl = strchr(out, '\n');
  if (nl) *nl = 0;
  fprintf(popt.json ? stderr : stdout, "calibration on this host as %s: %s\n",
          popt.calibrate, out);
  return 0;
}

static int check_rates(void) {
  for (size_t i = 0; i < popt.rates.n; i++) {
    char *eq = strchr(popt.rates.v[i], '='), *end;
    *eq = 0;
    int known = stk__instances_find(&table, popt.rates.v[i]) != NULL;
    double v = strtod(eq + 1, &end);
    int bad = end == eq + 1 || *end || !(v > 0) || !isfinite(v);
    if (!known || bad) {
      fprintf(stderr, "stoker plan: --rate %s=%s: %s\n", popt.rates.v[i], eq + 1,
              !known ? "no such instance type in the table (add it with --instances FILE)"
                     : "want images per CPU-second > 0");
      *eq = '=';
      return -1;
    }
    *eq = '=';
  }
  return 0;
}

static void json_str(const char *s) {
  putchar('"');
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') printf("\\%c", c);
    else if (c == '\n') printf("\\n");
    else if (c < 0x20) printf("\\u%04x", c);
    else putchar(c);
  }
  putchar('"');
}

static void json_num(double v) {
  if (isfinite(v)) printf("%.9g", v);
  else printf("null");
}

/* The SageMaker snippet and the Slurm header of option o, into buf. */
static void snippets(const stk__cm_option *o, char *sm, size_t smlen, char *sl,
                     size_t sllen) {
  const stk__cm_shape *s = &o->shape;
  if (s->data_count)
    snprintf(sm, smlen,
             "from sagemaker.instance_group import InstanceGroup\n"
             "data_group = InstanceGroup(\"data_group\", \"%s\", %u)\n"
             "dnn_group = InstanceGroup(\"dnn_group\", \"%s\", %u)\n"
             "instance_groups = [data_group, dnn_group]  # Estimator(..., "
             "instance_groups=instance_groups)\n",
             s->data->name, s->data_count, s->accel->name, s->accel_count);
  else
    snprintf(sm, smlen,
             "from sagemaker.instance_group import InstanceGroup\n"
             "dnn_group = InstanceGroup(\"dnn_group\", \"%s\", %u)\n"
             "instance_groups = [dnn_group]  # homogeneous: the launcher runs a worker "
             "on each training host\n",
             s->accel->name, s->accel_count);
  char gpu[160];
  snprintf(gpu, sizeof(gpu),
           "#SBATCH --partition=gpu --nodes=%u --ntasks-per-node=1 --gpus-per-node=%u "
           "--exclusive",
           s->accel_count, s->accel->accelerators);
  if (s->data_count)
    snprintf(sl, sllen,
             "#SBATCH --partition=cpu --nodes=%u --ntasks-per-node=1 --cpus-per-task=%u "
             "--exclusive   # component 0: data (%s)\n"
             "#SBATCH hetjob\n"
             "%s  # component 1: training (%s)\n",
             s->data_count, (unsigned)ceil(s->data->vcpu), s->data->name, gpu,
             s->accel->name);
  else
    snprintf(sl, sllen, "%s  # training (%s); workers on the training nodes\n", gpu,
             s->accel->name);
}

static void print_json(const stk__cm_search *s, size_t n, int best, const char *job_name,
                       const char *compute_src, int cur, const char *purchase) {
  printf("{\"job\":{\"name\":");
  json_str(job_name);
  printf(",\"images_per_step\":");
  json_num(s->job.images_per_step);
  printf(",\"bytes_per_image\":");
  json_num(s->job.bytes_per_image);
  printf(",\"samples\":%llu,\"compute_ms\":", (unsigned long long)s->job.samples);
  json_num(s->job.compute_s * 1e3);
  printf(",\"compute_from\":");
  json_str(compute_src);
  printf(",\"recv_cpu_s_per_gb\":");
  json_num(s->job.recv_cpu_s_per_gb);
  printf("},\"accelerator\":{\"type\":");
  json_str(s->base.accel->name);
  printf(",\"count\":%u,\"spare_cores\":", s->base.accel_count);
  json_num(s->base.local_cores);
  printf(",\"images_per_cpu_s\":");
  json_num(s->base.accel_rate);
  printf(",\"local_loading\":%s},\"options\":[",
         s->base.local_loading ? "true" : "false");
  for (size_t i = 0; i < n && i < PLAN_OPTIONS_MAX; i++) {
    const stk__cm_option *o = &options[i];
    char label[160];
    stk__plan_shape_label(o, label, sizeof(label));
    printf("%s{\"shape\":", i ? "," : "");
    json_str(label);
    printf(",\"accel_type\":");
    json_str(o->shape.accel->name);
    printf(",\"accel_count\":%u,\"data_type\":", o->shape.accel_count);
    if (o->shape.data) json_str(o->shape.data->name);
    else printf("null");
    printf(",\"data_count\":%u,\"larger\":%s,\"cheapest\":%s,\"now\":%s",
           o->shape.data_count, o->larger ? "true" : "false",
           o->cheapest ? "true" : "false", (int)i == cur ? "true" : "false");
    if (!o->r.ok) {
      printf(",\"missing\":");
      json_str(o->r.missing);
      printf("}");
      continue;
    }
    printf(",\"step_ms\":");
    json_num(o->r.step_s * 1e3);
    printf(",\"compute_ms\":");
    json_num(o->r.compute_s * 1e3);
    printf(",\"data_ms\":");
    json_num(o->r.data_s * 1e3);
    /* each bound of the data side alone (0: no such bound in this shape) */
    printf(",\"supply_ms\":");
    json_num(o->r.supply_s * 1e3);
    printf(",\"link_ms\":");
    json_num(o->r.link_s * 1e3);
    printf(",\"receive_ms\":");
    json_num(o->r.recv_s * 1e3);
    printf(",\"local_images_per_s\":");
    json_num(o->r.local_images_per_s);
    printf(",\"remote_images_per_s\":");
    json_num(o->r.remote_images_per_s);
    printf(",\"binds\":");
    json_str(stk__cm_bind_name(o->r.bind));
    printf(",\"accel_util\":");
    json_num(o->r.util);
    printf(",\"usd_per_hour\":");
    json_num(o->r.usd_per_hour);
    printf(",\"usd_per_step\":");
    json_num(o->r.usd_per_step);
    printf(",\"usd_per_epoch\":");
    if (o->r.usd_per_epoch >= 0) json_num(o->r.usd_per_epoch);
    else printf("null");
    if (options[0].r.ok) {
      printf(",\"usd_per_step_vs_homogeneous\":");
      json_num(o->r.usd_per_step / options[0].r.usd_per_step - 1);
    }
    printf("}");
  }
  printf("],\"now\":");
  if (cur >= 0) printf("%d", cur);
  else printf("null");
  if (purchase) {
    printf(",\"purchase\":");
    json_str(purchase);
  }
  printf(",\"cheapest\":");
  if (best < 0) {
    printf("null}\n");
    return;
  }
  char sm[1024], sl[1024];
  snippets(&options[best], sm, sizeof(sm), sl, sizeof(sl));
  printf("%d,\"sagemaker\":", best);
  json_str(sm);
  printf(",\"slurm\":");
  json_str(sl);
  printf("}\n");
}

static void print_table(const stk__cm_search *s, size_t n, int best, int cur) {
  printf("  %-44s %9s  %-11s %5s %9s %11s %9s %8s\n", "shape", "step ms", "binds", "util",
         "$/h", "$/step", "$/epoch", "$/step");
  printf("  %-44s %9s  %-11s %5s %9s %11s %9s %8s\n", "", "", "", "", "", "", "",
         "vs hom.");
  for (size_t i = 0; i < n && i < PLAN_OPTIONS_MAX; i++) {
    const stk__cm_option *o = &options[i];
    char label[160];
    stk__plan_shape_label(o, label, sizeof(label));
    if (!o->r.ok) {
      printf(" %c%-44s %s\n", (int)i == cur ? '>' : ' ', label, o->r.missing);
      continue;
    }
    char epoch[32] = "-", vs[32] = "-";
    if (o->r.usd_per_epoch >= 0)
      snprintf(epoch, sizeof(epoch), "%.2f", o->r.usd_per_epoch);
    if (options[0].r.ok && i)
      snprintf(vs, sizeof(vs), "%+.1f%%",
               100 * (o->r.usd_per_step / options[0].r.usd_per_step - 1));
    printf("%c%c%-44s %9.1f  %-11s %4.0f%% %9.3f %11.7f %9s %8s\n",
           o->cheapest ? '*' : ' ', (int)i == cur ? '>' : ' ', label, o->r.step_s * 1e3,
           stk__cm_bind_name(o->r.bind), 100 * o->r.util, o->r.usd_per_hour,
           o->r.usd_per_step, epoch, vs);
  }
  (void)s;
}

/* Print the header, the table, the purchase and the snippets of a plan. */
static void print_live(const stk__live_plan *lp, size_t n, int best, int cur,
                       const char *purchase, const char *shipped) {
  const stk__cm_search *s = &lp->s;
  const stk__instance *acc = s->base.accel;
  printf(
      "job %s, live from %s: %.0f images per step (batch_size %u x world_size %u), "
      "%.0f bytes per image on the wire\n",
      lp->spec.name, popt.coordinator, s->job.images_per_step, lp->spec.batch_size,
      lp->spec.world_size, s->job.bytes_per_image);
  printf("accelerator: %u x %s (%g vCPU, %u x %s, %g Gbit/s, $%.3f/h%s)\n",
         s->base.accel_count, acc->name, acc->vcpu, acc->accelerators, acc->accel_kind,
         acc->nic_gbps, acc->usd_per_hour, acc->approx ? " approx" : "");
  if (lp->step_ms_measured > 0)
    printf(
        "  measured: step %.1f ms, stall %.1f%%, compute %.1f ms (the slowest of %u "
        "rank(s) reporting)\n",
        lp->step_ms_measured, 100 * lp->stall_measured, s->job.compute_s * 1e3,
        lp->nranks);
  else
    printf(
        "  measured: no step time yet (%u rank(s) reporting; ranks report every few "
        "seconds once batches flow)\n",
        lp->nranks);
  printf("  spare cores per training host: %g%s; receiving cost %.2f CPU-s/GB%s\n",
         s->base.local_cores, lp->spare_assumed ? " (assumed)" : "",
         s->job.recv_cpu_s_per_gb, lp->recv_assumed ? " (assumed)" : " (measured)");
  printf("workers: %u on the training hosts, %u on %u data host(s)%s%s\n",
         lp->local_workers, lp->data_workers, lp->now_data_count,
         lp->now_data ? " of " : "", lp->now_data ? lp->now_data->name : "");
  printf("images per CPU-second: %s ", acc->name);
  if (s->base.accel_rate > 0) printf("%.0f", s->base.accel_rate);
  else printf("not measured");
  for (size_t i = 0; i < s->ncand; i++) {
    if (s->cand[i].rate > 0) printf(", %s %.0f", s->cand[i].type->name, s->cand[i].rate);
    else printf(", %s not measured", s->cand[i].type->name);
  }
  printf("\nprices: %s%s%s\n", shipped, *popt.instances ? " + " : "", popt.instances);
  if (*lp->notes) printf("assumed: %s\n", lp->notes);
  printf("\n");
  print_table(s, n, best, cur);
  printf("  (> the running shape, * the cheapest $/step)\n");
  if (lp->step_ms_measured > 0 && cur >= 0 && options[cur].r.ok) {
    double pred = options[cur].r.step_s * 1e3, off = pred / lp->step_ms_measured - 1;
    printf(
        "  check: the model gives %.1f ms for the running shape, measured %.1f ms "
        "(%+.0f%%)%s\n",
        pred, lp->step_ms_measured, 100 * off,
        fabs(off) > 0.15 ? ": more than 15% off, so something the model does not see "
                           "sets the step (the workers' prefetch, the link's real "
                           "rate, the training host's CPU); weigh the purchase with "
                           "that in mind"
                         : "");
  }
  printf("\npurchase: %s\n", purchase);
  if (best >= 0) {
    char sm[1024], sl[1024];
    snippets(&options[best], sm, sizeof(sm), sl, sizeof(sl));
    printf("\nSageMaker:\n%s\nSlurm (deploy/slurm/stoker.sbatch):\n%s", sm, sl);
  }
}

/* stoker plan --coordinator: the plan of the running job. Returns the
 * exit code. */
static int plan_live(int argc, char **argv, const char *shipped) {
  stk__cli_conn conn = {popt.coordinator, popt.token, popt.token_file, popt.tls,
                        popt.timeout_ms};
  Stoker__V1__StatusResponse *r = NULL;
  if (stk__cli_status_fetch("stoker plan", &conn, argc, argv, &r)) return 1;
  stk__live_opts lo = {popt.accel,
                       (uint32_t)popt.accel_count,
                       popt.data,
                       popt.worker_type,
                       popt.spare_cores,
                       popt.recv,
                       (uint32_t)popt.max_data_hosts,
                       (const char *const *)popt.rates.v,
                       popt.rates.n};
  static stk__live_plan lp;
  char err[640], purchase[800];
  int rc = 1;
  if (stk__live_plan_build(r, &table, &lo, &lp, err, sizeof(err))) {
    if (popt.json) {
      printf("{\"coordinator\":");
      json_str(popt.coordinator);
      printf(",\"purchase\":");
      json_str(err);
      printf(",\"cheapest\":null}\n");
    } else {
      printf("stoker plan: %s: %s\n", popt.coordinator, err);
    }
    goto out;
  }
  int best;
  size_t n = stk__cm_search_run(&lp.s, options, PLAN_OPTIONS_MAX, &best);
  if (n > PLAN_OPTIONS_MAX) {
    fprintf(stderr, "stoker plan: %zu options, more than %d: a lower --max-data-hosts\n",
            n, PLAN_OPTIONS_MAX);
    rc = 2;
    goto out;
  }
  int cur = stk__live_current(&lp, options, n);
  stk__live_purchase(&lp, options, n, best, cur, purchase, sizeof(purchase));
  if (popt.json)
    print_json(&lp.s, n, best, lp.spec.name,
               "the slowest rank's loop time outside next()", cur, purchase);
  else print_live(&lp, n, best, cur, purchase, shipped);
  rc = best >= 0 ? 0 : 1;
out:
  if (r) protobuf_c_message_free_unpacked(&r->base, NULL);
  return rc;
}

int stk__cli_plan(int argc, char **argv) {
  int pr = stk__options_parse(plan_options, NPLAN, argc, argv, "stoker plan",
                              plan_synopsis, plan_exit_codes);
  if (pr != OPTS_RUN) {
    stk__options_free(plan_options, NPLAN);
    return pr == OPTS_EXIT_OK ? 0 : 2;
  }
  int rc = 2;
  char err[768];
  memset(&table, 0, sizeof(table));
  const char *shipped = NULL;
  if (stk__plan_table_load(&table, popt.instances, &shipped, err, sizeof(err))) {
    fprintf(stderr, "stoker plan: %s\n", err);
    goto out;
  }
  if (*popt.coordinator) {
    if (check_rates()) goto out;
    rc = plan_live(argc, argv, shipped);
    goto out;
  }
  if (!*popt.job || !*popt.accel) {
    fprintf(stderr, "stoker plan: --job FILE and --accel TYPE are required (--help)\n");
    goto out;
  }
  stk_job_spec spec, wire;
  stk_job_spec_defaults(&spec);
  if (stk_job_spec_load(&spec, popt.job, err, sizeof(err))) {
    fprintf(stderr, "stoker plan: %s\n", err);
    goto out;
  }
  if (!spec.batch_size || !spec.world_size) {
    fprintf(stderr, "stoker plan: %s: batch_size and world_size must be at least 1\n",
            popt.job);
    goto out;
  }
  const stk__instance *acc = stk__instances_find(&table, popt.accel);
  if (!acc) {
    fprintf(
        stderr,
        "stoker plan: --accel %s: no such instance type in the table (%s; add it with "
        "--instances FILE)\n",
        popt.accel, shipped);
    goto out;
  }
  if (!acc->accelerators) {
    fprintf(stderr, "stoker plan: --accel %s: the table gives it no accelerators\n",
            acc->name);
    goto out;
  }
  if (check_rates()) goto out;
  calibrated = 0;
  if (*popt.calibrate) {
    if (!stk__instances_find(&table, popt.calibrate)) {
      fprintf(stderr, "stoker plan: --calibrate %s: no such instance type in the table\n",
              popt.calibrate);
      goto out;
    }
    if (run_calibration()) {
      rc = 1;
      goto out;
    }
  }
  uint64_t batch_bytes = (uint64_t)popt.batch_bytes;
  if (!batch_bytes) {
    stk_batch_layout lay;
    const stk_job_spec *w = stk_image_wire_spec(&spec, &wire) ? &wire : &spec;
    if (stk_batch_layout_of(w, &lay)) {
      char why[512] = "invalid";
      stk_job_spec_validate(&spec, why, sizeof(why));
      fprintf(stderr,
              "stoker plan: %s: no batch layout: %s (fix the job, or give "
              "--batch-bytes)\n",
              popt.job, why);
      goto out;
    }
    batch_bytes = lay.total_bytes;
  }
  stk__cm_search s;
  memset(&s, 0, sizeof(s));
  s.job.images_per_step = (double)spec.batch_size * spec.world_size;
  s.job.bytes_per_image = (double)batch_bytes / spec.batch_size;
  s.job.samples = popt.samples ? (uint64_t)popt.samples : spec.num_samples;
  s.job.recv_cpu_s_per_gb = popt.recv > 0 ? popt.recv : 0.5;
  const char *compute_src = "missing";
  char srcbuf[128];
  if (popt.compute_ms > 0) {
    s.job.compute_s = popt.compute_ms / 1e3;
    compute_src = "--compute-ms";
  } else if (popt.step_ms > 0 && popt.stall_pct >= 0) {
    s.job.compute_s = popt.step_ms * (1 - popt.stall_pct / 100) / 1e3;
    snprintf(srcbuf, sizeof(srcbuf), "step %.1f ms - stall %.1f%%", popt.step_ms,
             popt.stall_pct);
    compute_src = srcbuf;
  } else if (popt.step_ms > 0) {
    compute_src =
        "missing: the stall (the step time alone does not say how much of it is "
        "compute)";
  }
  uint32_t per_host = acc->accelerators;
  s.base.accel = acc;
  s.base.accel_count = popt.accel_count
                           ? (uint32_t)popt.accel_count
                           : (uint32_t)((spec.world_size + per_host - 1) / per_host);
  uint32_t ranks_per_host =
      (spec.world_size + s.base.accel_count - 1) / s.base.accel_count;
  int spare_assumed = !(popt.spare_cores > 0);
  s.base.local_cores = spare_assumed ? acc->vcpu - ranks_per_host : popt.spare_cores;
  if (s.base.local_cores <= 0) s.base.local_cores = 0;
  s.base.accel_rate = rate_of(acc->name);
  s.base.local_loading = popt.local_loading;
  s.table = &table;
  s.max_data_hosts = (uint32_t)popt.max_data_hosts;
  if (*popt.data) {
    char list[1024];
    snprintf(list, sizeof(list), "%s", popt.data);
    for (char *save = NULL, *t = strtok_r(list, ", ", &save); t;
         t = strtok_r(NULL, ", ", &save)) {
      const stk__instance *d = stk__instances_find(&table, t);
      if (!d) {
        fprintf(stderr, "stoker plan: --data %s: no such instance type in the table\n",
                t);
        goto out;
      }
      if (s.ncand == STK_CM_CANDIDATES_MAX) {
        fprintf(stderr, "stoker plan: --data: at most %d types\n", STK_CM_CANDIDATES_MAX);
        goto out;
      }
      s.cand[s.ncand++] = (stk__cm_candidate){d, rate_of(d->name), popt.data_cores};
    }
  } else {
    for (size_t i = 0; i < table.n && s.ncand < STK_CM_CANDIDATES_MAX; i++)
      if (!table.v[i].accelerators)
        s.cand[s.ncand++] =
            (stk__cm_candidate){&table.v[i], rate_of(table.v[i].name), popt.data_cores};
  }
  int best;
  size_t n = stk__cm_search_run(&s, options, PLAN_OPTIONS_MAX, &best);
  if (n > PLAN_OPTIONS_MAX) {
    fprintf(stderr,
            "stoker plan: %zu options, more than %d: fewer --data types or a lower "
            "--max-data-hosts\n",
            n, PLAN_OPTIONS_MAX);
    goto out;
  }
  if (popt.json) {
    print_json(&s, n, best, spec.name, compute_src, -1, NULL);
  } else {
    printf(
        "job %s: %.0f images per step (batch_size %u x world_size %u), %.0f bytes per "
        "image on the wire",
        spec.name, s.job.images_per_step, spec.batch_size, spec.world_size,
        s.job.bytes_per_image);
    if (s.job.samples)
      printf(", %llu samples per epoch\n", (unsigned long long)s.job.samples);
    else printf("; samples per epoch not known ($/epoch: --samples N)\n");
    printf("accelerator: %u x %s (%g vCPU, %u x %s, %g Gbit/s, $%.3f/h%s)\n",
           s.base.accel_count, acc->name, acc->vcpu, acc->accelerators, acc->accel_kind,
           acc->nic_gbps, acc->usd_per_hour, acc->approx ? " approx" : "");
    if (s.job.compute_s > 0)
      printf("  compute per step: %.1f ms (%s)\n", s.job.compute_s * 1e3, compute_src);
    else
      printf("  compute per step: %s (--step-ms with --stall-pct, or --compute-ms)\n",
             compute_src);
    printf("  spare cores per instance for loading and receiving: %g%s\n",
           s.base.local_cores,
           spare_assumed
               ? " (assumed: vCPU minus one per training process; --spare-cores)"
               : "");
    printf("  loading on the accelerator instances with data hosts: %s\n",
           s.base.local_loading ? "yes (--local-loading)" : "no");
    printf("  receiving cost: %g CPU-s/GB%s\n", s.job.recv_cpu_s_per_gb,
           popt.recv > 0 ? "" : " (the default; measure yours: --recv-cpu-s-per-gb)");
    printf("images per CPU-second: %s %s", acc->name, "");
    if (s.base.accel_rate > 0) printf("%g", s.base.accel_rate);
    else printf("not measured");
    for (size_t i = 0; i < s.ncand; i++) {
      if (s.cand[i].rate > 0) printf(", %s %g", s.cand[i].type->name, s.cand[i].rate);
      else printf(", %s not measured", s.cand[i].type->name);
    }
    printf("\nprices: %s%s%s\n\n", shipped, *popt.instances ? " + " : "", popt.instances);
    print_table(&s, n, best, -1);
    if (popt.step_ms > 0 && options[0].r.ok) {
      /* the step was measured on the homogeneous shape: does the model
       * agree with it? */
      double pred = options[0].r.step_s * 1e3, off = pred / popt.step_ms - 1;
      printf(
          "  check: the model gives %.1f ms for the homogeneous shape, measured %.1f ms "
          "(%+.0f%%)%s\n",
          pred, popt.step_ms, 100 * off,
          fabs(off) > 0.15
              ? ": more than 15% off; if the step was measured on this shape, "
                "the calibration, --spare-cores or the stall do not match "
                "that host"
              : "");
    }
    int approx = 0;
    for (size_t i = 0; i < n; i++)
      if (options[i].r.ok && (options[i].shape.accel->approx ||
                              (options[i].shape.data && options[i].shape.data->approx)))
        approx = 1;
    if (approx)
      printf("  (a price in the table is approximate for some of these types)\n");
    if (best >= 0) {
      char label[160], sm[1024], sl[1024];
      const stk__cm_option *o = &options[best];
      stk__plan_shape_label(o, label, sizeof(label));
      printf("\ncheapest $/step: %s: %.1f ms/step (%s binds), $%.7f/step", label,
             o->r.step_s * 1e3, stk__cm_bind_name(o->r.bind), o->r.usd_per_step);
      if (best && options[0].r.ok)
        printf(", %+.1f%% vs homogeneous",
               100 * (o->r.usd_per_step / options[0].r.usd_per_step - 1));
      printf("\n");
      size_t unpriced = 0;
      for (size_t i = 0; i < n; i++) unpriced += !options[i].r.ok;
      if (unpriced)
        printf(
            "  (the cheapest of the %zu options priced: %zu more could not be priced, "
            "see what they miss above)\n",
            n - unpriced, unpriced);
      snippets(o, sm, sizeof(sm), sl, sizeof(sl));
      printf("\nSageMaker:\n%s\nSlurm (deploy/slurm/stoker.sbatch):\n%s", sm, sl);
    } else {
      printf("\nno option could be priced: %s\n", options[0].r.missing);
    }
  }
  rc = best >= 0 ? 0 : 1;
out:
  stk__options_free(plan_options, NPLAN);
  return rc;
}
