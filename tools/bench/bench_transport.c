/* bench_transport.c - `stoker-bench transport`: how close the batch stream
 * gets to the physical limit of the link.
 *
 * In one run it measures (1) one plain TCP stream over loopback moving the
 * same bytes (the limit), and (2) a real stoker-coordinator and one
 * stoker-worker serving 256x3x224x224 uint8 synthetic batches to libstoker
 * in this process. It prints GB/s and CPU seconds per GB on both sides and
 * the ratio stoker / raw TCP. The worker's CPU includes building the
 * synthetic batches and their crc32c; the bench prints the CPU of its
 * builder threads (named stk-build) apart, so the wire's own share can be
 * read off.
 *
 * Where the training side's CPU goes: the raw receiver's user and system
 * time and context switches (getrusage RUSAGE_THREAD), a table of both
 * processes' threads by name from /proc (user, system, wake-ups,
 * preemptions per GB), and the client's one copy out of gRPC's buffers
 * with its crc32c measured in-process. At the end the client's own
 * receive CPU (stk_client_stats: user, system, host share) is set against
 * /proc's figure for the same threads. --quota CORES runs this process
 * (client and raw receiver) in a new cgroup with that CPU quota, and
 * --rate paces the client, as on an accelerator host with a quota.
 *
 * Both sides are measured warm: the raw connection carries as many
 * batches untimed as stoker's warm-up before its timed bytes (a fresh
 * connection's socket buffers start small) and its receive buffer is
 * faulted in first; stoker's warm-up writes every receive buffer and slot
 * of the client once.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "stoker/client.h"

/* ---- raw TCP ------------------------------------------------------------ */

typedef struct {
  int fd;
  size_t warm, total, chunk; /* warm: bytes sent before the timed ones */
  double cpu;                /* thread CPU over the timed bytes */
} tcp_side;

static void *tcp_sender(void *p) {
  tcp_side *s = p;
  char *buf = malloc(s->chunk);
  if (!buf) {
    shutdown(s->fd, SHUT_WR);
    return NULL;
  }
  memset(buf, 0x5a, s->chunk);
  double c0 = bu_thread_cpu_s();
  size_t left = s->warm + s->total;
  while (left) {
    if (left == s->total) c0 = bu_thread_cpu_s();
    size_t n = left < s->chunk ? left : s->chunk;
    if (left > s->total && n > left - s->total) n = left - s->total;
    ssize_t w = send(s->fd, buf, n, 0);
    if (w <= 0) {
      if (w < 0 && errno == EINTR) continue;
      break;
    }
    left -= (size_t)w;
  }
  s->cpu = bu_thread_cpu_s() - c0;
  shutdown(s->fd, SHUT_WR);
  free(buf);
  return NULL;
}

/* One plain TCP connection over loopback: `warm` bytes to let the kernel
 * size its socket buffers (stoker's connection is as old as the client),
 * then `total` bytes timed, received into one batch-sized buffer. */
/* This thread's user and system CPU seconds and context switches
 * (voluntary + involuntary): getrusage(RUSAGE_THREAD). */
static void thread_usage(double *user, double *sys, double *csw) {
  struct rusage ru;
  getrusage(RUSAGE_THREAD, &ru);
  *user = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6;
  *sys = ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
  *csw = (double)ru.ru_nvcsw + (double)ru.ru_nivcsw;
}

/* The raw receiver's split, per GB: user, system, context switches. */
typedef struct {
  double user, sys, csw;
} raw_split;

static int raw_tcp(size_t warm, size_t total, size_t batch_bytes, double *gbps,
                   double *send_cpu_per_gb, double *recv_cpu_per_gb, raw_split *rs) {
  int ls = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t al = sizeof a;
  if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof a) || listen(ls, 1) ||
      getsockname(ls, (struct sockaddr *)&a, &al))
    return -1;
  int cs = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(cs, (struct sockaddr *)&a, sizeof a)) return -1;
  int ss = accept(ls, NULL, NULL);
  close(ls);
  tcp_side snd = {ss, warm, total, 4u << 20, 0};
  char *dst = malloc(batch_bytes);
  if (!dst) return -1;
  memset(dst, 0, batch_bytes); /* fault it in: the client's buffers are, by the warm-up */
  pthread_t th;
  pthread_create(&th, NULL, tcp_sender, &snd);
  size_t got = 0, off = 0;
  double t0 = bu_now_s(), c0 = bu_thread_cpu_s(), u0, s0, w0, u1, s1, w1;
  thread_usage(&u0, &s0, &w0);
  for (;;) {
    size_t room = batch_bytes - off;
    if (got < warm && room > warm - got) room = warm - got;
    ssize_t r = recv(cs, dst + off, room, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    if (got < warm && got + (size_t)r == warm) {
      t0 = bu_now_s(), c0 = bu_thread_cpu_s();
      thread_usage(&u0, &s0, &w0);
    }
    got += (size_t)r;
    off = (off + (size_t)r) % batch_bytes;
  }
  double recv_cpu = bu_thread_cpu_s() - c0, dt = bu_now_s() - t0;
  thread_usage(&u1, &s1, &w1);
  pthread_join(th, NULL);
  close(cs);
  close(ss);
  free(dst);
  if (got != warm + total) return -1;
  double gb = total / 1e9;
  *gbps = gb / dt;
  *send_cpu_per_gb = snd.cpu / gb;
  *recv_cpu_per_gb = recv_cpu / gb;
  rs->user = (u1 - u0) / gb, rs->sys = (s1 - s0) / gb, rs->csw = (w1 - w0) / gb;
  return 0;
}

/* ---- a CPU quota for this process -------------------------------------- */

/* value into dir/file; 0, or -1. */
static int put_file(const char *dir, const char *file, const char *value) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  int ok = fputs(value, f) >= 0;
  return fclose(f) == 0 && ok ? 0 : -1;
}

/* Move this process (all its threads) into a new cgroup of `cores` CPU
 * quota (v1 cpu controller or v2), made as dir; its parent in parent.
 * 0, or -1 with a message (root and a writable hierarchy needed). */
static int quota_enter(double cores, char *dir, size_t dlen, char *parent, size_t plen) {
  char q[64], pid[32];
  snprintf(pid, sizeof pid, "%d", (int)getpid());
  long quota = (long)(cores * 100000 + 0.5);
  if (!access("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", F_OK)) {
    snprintf(parent, plen, "/sys/fs/cgroup/cpu");
    snprintf(dir, dlen, "%s/stoker-bench-%s", parent, pid);
    snprintf(q, sizeof q, "%ld", quota);
    if (mkdir(dir, 0755) || put_file(dir, "cpu.cfs_period_us", "100000") ||
        put_file(dir, "cpu.cfs_quota_us", q) || put_file(dir, "cgroup.procs", pid))
      goto fail;
    return 0;
  }
  if (!access("/sys/fs/cgroup/cgroup.controllers", F_OK)) {
    snprintf(parent, plen, "/sys/fs/cgroup");
    snprintf(dir, dlen, "%s/stoker-bench-%s", parent, pid);
    snprintf(q, sizeof q, "%ld 100000", quota);
    if (mkdir(dir, 0755) || put_file(dir, "cpu.max", q) ||
        put_file(dir, "cgroup.procs", pid))
      goto fail;
    return 0;
  }
  fprintf(stderr, "--quota: no cgroup v1 cpu or v2 hierarchy at /sys/fs/cgroup\n");
  dir[0] = 0;
  return -1;
fail:
  fprintf(stderr, "--quota: cannot set up %s: %s (run as root)\n", dir, strerror(errno));
  rmdir(dir);
  dir[0] = 0;
  return -1;
}

/* Back to the parent cgroup; the quota's cgroup removed. */
static void quota_leave(const char *dir, const char *parent) {
  if (!dir[0]) return;
  char pid[32];
  snprintf(pid, sizeof pid, "%d", (int)getpid());
  if (put_file(parent, "cgroup.procs", pid) || rmdir(dir))
    fprintf(stderr, "--quota: cannot remove %s: %s\n", dir, strerror(errno));
}

/* The CPU seconds (user, system) /proc counts for this process's threads
 * named like the receive path's (stk-io, stk-copy, stk-watch,
 * stk-sched), and for all of them. */
static void proc_recv_cpu(double *user, double *sys, double *all) {
  static bu_threads t;
  *user = *sys = *all = 0;
  if (bu_threads_snap(getpid(), &t)) return;
  for (int i = 0; i < t.n; i++) {
    *all += t.t[i].user_s + t.t[i].sys_s;
    const char *n = t.t[i].comm;
    if (!strcmp(n, "stk-io") || !strcmp(n, "stk-copy") || !strcmp(n, "stk-watch") ||
        !strcmp(n, "stk-sched"))
      *user += t.t[i].user_s, *sys += t.t[i].sys_s;
  }
}

/* ---- stoker ------------------------------------------------------------- */

/* The per-thread-name table of one process over the stoker rounds: user
 * and system CPU s/GB, wake-ups (voluntary switches) and preemptions per
 * GB; names with less than 0.001 CPU s/GB and no switch are left out.
 * /proc's clock ticks (10 ms) bound its resolution. */
static void print_threads(const char *who, const bu_threads *acc, double gb) {
  double tu = 0, ts = 0, tv = 0, ti = 0;
  printf("  %s threads (from /proc, all stoker rounds, per GB):\n", who);
  for (int i = 0; i < acc->n; i++) {
    const bu_thread *t = &acc->t[i];
    tu += t->user_s, ts += t->sys_s, tv += t->vcsw, ti += t->ivcsw;
    if ((t->user_s + t->sys_s) / gb < 0.001 && t->vcsw + t->ivcsw == 0) continue;
    printf("    %-16s user %.3f  sys %.3f  wake-ups %7.0f  preempted %6.0f\n", t->comm,
           t->user_s / gb, t->sys_s / gb, t->vcsw / gb, t->ivcsw / gb);
  }
  printf("    %-16s user %.3f  sys %.3f  wake-ups %7.0f  preempted %6.0f\n", "(all)",
         tu / gb, ts / gb, tv / gb, ti / gb);
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: stoker-bench transport [options]\n"
          "  One stoker-worker streams 256x3x224x224 uint8 synthetic batches to\n"
          "  libstoker over loopback; one plain TCP stream moving the same bytes is\n"
          "  measured in the same run as the limit. Prints GB/s, CPU s/GB, ratio.\n"
          "  --batches N     batches per round (default 40, after a warm-up of\n"
          "                  prefetch + slots + 3 batches on both sides)\n"
          "  --rounds R      alternating raw-TCP / stoker rounds, medians\n"
          "                  reported (default 3, at most 15)\n"
          "  --batch-size B  samples per batch (default 256)\n"
          "  --threads T     worker builder threads (default 2)\n"
          "  --prefetch P    client outstanding requests (default 4)\n"
          "  --bindir DIR    where stoker-coordinator and stoker-worker are\n"
          "                  (default: next to this binary, ../../server, PATH)\n"
          "  --tls DIR       stoker over TLS with DIR/ca.pem, DIR/server.pem and\n"
          "                  DIR/server.key, made by: deploy/stoker-certs ca DIR &&\n"
          "                  deploy/stoker-certs issue DIR server IP:127.0.0.1\n"
          "                  (the raw TCP baseline stays plaintext)\n"
          "  --quota CORES   run this process (the training side: the client and\n"
          "                  the raw receiver) in a new cgroup with that CPU quota\n"
          "                  (root); the daemons stay outside it\n"
          "  --rate MB/s     the client consumes at most this rate (paced)\n"
          "  The end compares the client's own receive CPU (stk_client_stats: user,\n"
          "  system, host share) with /proc's figure for the same threads.\n");
}

int bench_transport_main(int argc, char **argv) {
  int batches = 40, bs = 256, threads = 2, prefetch = 4, rounds = 3;
  const char *bindir = NULL, *tls = NULL;
  double quota = 0, rate_mb = 0;
  static const struct option opts[] = {{"batches", 1, 0, 'n'},
                                       {"batch-size", 1, 0, 'b'},
                                       {"threads", 1, 0, 't'},
                                       {"prefetch", 1, 0, 'p'},
                                       {"bindir", 1, 0, 'd'},
                                       {"rounds", 1, 0, 'r'},
                                       {"tls", 1, 0, 'T'},
                                       {"help", 0, 0, 'h'},
                                       {"quota", 1, 0, 'Q'},
                                       {"rate", 1, 0, 'R'},
                                       {0, 0, 0, 0}};
  int c;
  optind = 1;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    switch (c) {
      case 'n':
        batches = atoi(optarg);
        break;
      case 'b':
        bs = atoi(optarg);
        break;
      case 't':
        threads = atoi(optarg);
        break;
      case 'p':
        prefetch = atoi(optarg);
        break;
      case 'd':
        bindir = optarg;
        break;
      case 'r':
        rounds = atoi(optarg);
        break;
      case 'T':
        tls = optarg;
        break;
      case 'Q':
        quota = atof(optarg);
        break;
      case 'R':
        rate_mb = atof(optarg);
        break;
      case 'h':
        usage(stdout);
        return 0;
      default:
        usage(stderr);
        return 2;
    }
  }
  if (batches < 1 || bs < 1 || threads < 1 || prefetch < 1 || rounds < 1 || rounds > 15 ||
      quota < 0 || rate_mb < 0) {
    usage(stderr);
    return 2;
  }
  stk_job_spec spec;
  stk_job_spec_defaults(&spec);
  spec.batch_size = (uint32_t)bs;
  /* The warm-up writes every receive buffer and slot once (their page
   * faults are a one-time cost of opening the client), plus 3. */
  stk_client_config cfg;
  stk_client_config_defaults(&cfg);
  cfg.prefetch = (uint32_t)prefetch;
  uint32_t warm = cfg.prefetch + cfg.slots + 3;
  spec.num_samples = (uint64_t)(rounds * batches + warm) * bs;
  snprintf(spec.name, sizeof spec.name, "bench-transport");
  stk_batch_layout L;
  stk_batch_layout_of(&spec, &L);
  size_t total = (size_t)batches * L.total_bytes;
  printf(
      "transport: %d batches of %ux3x224x224 uint8 (%.1f MB each), loopback, %ld "
      "cores%s\n",
      batches, spec.batch_size, L.total_bytes / 1e6, sysconf(_SC_NPROCESSORS_ONLN),
      tls ? ", stoker over TLS" : "");
  char ca[PATH_MAX], cert[PATH_MAX], key[PATH_MAX];
  if (tls) {
    snprintf(ca, sizeof ca, "%s/ca.pem", tls);
    snprintf(cert, sizeof cert, "%s/server.pem", tls);
    snprintf(key, sizeof key, "%s/server.key", tls);
    if (access(ca, R_OK) || access(cert, R_OK) || access(key, R_OK)) {
      fprintf(stderr,
              "--tls %s: need ca.pem, server.pem, server.key there (see --help)\n", tls);
      return 2;
    }
  }

  /* In-process cost of what the worker does besides the wire. */
  {
    stk_dataset *ds;
    stk_builder *b;
    char err[256];
    void *buf = malloc(L.total_bytes);
    memset(buf, 0, L.total_bytes); /* fault the pages in: measure the build */
    if (stk_dataset_open(&spec, NULL, NULL, &ds, err, sizeof err) ||
        stk_builder_create(ds, &spec, &b, err, sizeof err)) {
      fprintf(stderr, "builder: %s\n", err);
      return 1;
    }
    uint32_t crc = 0;
    double c0 = 0;
    for (int i = 0; i < 11; i++) { /* the first is a warm-up */
      if (i == 1) c0 = bu_thread_cpu_s();
      stk_builder_build(b, 0, 0, (uint64_t)i, buf, L.total_bytes, NULL);
      crc ^= stk_crc32c(0, buf, L.total_bytes);
    }
    double per_gb = (bu_thread_cpu_s() - c0) / (10 * L.total_bytes / 1e9);
    printf(
        "  worker build+crc  : %.3f CPU s/GB (measured in-process; part of the worker "
        "figure)%s\n",
        per_gb, crc == 1 ? " " : "");
    stk_builder_destroy(b);
    stk_dataset_close(ds);
    free(buf);
  }

  /* In-process cost of the client's one copy: 4 MiB chunks from a buffer
   * just written (as gRPC's read buffers are) into the batch, crc32c over
   * each 64 KiB piece after copying it (rpc/wire.c's loop). */
  {
    size_t chunk = 4u << 20, piece = 64u << 10;
    unsigned char *src = malloc(chunk), *dst = malloc(L.total_bytes);
    memset(dst, 0, L.total_bytes);
    uint32_t crc = 0;
    double m0 = 0;
    for (int i = 0; i < 11; i++) { /* the first is a warm-up */
      for (size_t off = 0; off < L.total_bytes; off += chunk) {
        size_t n = L.total_bytes - off < chunk ? L.total_bytes - off : chunk;
        memset(src, i + (int)(off >> 22), n); /* fresh, as after a socket read */
        double t = bu_thread_cpu_s();
        for (size_t p = 0; p < n; p += piece) {
          size_t k = n - p < piece ? n - p : piece;
          memcpy(dst + off + p, src + p, k);
          crc = stk_crc32c(crc, dst + off + p, k);
        }
        if (i) m0 += bu_thread_cpu_s() - t;
      }
    }
    printf(
        "  client copy+crc   : %.3f CPU s/GB (measured in-process: the one copy out of "
        "gRPC's buffers with its crc32c)%s\n",
        m0 / (10 * L.total_bytes / 1e9), crc == 1 ? " " : "");
    free(src);
    free(dst);
  }

  char tbuf[16];
  snprintf(tbuf, sizeof tbuf, "%d", threads);
  char *cextra[] = {NULL, NULL, NULL, NULL, NULL};
  char *wextra[] = {"--threads", tbuf, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
  if (tls) {
    cextra[0] = "--tls-cert", cextra[1] = cert, cextra[2] = "--tls-key", cextra[3] = key;
    wextra[2] = "--tls-cert", wextra[3] = cert, wextra[4] = "--tls-key", wextra[5] = key;
    wextra[6] = "--tls-ca", wextra[7] = ca;
  }
  bu_job job;
  if (bu_job_start(&job, &spec, bindir, cextra, wextra)) return 1;
  pid_t wpid = job.wpid;
  int rc = 1;
  stk_client *cl = NULL;
  char qdir[PATH_MAX] = "", qparent[PATH_MAX] = "";
  if (quota > 0) { /* after the daemons started: they stay outside */
    if (quota_enter(quota, qdir, sizeof qdir, qparent, sizeof qparent)) goto out;
    printf("  this process under a CPU quota of %.2f cores (%s)\n", quota, qdir);
  }
  cfg.coordinator = job.addr;
  cfg.rank = 0;
  cfg.world_size = 1;
  if (tls) cfg.tls_ca = ca;
  char err[512];
  if (stk_client_open(&cfg, &cl, err, sizeof err)) {
    fprintf(stderr, "client: %s\n", err);
    goto out;
  }
  /* Warm up (connections, page faults of the buffers), then alternate:
   * a raw TCP round, a stoker round. Medians of the rounds are reported,
   * so a noisy neighbour hurts both sides alike. */
  double raw_g[16], raw_s[16], raw_r[16], stk_g[16], stk_w[16], stk_c[16], rate_x[16],
      cpu_x[16], stk_f[16], stk_b[16], stk_s[16];
  raw_split raw_x[16];
  /* per thread name, summed over the stoker rounds: this process and the
   * worker's (from /proc) */
  static bu_threads tc0, tc1, tw0, tw1, cacc, wacc;
  cacc.n = wacc.n = 0;
  double all_gb = 0;
  for (uint32_t i = 0; i < warm; i++) {
    stk_batch *b;
    if (stk_client_next(cl, &b) != STK_OK) {
      fprintf(stderr, "next: %s\n", stk_client_error(cl));
      goto out;
    }
    stk_batch_release(b);
  }
  for (int round = 0; round < rounds; round++) {
    if (raw_tcp((size_t)warm * L.total_bytes, total, L.total_bytes, &raw_g[round],
                &raw_s[round], &raw_r[round], &raw_x[round])) {
      fprintf(stderr, "raw TCP measurement failed\n");
      goto out;
    }
    double t0 = bu_now_s(), cpu_c0 = bu_self_cpu_s(), cpu_w0 = bu_proc_cpu_s(wpid),
           cpu_b0 = bu_proc_threads_cpu_s(wpid, "stk-build"), flt0 = bu_self_faults(),
           cpu_s0 = bu_proc_threads_cpu_s(getpid(), "stk-io");
    bu_threads_snap(getpid(), &tc0);
    bu_threads_snap(wpid, &tw0);
    uint64_t got = 0;
    for (int i = 0; i < batches; i++) {
      stk_batch *b;
      int s = stk_client_next(cl, &b);
      if (s != STK_OK) {
        fprintf(stderr, "next: %s: %s\n", stk_strerror(s), stk_client_error(cl));
        goto out;
      }
      size_t len;
      stk_batch_payload(b, &len);
      got += len;
      stk_batch_release(b);
      if (rate_mb > 0) { /* paced: no faster than rate_mb */
        double ahead = got / (rate_mb * 1e6) - (bu_now_s() - t0);
        if (ahead > 0) {
          struct timespec ts = {(time_t)ahead, (long)((ahead - (time_t)ahead) * 1e9)};
          nanosleep(&ts, NULL);
        }
      }
    }
    double dt = bu_now_s() - t0, gb = got / 1e9;
    bu_threads_snap(getpid(), &tc1);
    bu_threads_snap(wpid, &tw1);
    bu_threads_diff_add(&tc0, &tc1, &cacc);
    bu_threads_diff_add(&tw0, &tw1, &wacc);
    all_gb += gb;
    stk_g[round] = gb / dt;
    stk_w[round] = (bu_proc_cpu_s(wpid) - cpu_w0) / gb;
    stk_b[round] = (bu_proc_threads_cpu_s(wpid, "stk-build") - cpu_b0) / gb;
    stk_c[round] = (bu_self_cpu_s() - cpu_c0) / gb;
    stk_f[round] = (bu_self_faults() - flt0) / gb;
    stk_s[round] = (bu_proc_threads_cpu_s(getpid(), "stk-io") - cpu_s0) / gb;
    rate_x[round] = stk_g[round] / raw_g[round];
    cpu_x[round] = stk_c[round] / raw_r[round];
    printf(
        "  round %d: raw TCP %5.2f GB/s | stoker %5.2f GB/s (worker %.3f, client %.3f "
        "CPU s/GB) | ratios: rate %.2f, client CPU / raw receiver %.2f\n",
        round + 1, raw_g[round], stk_g[round], stk_w[round], stk_c[round], rate_x[round],
        cpu_x[round]);
  }
  double rg = bu_median(raw_g, rounds), sg = bu_median(stk_g, rounds);
  printf("median of %d rounds:\n", rounds);
  printf(
      "  raw TCP, 1 stream : %6.2f GB/s   sender %.3f CPU s/GB, receiver %.3f CPU s/GB\n",
      rg, bu_median(raw_s, rounds), bu_median(raw_r, rounds));
  printf(
      "  stoker, 1 worker  : %6.2f GB/s   worker %.3f CPU s/GB, client %.3f CPU s/GB"
      " (%.1f batches/s)%s\n",
      sg, bu_median(stk_w, rounds), bu_median(stk_c, rounds), sg * 1e9 / L.total_bytes,
      tls ? ", TLS" : "");
  printf(
      "  worker split      : %.3f CPU s/GB in its builder threads (synthetic batches and "
      "their crc32c), %.3f in the rest (gRPC, the socket)\n",
      bu_median(stk_b, rounds), bu_median(stk_w, rounds) - bu_median(stk_b, rounds));
  printf(
      "  client split      : %.3f CPU s/GB in its io threads (copy out of gRPC's "
      "buffers, crc32c), %.3f in the rest (gRPC's socket reads, ordering)\n",
      bu_median(stk_s, rounds), bu_median(stk_c, rounds) - bu_median(stk_s, rounds));
  {
    double ru = 0, rsy = 0, rc = 0;
    for (int i = 0; i < rounds; i++)
      ru += raw_x[i].user, rsy += raw_x[i].sys, rc += raw_x[i].csw;
    printf(
        "  raw receiver split: user %.3f, system %.3f CPU s/GB, %.0f context switches "
        "per GB (mean of the rounds)\n",
        ru / rounds, rsy / rounds, rc / rounds);
  }
  print_threads("client", &cacc, all_gb);
  print_threads("worker", &wacc, all_gb);
  printf("  client page faults: %.0f per GB (its heap growing or handed back)\n",
         bu_median(stk_f, rounds));
  printf(
      "  ratio stoker / raw TCP: %.2f (median of the per-round ratios %.2f; target "
      ">= 0.90)\n",
      sg / rg, bu_median(rate_x, rounds));
  printf(
      "  client CPU per GB / raw receiver's: %.2f (median of the per-round ratios "
      "%.2f; target <= 1.50)\n",
      bu_median(stk_c, rounds) / bu_median(raw_r, rounds), bu_median(cpu_x, rounds));
  {
    /* The client's own figure (what stoker status and /metrics show)
     * against /proc's for the same threads, since the client opened. */
    stk_stats st;
    stk_client_stats(cl, &st);
    double pu, ps, pall;
    proc_recv_cpu(&pu, &ps, &pall);
    double rep = st.recv_cpu_user_s + st.recv_cpu_sys_s, pr = pu + ps;
    printf(
        "  reported receive CPU: %.3f s (user %.3f, sys %.3f), %.3f CPU s/GB (user "
        "%.3f + sys %.3f), %.0f%% of %.2f usable cores over the last 5-10 s\n",
        rep, st.recv_cpu_user_s, st.recv_cpu_sys_s, st.recv_cpu_s_per_gb,
        st.recv_cpu_user_s_per_gb, st.recv_cpu_sys_s_per_gb, 100 * st.recv_host_share,
        st.host_cores);
    printf(
        "  /proc, the same threads: %.3f s (user %.3f, sys %.3f): reported / /proc = "
        "%.3f (target 0.90-1.10); the whole process: %.3f s\n",
        pr, pu, ps, pr > 0 ? rep / pr : 0, pall);
  }
  stk_client_finish(cl, 1);
  rc = 0;
out:
  stk_client_close(cl);
  quota_leave(qdir, qparent);
  if (bu_job_stop(&job, rc == 0)) rc = 1;
  return rc;
}
