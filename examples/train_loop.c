/* train_loop.c - stoker-train-loop: a C training loop over libstoker.
 *
 * Joins a job as rank r of W (from the options, else from the environment a
 * launcher sets: STOKER_COORDINATOR, RANK, WORLD_SIZE, LOCAL_RANK),
 * consumes epochs with a simulated step time, counts what the library verified (crc32c
 * per batch) and, with --verify, compares every payload with the reference batch built
 * in-process. Prints when the first batch came (with the CLOCK_MONOTONIC time, so a
 * harness on the same host can line ranks up), a progress line every second
 * (--progress) and a summary; calls finish (not after a failed step: a rank that
 * could not read its data has not finished it). Exit 0 only if every batch arrived, in
 * order, and verified.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "stoker/client.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void usage(FILE *f) {
  fprintf(
      f,
      "usage: stoker-train-loop [--coordinator HOST:PORT] [options]\n"
      "  --coordinator HOST:PORT  the job's stoker-coordinator\n"
      "                           (default $STOKER_COORDINATOR)\n"
      "  --rank R                 this rank (default $RANK, else\n"
      "                           $OMPI_COMM_WORLD_RANK, else $SLURM_PROCID, else 0)\n"
      "  --world-size W           ranks in the job (default $WORLD_SIZE, else\n"
      "                           $OMPI_COMM_WORLD_SIZE, else $SLURM_NTASKS, else 1)\n"
      "  --cuda-device N          CUDA ordinal for --device cuda (default\n"
      "                           $LOCAL_RANK, else 0)\n"
      "  --epochs N               epochs to consume (default: all of the job)\n"
      "  --step-ms MS             simulated training step time (default 0); the\n"
      "                           loop tells the library it as its compute time\n"
      "                           (stk_client_set_step_ms), as a loop that times\n"
      "                           its accelerator would\n"
      "  --prefetch N             outstanding requests (default 8)\n"
      "  --slots N                device slots (default 2)\n"
      "  --device cpu|cuda        slot memory (default cpu)\n"
      "  --verify                 compare each batch with stk_build_reference\n"
      "  --data-root DIR          dataset root for --verify of file datasets\n"
      "  --token T                bearer token (visible in ps: prefer --token-file;\n"
      "                           default $STOKER_TOKEN, else the first line of\n"
      "                           the file $STOKER_TOKEN_FILE names)\n"
      "  --token-file FILE        read the bearer token from FILE (first line;\n"
      "                           e.g. a mounted Kubernetes Secret)\n"
      "  --tls-ca FILE            PEM CA that verifies the daemons: use TLS\n"
      "                           (default $STOKER_TLS_CA; none = plaintext)\n"
      "  --tls-cert FILE          PEM client certificate for mTLS ($STOKER_TLS_CERT)\n"
      "  --tls-key FILE           its PEM key ($STOKER_TLS_KEY)\n"
      "  --join-timeout-ms MS     (default 60000)\n"
      "  --steps N                stop after N batches in all: an early stop\n"
      "                           (default: every step of --epochs)\n"
      "  --shutdown               finish with shutdown_job (rank 0)\n"
      "  --no-finish              exit without stk_client_finish (stoker-launch\n"
      "                           finishes the ranks of a host whose training\n"
      "                           exited 0; `stoker finish` does it by hand)\n"
      "  --progress               a progress line every second\n"
      "  --help\n"
      "An option given always wins over the environment; the first launcher's\n"
      "pair of variables that is set is used for both rank and world size\n"
      "(stoker-launch and torchrun set RANK/WORLD_SIZE/LOCAL_RANK and\n"
      "STOKER_COORDINATOR, so under them no option is needed).\n");
}

/* A decimal option value in [lo, hi]; 0, or -1 after printing why. */
static int parse_u32(const char *s, const char *name, uint32_t lo, uint32_t hi,
                     uint32_t *out) {
  char *end = NULL;
  unsigned long long v = strtoull(s, &end, 10);
  if (!*s || *s == '-' || *s == '+' || *end || v < lo || v > hi) {
    fprintf(stderr, "stoker-train-loop: %s '%s': want a number in %u..%u\n", name, s, lo,
            hi);
    return -1;
  }
  *out = (uint32_t)v;
  return 0;
}

/* The first line of path (without its newline) into buf; 0, or -1 after
 * printing why. */
static int read_token(const char *path, char *buf, size_t len) {
  FILE *f = fopen(path, "r");
  if (!f) {
    fprintf(stderr, "stoker-train-loop: --token-file %s: cannot open\n", path);
    return -1;
  }
  int ok = fgets(buf, (int)len, f) != NULL;
  fclose(f);
  buf[ok ? strcspn(buf, "\r\n") : 0] = 0;
  if (!buf[0]) {
    fprintf(stderr, "stoker-train-loop: --token-file %s: no token in its first line\n",
            path);
    return -1;
  }
  return 0;
}

int main(int argc, char **argv) {
  stk_client_config cfg;
  stk_client_config_defaults(&cfg);
  cfg.log = 1; /* the client's lines on what it leaves out (working set) */
  long epochs = -1, step_ms = 0, max_steps = -1;
  int verify = 0, progress = 0, shutdown = 0, no_finish = 0, stopped = 0;
  const char *data_root = NULL, *device = "cpu";
  static char token_buf[1024];
  static const struct option opts[] = {{"coordinator", 1, 0, 'c'},
                                       {"rank", 1, 0, 'r'},
                                       {"world-size", 1, 0, 'w'},
                                       {"epochs", 1, 0, 'e'},
                                       {"step-ms", 1, 0, 's'},
                                       {"prefetch", 1, 0, 'p'},
                                       {"slots", 1, 0, 'S'},
                                       {"device", 1, 0, 'd'},
                                       {"verify", 0, 0, 'v'},
                                       {"data-root", 1, 0, 'D'},
                                       {"token", 1, 0, 't'},
                                       {"token-file", 1, 0, 'T'},
                                       {"join-timeout-ms", 1, 0, 'j'},
                                       {"shutdown", 0, 0, 'x'},
                                       {"progress", 0, 0, 'P'},
                                       {"cuda-device", 1, 0, 'C'},
                                       {"help", 0, 0, 'h'},
                                       {"tls-ca", 1, 0, 'A'},
                                       {"tls-cert", 1, 0, 'E'},
                                       {"tls-key", 1, 0, 'K'},
                                       {"steps", 1, 0, 'n'},
                                       {"no-finish", 0, 0, 'F'},
                                       {0, 0, 0, 0}};
  int o;
  while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (o) {
      case 'c':
        cfg.coordinator = optarg;
        break;
      case 'r':
        if (parse_u32(optarg, "--rank", 0, UINT32_MAX - 1, &cfg.rank)) return 2;
        break;
      case 'w':
        if (parse_u32(optarg, "--world-size", 1, UINT32_MAX, &cfg.world_size)) return 2;
        break;
      case 'C': {
        uint32_t d;
        if (parse_u32(optarg, "--cuda-device", 0, INT32_MAX, &d)) return 2;
        cfg.cuda_device = (int32_t)d;
        break;
      }
      case 'e':
        epochs = strtol(optarg, NULL, 10);
        break;
      case 's':
        step_ms = strtol(optarg, NULL, 10);
        break;
      case 'p':
        cfg.prefetch = (uint32_t)strtoul(optarg, NULL, 10);
        break;
      case 'S':
        cfg.slots = (uint32_t)strtoul(optarg, NULL, 10);
        break;
      case 'd':
        device = optarg;
        break;
      case 'v':
        verify = 1;
        break;
      case 'D':
        data_root = optarg;
        break;
      case 't':
        cfg.token = optarg;
        break;
      case 'T':
        if (read_token(optarg, token_buf, sizeof(token_buf))) return 2;
        cfg.token = token_buf;
        break;
      case 'A':
        cfg.tls_ca = optarg;
        break;
      case 'E':
        cfg.tls_cert = optarg;
        break;
      case 'K':
        cfg.tls_key = optarg;
        break;
      case 'j':
        cfg.join_timeout_ms = (uint32_t)strtoul(optarg, NULL, 10);
        break;
      case 'x':
        shutdown = 1;
        break;
      case 'n': {
        uint32_t n;
        if (parse_u32(optarg, "--steps", 1, UINT32_MAX, &n)) return 2;
        max_steps = n;
        break;
      }
      case 'F':
        no_finish = 1;
        break;
      case 'P':
        progress = 1;
        break;
      case 'h':
        usage(stdout);
        return 0;
      default:
        usage(stderr);
        return 2;
    }
  }
  if (!strcmp(device, "cuda")) cfg.device = STK_DEVICE_CUDA;
  else if (strcmp(device, "cpu") != 0) {
    fprintf(stderr, "--device must be cpu or cuda\n");
    return 2;
  }
  char err[512];
  /* Options not given come from the environment (the library would do the
   * same in open; resolving here lets the lines below print the rank). */
  int est = stk_client_config_from_env(&cfg, err, sizeof(err));
  if (est) {
    fprintf(stderr, "stoker-train-loop: %s: %s\n", stk_strerror(est), err);
    return 2;
  }
  if (!cfg.coordinator) {
    fprintf(stderr,
            "stoker-train-loop: give --coordinator HOST:PORT or set "
            "STOKER_COORDINATOR\n");
    usage(stderr);
    return 2;
  }
  stk_client *c = NULL;
  double t_open = now_s();
  int st = stk_client_open(&cfg, &c, err, sizeof(err));
  if (st) {
    fprintf(stderr, "stoker-train-loop: open: %s: %s\n", stk_strerror(st), err);
    return 1;
  }
  /* the simulated accelerator computes for exactly step_ms: tell it, so a
   * CPU-throttled host (its sleep wakes late) does not hide the demand */
  if (step_ms > 0) stk_client_set_step_ms(c, (double)step_ms);
  stk_job_spec spec;
  stk_client_job(c, &spec);
  uint64_t spe = stk_client_steps_per_epoch(c);
  if (epochs < 0 || epochs > (long)spec.epochs) epochs = spec.epochs;
  size_t plen = (size_t)stk_client_payload_bytes(c);
  unsigned char *ref = verify ? malloc(plen) : NULL;
  uint64_t batches = 0, bytes = 0, verify_fail = 0, order_fail = 0;
  double t0 = now_s(), last = t0;
  uint64_t last_b = 0, last_bytes = 0;
  int ok = 1;
  printf("rank %u/%u: job %s, %llu steps/epoch, %ld epoch(s), %zu bytes/batch\n",
         cfg.rank, cfg.world_size, spec.name, (unsigned long long)spe, epochs, plen);
  for (long e = 0; e < epochs && ok && !stopped; e++) {
    uint64_t expect = 0;
    for (;;) {
      stk_batch *b = NULL;
      st = stk_client_next(c, &b);
      if (st == STK_END_OF_EPOCH || st == STK_END_OF_DATA) break;
      if (st) {
        fprintf(stderr, "stoker-train-loop: next: %s: %s\n", stk_strerror(st),
                stk_client_error(c));
        ok = 0;
        break;
      }
      if (batches == 0) {
        double tf = now_s();
        printf(
            "rank %u: first batch %.3f s after open began (open took %.3f s; "
            "monotonic %.6f)\n",
            cfg.rank, tf - t_open, t0 - t_open, tf);
        fflush(stdout);
      }
      size_t len = 0;
      const void *p = stk_batch_payload(b, &len);
      if (stk_batch_step(b) != expect) order_fail++;
      expect = stk_batch_step(b) + 1;
      if (ref) {
        st = stk_client_reference(c, stk_batch_epoch(b), stk_batch_step(b), data_root,
                                  ref, plen);
        if (st || memcmp(ref, p, len) != 0) {
          if (verify_fail < 5)
            fprintf(stderr,
                    "verify: epoch %llu step %llu differs from the reference%s%s\n",
                    (unsigned long long)stk_batch_epoch(b),
                    (unsigned long long)stk_batch_step(b), st ? ": " : "",
                    st ? stk_client_error(c) : "");
          verify_fail++;
        }
      }
      batches++;
      bytes += len;
      if (step_ms > 0) {
        struct timespec ts = {step_ms / 1000, (step_ms % 1000) * 1000000};
        nanosleep(&ts, NULL);
      }
      stk_batch_release(b);
      double now = now_s();
      if (progress && now - last >= 1.0) {
        stk_stats s;
        stk_client_stats(c, &s);
        printf(
            "rank %u: epoch %ld step %llu  %.1f batches/s  %.1f MB/s  stall %.1f%%  "
            "workers %u\n",
            cfg.rank, e, (unsigned long long)expect, (batches - last_b) / (now - last),
            (bytes - last_bytes) / (now - last) / 1e6, 100 * s.stall_fraction,
            s.workers_alive);
        fflush(stdout);
        last = now, last_b = batches, last_bytes = bytes;
      }
      if (max_steps >= 0 && batches >= (uint64_t)max_steps) {
        stopped = 1; /* an early stop: the rest of the data is never asked for */
        break;
      }
    }
    if (ok && !stopped && expect != spe) {
      fprintf(stderr, "epoch %ld ended after %llu of %llu steps\n", e,
              (unsigned long long)expect, (unsigned long long)spe);
      ok = 0;
    }
  }
  double dt = now_s() - t0;
  stk_stats s;
  stk_client_stats(c, &s);
  printf(
      "summary rank %u: batches %llu  GB %.3f  %.1f batches/s  %.1f MB/s  stall %.1f%%"
      "  reissued %llu  duplicates %llu  crc_errors %llu  verify_failures %llu%s"
      "  order_failures %llu  substituted_samples %llu\n",
      cfg.rank, (unsigned long long)batches, bytes / 1e9, dt > 0 ? batches / dt : 0,
      dt > 0 ? bytes / dt / 1e6 : 0, 100 * s.stall_fraction,
      (unsigned long long)s.reissued, (unsigned long long)s.duplicates,
      (unsigned long long)s.crc_errors, (unsigned long long)verify_fail,
      verify ? "" : " (not verified)", (unsigned long long)order_fail,
      (unsigned long long)s.substituted);
  if (s.recv_cpu_s > 0)
    printf(
        "receiving rank %u: %.2f CPU-s (libstoker's receive threads), %.2f CPU-s per GB "
        "(user %.2f + system %.2f), %.0f%% of %.2g usable cores over the last 5-10 s\n",
        cfg.rank, s.recv_cpu_s, s.recv_cpu_s_per_gb, s.recv_cpu_user_s_per_gb,
        s.recv_cpu_sys_s_per_gb, 100 * s.recv_host_share, s.host_cores);
  /* The stall judged against this loop's own step (time outside next()):
   * a loop with no step time has no demand to size the workers by. */
  if (s.stall_fraction > 0.02 && s.step_ms < 1.0)
    printf(
        "input stall %.1f%%: no advice: missing: a step time (the loop spends %.3f ms "
        "per batch outside next(); --step-ms gives one)\n",
        100 * s.stall_fraction, s.step_ms);
  else if (s.workers_needed > 0)
    printf(
        "input-bound: stall %.1f%% of a %.1f ms step: about %.1fx the workers' supply "
        "would remove it (`stoker status` says how many cores)\n",
        100 * s.stall_fraction, s.step_ms, s.workers_needed / s.workers_alive);
  /* What ends a rank: its finish (client.h). Skipped with --no-finish,
   * and after a failed step: a rank that could not read its data has not
   * finished it (a finish would let the job end as a success). */
  if (!no_finish && ok) {
    st = stk_client_finish(c, shutdown);
    if (st) fprintf(stderr, "finish: %s: %s\n", stk_strerror(st), stk_client_error(c));
  }
  stk_client_close(c);
  free(ref);
  uint64_t want = stopped ? (uint64_t)max_steps : (uint64_t)epochs * spe;
  return ok && !verify_fail && !order_fail && batches == want ? 0 : 1;
}
