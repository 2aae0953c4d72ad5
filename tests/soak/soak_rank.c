/* soak_rank.c - stoker-soak-rank: one training rank of the soak run
 * (tests/soak/soak.py), a libstoker client that can be killed with -9 at
 * any moment and restarted to resume where it last saved.
 *
 * Per batch, in this order: check the address is the next one expected,
 * compare the payload byte for byte with the reference built in-process
 * (stk_client_reference), append one line "b EPOCH STEP DIGEST ok|BAD" to
 * the digest file (O_APPEND, one write per line, so a kill leaves whole
 * lines), save the resume state to the state file (written aside and
 * renamed: always a whole state), release the batch, sleep --step-ms.
 * A restart finds the state file, opens the client with it, writes
 * "start EPOCH STEP STEPS_PER_EPOCH" and must then receive exactly that address first.
 * At each epoch end it writes "e EPOCH" and stops when the stop file holds
 * an epoch number <= the one that just ended ("stop EPOCH", finish, exit
 * 0). --verify-every N compares only every Nth batch with the reference
 * (the others are logged "-" in place of ok/BAD: the reference costs a
 * worker's decode per batch, too much for a full-rate run of photo-sized
 * images); --convert float32 has the client convert every batch to float32
 * (the payload compared stays the 8-bit one the workers sent);
 * --heap-every-s S prints "heap SECONDS IN_USE FREE" on stdout every S
 * seconds (glibc's mallinfo2 over every arena: bytes in use by the program,
 * bytes free but held by the allocator), read by soak.py's long profile.
 * --verify-every 0 compares nothing in-process: the long profile measures
 * a rank's memory, and building references in the rank would put the
 * decoder's allocations (every size from 64 KiB to 1 MiB, libjpeg's and
 * the builder's) between the client's in the same heap, which a training
 * rank never does. Its batches are checked after the run instead:
 *   stoker-soak-rank --check-digests FILE --job JOB --rank R --world-size W
 *                    [--data-root DIR] [--verify-every N]
 * builds, in a local client (no daemons), the reference of every Nth
 * batch line of FILE (each address once) and compares its FNV-1a digest
 * with the line's; prints how many it checked.
 * Exit 1 on any mismatch, order error or client error (said on
 * stderr), 2 on bad usage. Test code: not installed.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <malloc.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "stoker/client.h"

#define STATE_MAX 256 /* our header (16 bytes) + the library's state */

static int digest_fd = -1;

/* One whole line to the digest file (a single write on an O_APPEND fd). */
static void logline(const char *fmt, ...) {
  char buf[256];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= sizeof(buf)) n = (int)sizeof(buf) - 1;
  if (write(digest_fd, buf, (size_t)n) != n) {
    perror("stoker-soak-rank: digest file");
    exit(1);
  }
}

/* FNV-1a, 64 bits: a digest to compare deliveries of the same address. */
static uint64_t fnv1a(const void *p, size_t n) {
  const unsigned char *b = p;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

static void put64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint64_t get64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

/* State file: epoch and step of the next batch (8 + 8 bytes, LE), then the
 * library's state. Written to path.tmp and renamed; 0 or -1 (errno). */
static int save_state(stk_client *c, const char *path, uint64_t epoch, uint64_t step) {
  unsigned char buf[STATE_MAX];
  size_t len = sizeof(buf) - 16;
  if (stk_client_save_state(c, buf + 16, &len) != STK_OK) {
    errno = EINVAL;
    return -1;
  }
  put64(buf, epoch);
  put64(buf + 8, step);
  char tmp[4096];
  snprintf(tmp, sizeof(tmp), "%s.tmp", path);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return -1;
  ssize_t w = write(fd, buf, 16 + len);
  int rc = close(fd);
  if (w != (ssize_t)(16 + len) || rc != 0) return -1;
  return rename(tmp, path);
}

/* Load a state file: its length (> 16), 0 if there is none, -1 if broken. */
static int load_state(const char *path, unsigned char *buf, size_t cap) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? 0 : -1;
  ssize_t n = read(fd, buf, cap);
  close(fd);
  return n > 16 ? (int)n : -1;
}

/* The epoch number in the stop file, or -1 (no file yet). */
static long read_stop(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  long e = -1;
  if (fscanf(f, "%ld", &e) != 1) e = -1;
  fclose(f);
  return e;
}

/* One "heap" line on stdout: seconds since start, glibc heap in use, free. */
static void print_heap(double t) {
  struct mallinfo2 mi = mallinfo2();
  printf("heap %.1f %zu %zu\n", t, mi.uordblks + mi.hblkhd, mi.fordblks);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void usage(void) {
  fprintf(stderr,
          "usage: stoker-soak-rank --coordinator HOST:PORT --rank R --world-size W\n"
          "         --state-file F --digest-file F --stop-file F [--data-root DIR]\n"
          "         [--step-ms N] [--prefetch N] [--convert none|float32]\n"
          "         [--verify-every N] [--heap-every-s S]\n"
          "       stoker-soak-rank --check-digests F --job JOB --rank R --world-size W\n"
          "         [--data-root DIR] [--verify-every N]\n");
}

/* The whole of a small text file (the job), NUL-terminated; NULL on error
 * (said on stderr). Caller frees. */
static char *read_text(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) {
    perror(path);
    return NULL;
  }
  char *buf = calloc(1, 65536);
  size_t n = buf ? fread(buf, 1, 65535, f) : 0;
  fclose(f);
  if (buf && n == 65535) {
    fprintf(stderr, "stoker-soak-rank: %s: over 64 KiB\n", path);
    free(buf);
    return NULL;
  }
  return buf;
}

/* --check-digests: the reference of every Nth "b" line of the digest file
 * (each address once) built by a local client of the same job and rank,
 * its digest compared with the line's. 0 all equal, 1 otherwise. */
static int check_digests(stk_client_config *cfg, const char *path, const char *job_path,
                         const char *data_root, long every) {
  char *job = read_text(job_path);
  FILE *f = fopen(path, "r");
  if (!job || !f) {
    if (!f) perror(path);
    free(job);
    if (f) fclose(f);
    return 1;
  }
  char err[512];
  stk_client *c = NULL;
  cfg->prefetch = 1; /* its builder thread only needs to stay out of the way */
  cfg->slots = 2;
  int rc = stk_client_open_local(cfg, job, data_root, &c, err, sizeof(err));
  free(job);
  if (rc) {
    fprintf(stderr, "stoker-soak-rank: open_local: %s: %s\n", stk_strerror(rc), err);
    fclose(f);
    return 1;
  }
  size_t plen = (size_t)stk_client_payload_bytes(c);
  uint64_t spe = stk_client_steps_per_epoch(c);
  unsigned char *ref = malloc(plen);
  unsigned char *done = calloc(1, 1 << 20); /* seqs checked, a bit each (8 Mi) */
  uint64_t lines = 0, checked = 0, bad = 0;
  char ln[256];
  while (ref && done && fgets(ln, sizeof(ln), f)) {
    unsigned long long e, s, d;
    if (sscanf(ln, "b %llu %llu %llx", &e, &s, &d) != 3) continue;
    if (lines++ % (uint64_t)every) continue;
    uint64_t seq = e * spe + s;
    if (seq < (8u << 20)) {
      if (done[seq >> 3] & (1u << (seq & 7))) continue;
      done[seq >> 3] |= (unsigned char)(1u << (seq & 7));
    }
    rc = stk_client_reference(c, e, s, data_root, ref, plen);
    checked++;
    if (rc != STK_OK || fnv1a(ref, plen) != d) {
      if (bad++ < 5)
        fprintf(stderr, "rank %u: epoch %llu step %llu: %s\n", cfg->rank, e, s,
                rc != STK_OK ? stk_client_error(c) : "differs from the reference");
    }
  }
  fclose(f);
  if (!ref || !done) fprintf(stderr, "stoker-soak-rank: out of memory\n");
  printf("rank %u: checked %llu of %llu batches against the reference: %s\n", cfg->rank,
         (unsigned long long)checked, (unsigned long long)lines,
         !ref || !done ? "FAILED"
         : bad         ? "DIFFER"
                       : "all equal");
  int ok = ref && done && !bad && checked > 0;
  free(ref);
  free(done);
  stk_client_close(c);
  return ok ? 0 : 1;
}

int main(int argc, char **argv) {
  stk_client_config cfg;
  stk_client_config_defaults(&cfg);
  const char *state_path = NULL, *digest_path = NULL, *stop_path = NULL;
  const char *data_root = NULL, *check_path = NULL, *job_path = NULL;
  long step_ms = 0, verify_every = 1;
  double heap_every = 0;
  static const struct option opts[] = {{"coordinator", 1, 0, 'c'},
                                       {"rank", 1, 0, 'r'},
                                       {"world-size", 1, 0, 'w'},
                                       {"state-file", 1, 0, 's'},
                                       {"digest-file", 1, 0, 'd'},
                                       {"stop-file", 1, 0, 'x'},
                                       {"data-root", 1, 0, 'D'},
                                       {"step-ms", 1, 0, 'm'},
                                       {"prefetch", 1, 0, 'p'},
                                       {"convert", 1, 0, 'C'},
                                       {"verify-every", 1, 0, 'V'},
                                       {"heap-every-s", 1, 0, 'H'},
                                       {"check-digests", 1, 0, 'K'},
                                       {"job", 1, 0, 'J'},
                                       {0, 0, 0, 0}};
  int o;
  while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (o) {
      case 'c':
        cfg.coordinator = optarg;
        break;
      case 'r':
        cfg.rank = (uint32_t)strtoul(optarg, NULL, 10);
        break;
      case 'w':
        cfg.world_size = (uint32_t)strtoul(optarg, NULL, 10);
        break;
      case 's':
        state_path = optarg;
        break;
      case 'd':
        digest_path = optarg;
        break;
      case 'x':
        stop_path = optarg;
        break;
      case 'D':
        data_root = optarg;
        break;
      case 'm':
        step_ms = strtol(optarg, NULL, 10);
        break;
      case 'p':
        cfg.prefetch = (uint32_t)strtoul(optarg, NULL, 10);
        break;
      case 'C':
        if (!strcmp(optarg, "float32")) {
          cfg.convert = STK_CONVERT_FLOAT32;
        } else if (strcmp(optarg, "none")) {
          usage();
          return 2;
        }
        break;
      case 'V':
        verify_every = strtol(optarg, NULL, 10);
        break;
      case 'H':
        heap_every = strtod(optarg, NULL);
        break;
      case 'K':
        check_path = optarg;
        break;
      case 'J':
        job_path = optarg;
        break;
      default:
        usage();
        return 2;
    }
  }
  if (check_path) {
    if (!job_path || cfg.rank == STK_RANK_FROM_ENV || cfg.world_size == 0 ||
        verify_every < 1) {
      usage();
      return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    return check_digests(&cfg, check_path, job_path, data_root, verify_every);
  }
  if (!cfg.coordinator || !state_path || !digest_path || !stop_path ||
      cfg.rank == STK_RANK_FROM_ENV || cfg.world_size == 0 || step_ms < 0 ||
      verify_every < 0 || !(heap_every >= 0)) {
    usage();
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  digest_fd = open(digest_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (digest_fd < 0) {
    perror(digest_path);
    return 1;
  }
  unsigned char st[STATE_MAX];
  int stlen = load_state(state_path, st, sizeof(st));
  if (stlen < 0) {
    fprintf(stderr, "stoker-soak-rank: %s: not a state file\n", state_path);
    return 1;
  }
  if (stlen > 0) cfg.resume_state = st + 16, cfg.resume_len = (size_t)stlen - 16;

  char err[512];
  stk_client *c = NULL;
  int rc = stk_client_open(&cfg, &c, err, sizeof(err));
  if (rc) {
    fprintf(stderr, "stoker-soak-rank: open: %s: %s\n", stk_strerror(rc), err);
    return 1;
  }
  uint64_t spe = stk_client_steps_per_epoch(c);
  size_t plen = (size_t)stk_client_payload_bytes(c);
  unsigned char *ref = malloc(plen);
  uint64_t epoch = 0, step = 0;
  if (stlen > 0) {
    uint64_t seq = get64(st) * spe + get64(st + 8);
    epoch = seq / spe, step = seq % spe;
  }
  logline("start %llu %llu %llu\n", (unsigned long long)epoch, (unsigned long long)step,
          (unsigned long long)spe);
  printf("rank %u: %s at epoch %llu step %llu, %llu steps/epoch, %zu bytes/batch\n",
         cfg.rank, stlen > 0 ? "resumed" : "started", (unsigned long long)epoch,
         (unsigned long long)step, (unsigned long long)spe, plen);
  int ok = ref != NULL, stopped = 0;
  uint64_t delivered = 0;
  double t_start = now_s(), next_heap = t_start;
  while (ok && !stopped) {
    if (heap_every > 0 && now_s() >= next_heap) {
      print_heap(now_s() - t_start);
      next_heap += heap_every;
      if (next_heap < now_s()) next_heap = now_s() + heap_every;
    }
    stk_batch *b = NULL;
    rc = stk_client_next(c, &b);
    if (rc == STK_END_OF_EPOCH) {
      if (step != 0 || epoch == 0) {
        fprintf(stderr, "rank %u: epoch %llu ended at step %llu\n", cfg.rank,
                (unsigned long long)epoch, (unsigned long long)step);
        ok = 0;
        break;
      }
      uint64_t ended = epoch - 1;
      logline("e %llu\n", (unsigned long long)ended);
      long stop = read_stop(stop_path);
      if (stop >= 0 && ended >= (uint64_t)stop) {
        logline("stop %llu\n", (unsigned long long)ended);
        stopped = 1;
      }
      continue;
    }
    if (rc == STK_END_OF_DATA) {
      logline("eod\n");
      break;
    }
    if (rc) {
      fprintf(stderr, "rank %u: next: %s: %s\n", cfg.rank, stk_strerror(rc),
              stk_client_error(c));
      ok = 0;
      break;
    }
    uint64_t be = stk_batch_epoch(b), bs = stk_batch_step(b);
    size_t len = 0;
    const void *p = stk_batch_payload(b, &len);
    int check = verify_every > 0 && delivered++ % (uint64_t)verify_every == 0;
    int same =
        len == plen &&
        (!check || (stk_client_reference(c, be, bs, data_root, ref, plen) == STK_OK &&
                    memcmp(ref, p, plen) == 0));
    logline("b %llu %llu %016llx %s\n", (unsigned long long)be, (unsigned long long)bs,
            (unsigned long long)fnv1a(p, len),
            !check ? "-"
            : same ? "ok"
                   : "BAD");
    if (be != epoch || bs != step) {
      fprintf(stderr, "rank %u: got epoch %llu step %llu, expected %llu %llu\n", cfg.rank,
              (unsigned long long)be, (unsigned long long)bs, (unsigned long long)epoch,
              (unsigned long long)step);
      ok = 0;
    }
    if (!same) {
      fprintf(stderr, "rank %u: epoch %llu step %llu differs from the reference\n",
              cfg.rank, (unsigned long long)be, (unsigned long long)bs);
      ok = 0;
    }
    if (++step == spe) epoch++, step = 0;
    if (ok && save_state(c, state_path, epoch, step) != 0) {
      fprintf(stderr, "rank %u: saving %s: %s\n", cfg.rank, state_path, strerror(errno));
      ok = 0;
    }
    stk_batch_release(b);
    if (step_ms > 0) {
      struct timespec ts = {step_ms / 1000, (step_ms % 1000) * 1000000};
      nanosleep(&ts, NULL);
    }
  }
  stk_stats s;
  stk_client_stats(c, &s);
  printf(
      "summary rank %u: batches %llu  reissued %llu  duplicates %llu  crc_errors %llu"
      "  stall %.1f%%  %s\n",
      cfg.rank, (unsigned long long)s.batches, (unsigned long long)s.reissued,
      (unsigned long long)s.duplicates, (unsigned long long)s.crc_errors,
      100 * s.stall_fraction, ok ? "ok" : "FAILED");
  if (ok && stopped) {
    rc = stk_client_finish(c, 0);
    if (rc) {
      fprintf(stderr, "rank %u: finish: %s: %s\n", cfg.rank, stk_strerror(rc),
              stk_client_error(c));
      ok = 0;
    }
  }
  stk_client_close(c);
  free(ref);
  close(digest_fd);
  return ok && stopped ? 0 : 1;
}
