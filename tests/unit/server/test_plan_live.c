/* test_plan_live.c - server/plan_live.c: a running job's shape and figures
 * from a Status reply, priced, and the purchase `stoker status` and `stoker
 * plan --coordinator` say. Status replies are built here from the figures
 * recorded on the simulated cluster (a training host of 0.35 core priced
 * like ml.p4d.24xlarge, data hosts of 0.45 core priced like
 * ml.c5.18xlarge, 1,235 images per CPU-second, a 25 ms step, batch 32 of
 * 3x224x224 uint8):
 *  - homogeneous (the worker on the training host): "add 3 x sim.data";
 *  - + 1 data host: "add 2 x sim.data to the data hosts";
 *  - + 3 data hosts, compute-bound: "keep", with what one fewer costs;
 *  - a slow link: where the link starts to bind is said; the data hosts
 *    removed when loading at home is cheaper;
 *  - no training type, an unknown type, untyped workers, hostile type
 *    names: "missing: ..." or a note, never a count. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "common/advice.h"
#include "plan_live.h"

static stk__instance_table tab;
static stk__cm_option opts[512];

static const char *const sim_table =
    "sim.accel 0.35 1 sim 10 37.688 -\n"
    "sim.data  0.45 0 -   10 3.672 -\n"
    "sim.slow  0.45 0 -   0.4 3.672 -\n";

static const char *const job_text =
    "name = sim\nsource = imagefolder\ndataset = d\npipeline = train\nheight = 224\n"
    "width = 224\ndtype = uint8\nlayout = nchw\nbatch_size = 32\nworld_size = 1\n";

#define MAXW 8
typedef struct fake {
  Stoker__V1__StatusResponse r;
  Stoker__V1__JobSpec job;
  Stoker__V1__WorkerStatus ws[MAXW], *wsp[MAXW];
  Stoker__V1__WorkerInfo wi[MAXW];
  Stoker__V1__WorkerStats st[MAXW];
  char addr[MAXW][32];
  Stoker__V1__RankStatus rk, *rkp;
  Stoker__V1__ClientStats cs;
} fake;

/* A reply with one rank (compute step_ms, stall) and no worker yet. */
static void fake_init(fake *f, double step_ms, double stall, const char *accel,
                      const char *data_type) {
  memset(f, 0, sizeof(*f));
  stoker__v1__status_response__init(&f->r);
  stoker__v1__job_spec__init(&f->job);
  f->job.canonical = (char *)job_text;
  f->r.job = &f->job;
  f->r.accel_type = (char *)accel;
  f->r.accel_hosts = 1;
  f->r.data_type = (char *)data_type;
  stoker__v1__rank_status__init(&f->rk);
  stoker__v1__client_stats__init(&f->cs);
  f->cs.step_ms = step_ms;
  f->cs.stall_fraction = stall;
  f->cs.recv_cpu_s_per_gb = 1.3;
  f->rk.stats = &f->cs;
  f->rk.last_report_ms_ago = 1000;
  f->rkp = &f->rk;
  f->r.ranks = &f->rkp;
  f->r.n_ranks = 1;
  f->r.workers = f->wsp;
}

/* A worker on host ip of type, cores, at 1,235 images per CPU-second. */
static void fake_worker(fake *f, const char *ip, const char *type, double cores) {
  size_t i = f->r.n_workers++;
  stoker__v1__worker_status__init(&f->ws[i]);
  stoker__v1__worker_info__init(&f->wi[i]);
  stoker__v1__worker_stats__init(&f->st[i]);
  snprintf(f->addr[i], sizeof(f->addr[i]), "%s:%zu", ip, 7000 + i);
  f->wi[i].address = f->addr[i];
  f->wi[i].worker_id = f->addr[i];
  f->wi[i].instance_type = (char *)type;
  f->wi[i].cpu_cores = cores;
  f->st[i].batches_per_cpu_s = 1235.0 / 32;
  f->ws[i].worker = &f->wi[i];
  f->ws[i].stats = &f->st[i];
  f->wsp[i] = &f->ws[i];
}

/* Build, search and say: the purchase into buf; the cheapest and running
 * options' indexes. 0, or -1 with the build's message in buf. */
static int plan(fake *f, const stk__live_opts *o, char *buf, size_t len, int *best,
                int *cur, stk__live_plan *lp) {
  if (stk__live_plan_build(&f->r, &tab, o, lp, buf, len)) return -1;
  size_t n = stk__cm_search_run(&lp->s, opts, 512, best);
  CHECK(n <= 512);
  *cur = stk__live_current(lp, opts, n);
  stk__live_purchase(lp, opts, n, *best, *cur, buf, len);
  printf("  %s\n    notes: %s\n", buf, lp->notes);
  return 0;
}

static void shapes(void) {
  static stk__live_plan lp;
  stk__live_opts none = {0};
  char buf[800];
  int best, cur;
  fake f;

  /* homogeneous: 78 ms measured (25 ms compute, 68% stall) */
  fake_init(&f, 25, 1 - 25.0 / 78, "sim.accel", "sim.data");
  fake_worker(&f, "10.0.0.1", "sim.accel", 0.35);
  CHECK(plan(&f, &none, buf, sizeof(buf), &best, &cur, &lp) == 0);
  CHECK(cur == 0 && lp.local_workers == 1 && lp.now_data_count == 0);
  CHECK(fabs(lp.s.base.local_cores - 0.35) < 1e-9 && !lp.spare_assumed);
  CHECK(fabs(opts[0].r.step_s * 1e3 - 74.0) < 0.1); /* 32 / (0.35 x 1235) */
  CHECK(best >= 0 && opts[best].shape.data_count == 3);
  CHECK(strstr(buf,
               "add 3 x sim.data as data hosts: step 78.0 ms measured (the model: "
               "74.0) -> 25.0 ms, $/step -56% (compute binds)") == buf);

  /* a data-host rate from a calibration run, instead of the workers' */
  const char *const rates[] = {"sim.data=1100", "sim.data=bad", "other=5"};
  stk__live_opts given = {.rates = rates, .nrates = 3};
  CHECK(plan(&f, &given, buf, sizeof(buf), &best, &cur, &lp) == 0);
  CHECK(strstr(lp.notes, "sim.data's images per CPU-second as given (1100)") != NULL);
  CHECK(best >= 0 && opts[best].shape.data_count == 3 &&
        fabs(opts[best].shape.data_rate - 1100) < 1e-9);
  /* the rank's batch rate, when it reports one, is the measured step */
  f.cs.batches_per_s = 1000.0 / 80;
  CHECK(plan(&f, &none, buf, sizeof(buf), &best, &cur, &lp) == 0);
  CHECK(fabs(lp.step_ms_measured - 80) < 1e-9);

  /* + 1 data host: 57 ms measured; the same host type, two more */
  fake_init(&f, 25, 1 - 25.0 / 57.2, "sim.accel", "");
  fake_worker(&f, "10.0.0.2", "sim.data", 0.45);
  stk__live_opts spare = {.spare_cores = 0.35};
  CHECK(plan(&f, &spare, buf, sizeof(buf), &best, &cur, &lp) == 0);
  CHECK(lp.now_data_count == 1 && lp.now_data && !strcmp(lp.now_data->name, "sim.data"));
  CHECK(cur >= 0 && opts[cur].shape.data_count == 1);
  CHECK(fabs(opts[cur].r.step_s * 1e3 - 57.6) < 0.2);
  CHECK(strstr(buf, "add 2 x sim.data to the data hosts: step 57.2 ms") != NULL);

  /* + 3 data hosts (two workers on one of them): compute-bound, keep */
  fake_init(&f, 25, 0.01, "sim.accel", "");
  fake_worker(&f, "10.0.0.2", "sim.data", 0.45);
  fake_worker(&f, "10.0.0.3", "sim.data", 0.2);
  fake_worker(&f, "10.0.0.3", "sim.data", 0.25);
  fake_worker(&f, "10.0.0.4", "sim.data", 0.45);
  CHECK(plan(&f, &spare, buf, sizeof(buf), &best, &cur, &lp) == 0);
  CHECK(lp.now_data_count == 3 && lp.data_workers == 4);
  CHECK(fabs(lp.s.cand[0].cores - 0.45) < 1e-9); /* 1.35 cores on 3 hosts */
  CHECK(best == cur && opts[cur].r.bind == STK_CM_BIND_COMPUTE);
  CHECK(strstr(buf,
               "keep 1 x sim.accel + 3 x sim.data: the cheapest $/step; step 25.3 ms "
               "measured (the model: 25.0), compute binds; with 2: 28.8 ms/step, "
               "$/step +6%") == buf);

  /* a 0.4 Gbit data host: the link binds from the first one */
  fake_init(&f, 25, 0.5, "sim.accel", "");
  fake_worker(&f, "10.0.0.2", "sim.slow", 0.45);
  CHECK(plan(&f, &spare, buf, sizeof(buf), &best, &cur, &lp) == 0);
  CHECK(strstr(buf, "the link binds from 1 x sim.slow") != NULL);
  fake_init(&f, 25, 0.5, "sim.accel", "");
  fake_worker(&f, "10.0.0.2", "sim.data", 0.45);
  f.st[0].batches_per_cpu_s = 100.0 / 32; /* a slow pipeline there */
  fake_worker(&f, "10.0.0.1", "sim.accel", 0.35);
  CHECK(plan(&f, &none, buf, sizeof(buf), &best, &cur, &lp) == 0);
  CHECK(strstr(buf,
               "remove the 1 x sim.data data host(s) (load on the training hosts "
               "alone)") == buf);

  /* no training hosts' type: what is missing, never a count */
  fake_init(&f, 25, 0.5, "", "");
  fake_worker(&f, "10.0.0.2", "sim.data", 0.45);
  CHECK(plan(&f, &none, buf, sizeof(buf), &best, &cur, &lp) == -1);
  CHECK(strstr(buf, "missing: the training hosts' instance type") == buf);
  stk__live_opts named = {.accel = "no.such"};
  CHECK(plan(&f, &named, buf, sizeof(buf), &best, &cur, &lp) == -1);
  CHECK(strstr(buf, "'no.such' is not in the instance table") != NULL);
  fake_init(&f, 25, 0.5, "sim.data", "");
  CHECK(plan(&f, &none, buf, sizeof(buf), &best, &cur, &lp) == -1);
  CHECK(strstr(buf, "has no accelerators") != NULL);

  /* workers that did not tell their type, a hostile one: left out, said */
  fake_init(&f, 25, 0.5, "sim.accel", "");
  fake_worker(&f, "10.0.0.2", "", 0.45);
  fake_worker(&f, "10.0.0.3", "\x1b[2J;rm -rf", 0.45);
  CHECK(plan(&f, &spare, buf, sizeof(buf), &best, &cur, &lp) == 0);
  CHECK(strstr(lp.notes, "1 worker(s) did not tell their instance type") &&
        strstr(lp.notes, "not in the table are left out"));
  CHECK(lp.now_data_count == 0 && lp.data_workers == 0);
  /* --worker-type names them */
  stk__live_opts wt = {.worker_type = "sim.data", .spare_cores = 0.35};
  CHECK(plan(&f, &wt, buf, sizeof(buf), &best, &cur, &lp) == 0);
  CHECK(lp.now_data_count == 1);

  /* no rank reported a step: the options say what they miss */
  fake_init(&f, 0, 0, "sim.accel", "sim.data");
  fake_worker(&f, "10.0.0.1", "sim.accel", 0.35);
  CHECK(plan(&f, &none, buf, sizeof(buf), &best, &cur, &lp) == 0);
  CHECK(best < 0 && strstr(buf, "missing: ") == buf);
}

static void names(void) {
  CHECK(stk__worker_usable_cores(2.0, 1) == 1.0); /* one builder thread */
  CHECK(stk__worker_usable_cores(0.45, 1) == 0.45);
  CHECK(stk__worker_usable_cores(0.45, 0) == 0.45);
  CHECK(stk__worker_usable_cores(0, 4) == 0); /* not told: unknown */
  CHECK(stk__instance_name_ok("ml.c5.18xlarge"));
  CHECK(stk__instance_name_ok("onprem/cpu-64:v2+a_b"));
  CHECK(!stk__instance_name_ok(""));
  CHECK(!stk__instance_name_ok(NULL));
  CHECK(!stk__instance_name_ok("a b"));
  CHECK(!stk__instance_name_ok("x\n"));
  char l[64];
  memset(l, 'a', sizeof(l));
  l[47] = 0;
  CHECK(stk__instance_name_ok(l));
  l[47] = 'a', l[48] = 0;
  CHECK(!stk__instance_name_ok(l));
}

int main(void) {
  char err[512];
  if (stk__instances_parse(&tab, sim_table, "sim.tsv", err, sizeof(err))) {
    fprintf(stderr, "%s\n", err);
    return 1;
  }
  shapes();
  names();
  CHECK_DONE();
}
