/* test_costmodel.c - common/costmodel.c, the price-performance model, on
 * published and recorded figures:
 *  - the shipped instance table parses; bad lines are refused with
 *    file:line; a user row replaces a shipped one; 'N/core' prices;
 *  - the SageMaker TensorFlow ResNet-50 example: from the homogeneous
 *    figure alone (1 x ml.p4d.24xlarge, 192 ms/step) the model predicts
 *    + 2 x ml.c5.18xlarge within 15% of the published 86 ms and the $/step
 *    gain (published 46%);
 *  - the SageMaker PyTorch example (ml.p3.2xlarge, 1193 ms -> + 1 x
 *    ml.c5.9xlarge 184 ms): the error is printed and pinned, with the
 *    per-core speed ratio that explains it;
 *  - the simulated cluster (CPU quotas per simulated host, 1,235 images
 *    per CPU-second, 25 ms step): predictions as recorded, within 15% of
 *    the measured step, and the search's cheapest = + 3 data hosts;
 *  - missing figures give "missing: ...", never a number.
 * Prints every figure it checks (ctest --output-on-failure shows them;
 * docs/price-performance.md quotes them). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "common/costmodel.h"

#ifndef STK_INSTANCES_FILE
#error "STK_INSTANCES_FILE: the shipped deploy/instances.tsv"
#endif

static stk__instance_table tab; /* 25 KB: static, not on the stack */

static double rel(double got, double want) { return (got - want) / want; }

static void table_checks(void) {
  char err[512];
  CHECK(stk__instances_load(&tab, STK_INSTANCES_FILE, err, sizeof(err)) == 0);
  const stk__instance *p4d = stk__instances_find(&tab, "ml.p4d.24xlarge");
  CHECK(p4d && p4d->vcpu == 96 && p4d->accelerators == 8 && p4d->nic_gbps == 400 &&
        p4d->usd_per_hour == 37.688 && !p4d->approx);
  const stk__instance *p3 = stk__instances_find(&tab, "ml.p3.2xlarge");
  CHECK(p3 && p3->vcpu == 8 && p3->accelerators == 1 && p3->burst &&
        p3->usd_per_hour == 3.825);
  const stk__instance *c5 = stk__instances_find(&tab, "ml.c5.18xlarge");
  CHECK(c5 && c5->vcpu == 72 && c5->accelerators == 0 && c5->nic_gbps == 25 &&
        c5->usd_per_hour == 3.672);
  c5 = stk__instances_find(&tab, "ml.c5.9xlarge");
  CHECK(c5 && c5->vcpu == 36 && c5->nic_gbps == 10 && c5->usd_per_hour == 1.836);
  CHECK(stk__instances_find(&tab, "ml.p5.48xlarge")->approx);
  CHECK(stk__instances_find(&tab, "no.such") == NULL);

  /* bad lines: file:line and what is wrong */
  static const struct {
    const char *text, *want;
  } bad[] = {
      {"# c\n\nx 8 1 A 10 3.0\n", "u.tsv:3: 6 field(s), want 7"},
      {"x 0 1 A 10 3.0 -\n", "u.tsv:1: vcpu wants a number > 0, got '0'"},
      {"x 8 1.5 A 10 3.0 -\n", "u.tsv:1: accelerators wants an integer"},
      {"x 8 1 A fast 3.0 -\n", "u.tsv:1: gbit wants a number > 0, got 'fast'"},
      {"x 8 1 A 10 3.0/hour -\n", "u.tsv:1: usd_per_hour wants a number or 'N/core'"},
      {"x 8 1 A 10 -1 -\n", "u.tsv:1: usd_per_hour wants a number >= 0"},
      {"x 8 1 A 10 3 spot\n", "u.tsv:1: unknown flag 'spot'"},
      {"x 8 1 A 10 3 - extra\n", "u.tsv:1: 8 field(s), want 7"},
      {"x 8 1 A 10 nan -\n", "u.tsv:1: usd_per_hour wants a number >= 0"},
      {"x 1e300 1 A 10 1e300/core -\n", "u.tsv:1: usd_per_hour x vcpu is not a finite"},
      {"x 8 1 A 10 /core -\n", "u.tsv:1: usd_per_hour wants a number >= 0 or 'N/core'"},
      {"a-name-longer-than-forty-seven-bytes-is-refused-here 8 1 A 10 1 -\n",
       "u.tsv:1: name 'a-name-longer"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    stk__instance_table *t = calloc(1, sizeof(*t));
    err[0] = 0;
    int rc = stk__instances_parse(t, bad[i].text, "u.tsv", err, sizeof(err));
    if (rc == 0 || strncmp(err, bad[i].want, strlen(bad[i].want)))
      fprintf(stderr, "bad line %zu: rc %d, err '%s', want '%s...'\n", i, rc, err,
              bad[i].want);
    CHECK(rc != 0 && !strncmp(err, bad[i].want, strlen(bad[i].want)));
    free(t);
  }
  /* a line past 1023 bytes */
  {
    static char longline[1200];
    memset(longline, 'x', sizeof(longline) - 2);
    longline[sizeof(longline) - 2] = '\n';
    stk__instance_table *t = calloc(1, sizeof(*t));
    CHECK(stk__instances_parse(t, longline, "u.tsv", err, sizeof(err)) != 0 &&
          strstr(err, "u.tsv:1: line longer than 1023 bytes"));
    free(t);
  }
  /* an override replaces the shipped row; on-prem per core-hour */
  size_t before = tab.n;
  CHECK(stk__instances_parse(&tab,
                             "ml.c5.18xlarge 72 0 - 25 1.2 -  # spot\n"
                             "onprem-cpu\t64\t0\t-\t100\t0.02/core\tapprox\n",
                             "mine.tsv", err, sizeof(err)) == 0);
  CHECK(tab.n == before + 1);
  CHECK(stk__instances_find(&tab, "ml.c5.18xlarge")->usd_per_hour == 1.2);
  const stk__instance *op = stk__instances_find(&tab, "onprem-cpu");
  CHECK(op && fabs(op->usd_per_hour - 1.28) < 1e-9 && op->approx);
  CHECK(stk__instances_load(&tab, "/nonexistent/x.tsv", err, sizeof(err)) != 0 &&
        strstr(err, "/nonexistent/x.tsv"));
  /* reload the shipped table for the checks below */
  memset(&tab, 0, sizeof(tab));
  CHECK(stk__instances_load(&tab, STK_INSTANCES_FILE, err, sizeof(err)) == 0);
}

/* TensorFlow ResNet-50 example. Assumptions (not published; stated so the
 * test can be read): global batch 256 x 8 = 2048 images; uint8 224x224x3
 * on the wire (150,528 bytes per image); the homogeneous 192 ms step is
 * data-bound with all 96 vCPUs loading, so a vCPU makes 2048 / (0.192 x
 * 96) = 111 images/s; a c5.18xlarge vCPU (same Xeon generation as the
 * p4d's) makes as many; the accelerator host keeps loading on its vCPUs
 * with the data hosts; receiving costs 0.35 CPU-s/GB; compute time is not
 * published: taken as 50 ms and checked not to matter below 75 ms. */
static void tensorflow_example(void) {
  const double I = 2048, hom_ms = 192, pub_ms = 86;
  double rate = I / (hom_ms / 1e3 * 96);
  stk__cm_job job = {.images_per_step = I,
                     .bytes_per_image = 224 * 224 * 3,
                     .compute_s = 0.050,
                     .recv_cpu_s_per_gb = 0.35};
  stk__cm_shape hom = {.accel = stk__instances_find(&tab, "ml.p4d.24xlarge"),
                       .accel_count = 1,
                       .local_cores = 96,
                       .accel_rate = rate,
                       .local_loading = 1};
  stk__cm_shape het = hom;
  het.data = stk__instances_find(&tab, "ml.c5.18xlarge");
  het.data_count = 2;
  het.data_rate = rate;
  stk__cm_result h, r;
  CHECK(stk__cm_predict(&job, &hom, &h) && stk__cm_predict(&job, &het, &r));
  double gain_pub = 1 - (45.032 * 0.086) / (37.688 * 0.192);
  double gain = 1 - r.usd_per_step / h.usd_per_step;
  printf("tensorflow: rate %.1f images/vCPU-s (from 192 ms, 96 vCPU, 2048 images)\n",
         rate);
  printf(
      "  homogeneous: predicted %.1f ms (%s), $/h %.3f, $/step x100 %.3f (published "
      "0.201)\n",
      h.step_s * 1e3, stk__cm_bind_name(h.bind), h.usd_per_hour, h.usd_per_step * 100);
  printf(
      "  + 2 x ml.c5.18xlarge: predicted %.1f ms (%s) vs published 86 ms: %+.1f%%; $/h "
      "%.3f; $/step x100 %.4f (published 0.108); gain %.1f%% (published %.1f%%)\n",
      r.step_s * 1e3, stk__cm_bind_name(r.bind), 100 * rel(r.step_s * 1e3, pub_ms),
      r.usd_per_hour, r.usd_per_step * 100, 100 * gain, 100 * gain_pub);
  CHECK(h.bind == STK_CM_BIND_SUPPLY && fabs(h.step_s * 1e3 - hom_ms) < 0.01);
  CHECK(fabs(h.usd_per_step * 100 - 0.201) < 0.0005);
  CHECK(fabs(r.usd_per_hour - 45.032) < 1e-9);
  CHECK(fabs(rel(r.step_s * 1e3, pub_ms)) < 0.15);
  CHECK(fabs(rel(r.usd_per_step * 100, 0.108)) < 0.15);
  CHECK(gain > 0.40 && fabs(gain - gain_pub) < 0.10);
  CHECK(r.bind == STK_CM_BIND_SUPPLY);
  /* the compute time does not matter while it is below the data time */
  for (double c = 0.001; c < 0.075; c += 0.010) {
    stk__cm_job j2 = job;
    j2.compute_s = c;
    stk__cm_result r2;
    stk__cm_predict(&j2, &het, &r2);
    CHECK(fabs(r2.step_s - r.step_s) < 1e-12);
  }
  /* the same with the accelerator host not loading (stoker-launch's
   * heterogeneous layout): the c5 vCPUs alone */
  het.local_loading = 0;
  stk__cm_result r3;
  stk__cm_predict(&job, &het, &r3);
  printf(
      "  (data hosts only, accelerator host not loading: %.1f ms, %+.0f%%; the published "
      "86 ms needs the p4d's vCPUs loading too, or c5 vCPUs %.2fx faster)\n",
      r3.step_s * 1e3, 100 * rel(r3.step_s * 1e3, pub_ms), (I / 0.086) / (144 * rate));
  CHECK(r3.step_s > r.step_s);
}

/* PyTorch example. Assumptions: images per step I = 256 (any value gives
 * the same times: the rate is derived from it); the homogeneous 1193 ms
 * is data-bound on all 8 vCPUs; the c5.9xlarge vCPU is as fast as the
 * p3.2xlarge's; both load. Published: 184 ms, $/step x100 0.127 -> 0.029
 * (+77%). The model says 217 ms (+18%): the p3.2xlarge's Xeon E5-2686 v4
 * (Broadwell, 2.3 GHz) is slower per vCPU than the c5's Xeon Platinum
 * (3.0 GHz and up), and some of its 8 vCPUs run the training process;
 * a c5 vCPU 1.22x as fast as a p3 vCPU closes the gap. The model takes one
 * rate per CPU type, so a calibration on each type removes this error. */
static void pytorch_example(void) {
  const double I = 256, hom_ms = 1193, pub_ms = 184;
  double rate = I / (hom_ms / 1e3 * 8);
  stk__cm_job job = {.images_per_step = I,
                     .bytes_per_image = 224 * 224 * 3,
                     .compute_s = 0.100,
                     .recv_cpu_s_per_gb = 0.35};
  stk__cm_shape hom = {.accel = stk__instances_find(&tab, "ml.p3.2xlarge"),
                       .accel_count = 1,
                       .local_cores = 8,
                       .accel_rate = rate,
                       .local_loading = 1};
  stk__cm_shape het = hom;
  het.data = stk__instances_find(&tab, "ml.c5.9xlarge");
  het.data_count = 1;
  het.data_rate = rate;
  stk__cm_result h, r;
  CHECK(stk__cm_predict(&job, &hom, &h) && stk__cm_predict(&job, &het, &r));
  double gain = 1 - r.usd_per_step / h.usd_per_step;
  double err = rel(r.step_s * 1e3, pub_ms);
  double ratio = ((I / (pub_ms / 1e3)) - 8 * rate) / (36 * rate);
  printf("pytorch: rate %.1f images/vCPU-s (from 1193 ms, 8 vCPU)\n", rate);
  printf(
      "  + 1 x ml.c5.9xlarge: predicted %.1f ms (%s) vs published 184 ms: %+.1f%%; $/h "
      "%.3f; $/step x100 %.4f -> %.4f (published 0.127 -> 0.029); gain %.1f%% "
      "(published 77%%)\n",
      r.step_s * 1e3, stk__cm_bind_name(r.bind), 100 * err, r.usd_per_hour,
      h.usd_per_step * 100, r.usd_per_step * 100, 100 * gain);
  printf(
      "  error explained: same images/s per vCPU assumed on the p3's Broadwell and the "
      "c5's Xeon Platinum; a c5 vCPU %.2fx as fast closes it\n",
      ratio);
  CHECK(fabs(r.usd_per_hour - 5.661) < 1e-9);
  CHECK(fabs(h.usd_per_step * 100 - 0.127) < 0.0005);
  /* pinned: the error the docs state */
  CHECK(err > 0.15 && err < 0.20);
  CHECK(gain > 0.70);
  CHECK(ratio > 1.15 && ratio < 1.30);
  /* with that ratio in the c5's calibration the model lands on it */
  het.data_rate = rate * ratio;
  stk__cm_predict(&job, &het, &r);
  CHECK(fabs(rel(r.step_s * 1e3, pub_ms)) < 0.01);
}

/* The simulated cluster: one machine, network namespaces as hosts, a CPU
 * quota per host; an accelerator host of 0.35 core priced like a
 * p4d.24xlarge (it trains only: no worker on it in the heterogeneous
 * shapes; receiving 1.3 CPU-s/GB, its NIC unshaped), data hosts of 0.45
 * core priced like a c5.18xlarge with 1 Gbit links; 1,235 images per
 * CPU-second (calibration), batch 32 uint8 224x224, a simulated 25 ms
 * step. Recorded: measured ms/step and the one-line prediction. */
static void simulated_cluster(void) {
  static const char rows[] =
      "sim.accel.p4d  0.35 1 sim 10 37.688 -\n"
      "sim.data.c5    0.45 0 -   1  3.672  -\n";
  stk__instance_table *t = calloc(1, sizeof(*t));
  char err[256];
  CHECK(stk__instances_parse(t, rows, "sim", err, sizeof(err)) == 0);
  stk__cm_search s = {.job = {.images_per_step = 32,
                              .bytes_per_image = 224 * 224 * 3,
                              .compute_s = 0.025,
                              .recv_cpu_s_per_gb = 1.3},
                      .base = {.accel = stk__instances_find(t, "sim.accel.p4d"),
                               .accel_count = 1,
                               .local_cores = 0.35,
                               .accel_rate = 1235,
                               .local_loading = 0},
                      .table = t,
                      .ncand = 1,
                      .max_data_hosts = 5};
  s.cand[0].type = stk__instances_find(t, "sim.data.c5");
  s.cand[0].rate = 1235;
  stk__cm_option o[8];
  int best;
  size_t n = stk__cm_search_run(&s, o, 8, &best);
  CHECK(n == 6);
  static const double measured[4] = {78.0, 57.2, 31.1, 25.5};
  static const double recorded[4] = {74.1, 57.6, 28.8, 25.0};
  for (size_t i = 0; i < 4 && i < n; i++) {
    double ms = o[i].r.step_s * 1e3;
    printf(
        "simulated + %zu data host(s): predicted %.1f ms (%s), recorded prediction "
        "%.1f, measured %.1f (%+.1f%%), $/step vs homogeneous %+.1f%%%s\n",
        i, ms, stk__cm_bind_name(o[i].r.bind), recorded[i], measured[i],
        100 * rel(ms, measured[i]), 100 * rel(o[i].r.usd_per_step, o[0].r.usd_per_step),
        o[i].cheapest ? "  <- cheapest" : "");
    CHECK(fabs(rel(ms, recorded[i])) < 0.01);
    CHECK(fabs(rel(ms, measured[i])) < 0.15);
  }
  CHECK(best == 3 && o[3].shape.data_count == 3);
  CHECK(o[3].r.bind == STK_CM_BIND_COMPUTE && fabs(o[3].r.util - 1) < 1e-9);
  CHECK(o[1].r.bind == STK_CM_BIND_SUPPLY && o[0].r.bind == STK_CM_BIND_SUPPLY);
  /* beyond 3 the accelerator host's 0.35 core could take in no more than
   * 0.35 / (150,528 B x 1.3 ns/B) = 1,789 images/s: the receive binds the
   * data side (still under the 25 ms step) */
  CHECK(o[4].r.data_s * 1e3 > 17.8 && o[4].r.data_s * 1e3 < 18.0);
  CHECK(o[4].r.recv_s > o[4].r.supply_s);
  /* with a slow link the link binds */
  t->v[1].nic_gbps = 0.2;
  stk__cm_predict(&s.job, &o[2].shape, &o[2].r);
  CHECK(o[2].r.bind == STK_CM_BIND_LINK);
  printf("simulated + 2 on 0.2 Gbit links: %.1f ms (%s)\n", o[2].r.step_s * 1e3,
         stk__cm_bind_name(o[2].r.bind));
  free(t);
}

static void missing_figures(void) {
  stk__cm_job job = {.images_per_step = 32, .bytes_per_image = 150528, .compute_s = 0};
  stk__cm_shape sh = {.accel = stk__instances_find(&tab, "ml.p3.2xlarge"),
                      .accel_count = 1,
                      .local_cores = 8,
                      .accel_rate = 100};
  stk__cm_result r;
  CHECK(stk__cm_predict(&job, &sh, &r) == 0 && !r.ok && r.step_s == 0 &&
        !strncmp(r.missing, "missing: the step compute time", 30));
  job.compute_s = 0.1;
  sh.accel_rate = 0;
  CHECK(stk__cm_predict(&job, &sh, &r) == 0 &&
        strstr(r.missing, "images per CPU-second on ml.p3.2xlarge"));
  /* data hosts without a calibration of their type */
  sh.accel_rate = 100;
  sh.data = stk__instances_find(&tab, "ml.c5.9xlarge");
  sh.data_count = 1;
  CHECK(stk__cm_predict(&job, &sh, &r) == 0 &&
        strstr(r.missing, "images per CPU-second on ml.c5.9xlarge"));
  sh.data_rate = 100;
  job.recv_cpu_s_per_gb = -1;
  CHECK(stk__cm_predict(&job, &sh, &r) == 0 && strstr(r.missing, "receiving cost"));
  job.recv_cpu_s_per_gb = 0.3;
  CHECK(stk__cm_predict(&job, &sh, &r) == 1 && r.usd_per_epoch < 0);
  job.samples = 1000;
  CHECK(stk__cm_predict(&job, &sh, &r) == 1 && r.steps_per_epoch == 32 &&
        fabs(r.usd_per_epoch - 32 * r.usd_per_step) < 1e-12);
  /* a search without the step time answers nothing, marks nothing */
  stk__cm_search s = {.job = {.images_per_step = 32, .bytes_per_image = 150528},
                      .base = sh,
                      .table = &tab,
                      .ncand = 1,
                      .max_data_hosts = 2};
  s.cand[0].type = sh.data;
  s.cand[0].rate = 100;
  stk__cm_option o[8];
  int best;
  size_t n = stk__cm_search_run(&s, o, 8, &best);
  CHECK(best == -1);
  for (size_t i = 0; i < n && i < 8; i++) CHECK(!o[i].r.ok && !o[i].cheapest);
  /* the larger types of the family: p3.8xlarge, p3.16xlarge */
  CHECK(n == 5 && o[1].larger && o[2].larger &&
        !strcmp(o[1].shape.accel->name, "ml.p3.8xlarge") && o[1].shape.local_cores == 32);
  /* 8 x p3.2xlarge (one core each taken by training) onto larger types:
   * 2 x p3.8xlarge with 32 - 4 spare, 1 x p3.16xlarge with 64 - 8 */
  s.base.accel_count = 8;
  s.base.local_cores = 7;
  n = stk__cm_search_run(&s, o, 8, &best);
  CHECK(n == 5 && o[1].shape.accel_count == 2 && o[1].shape.local_cores == 28 &&
        o[2].shape.accel_count == 1 && o[2].shape.local_cores == 56);
  printf("missing: '%s'\n", o[0].r.missing);
}

int main(void) {
  table_checks();
  tensorflow_example();
  pytorch_example();
  simulated_cluster();
  missing_figures();
  CHECK_DONE();
}
