/* test_aug_pyop.c - the `python(module:function, ...)` chain op with real
 * Python processes (/usr/bin/python3 and numpy; skipped, 77, without
 * them), the functions of tests/data/pyops/stk_test_ops.py:
 *  - the chain text: canonical form, size=, refusals;
 *  - noise (drawn from the op's Generator) equals a NumPy re-computation
 *    done here from the same seeds (two draws of the sample's stream, as
 *    a plugin op's) on the chain's bytes without the op; the same bytes
 *    from one builder and from two builders on two threads; another job
 *    seed gives other bytes; size= makes another output size;
 *  - raise_some / bad_result / shrink_shm_some: exactly the raising (or
 *    wrong shape/dtype, or shrinking the sealed memfd) samples are
 *    substituted, counted and reported as user-code errors ("sample
 *    index N: python op ... raised", the exception's last line, then
 *    its traceback);
 *  - a runner that exits, kills itself or hangs (STOKER_PYTHON_TIMEOUT=2)
 *    once: the sample is retried alone and the batch's bytes equal
 *    noise's; failing twice makes the build STK_UNAVAILABLE (nothing
 *    substituted) and the next build gives noise's bytes; the op's own
 *    calls return STK_UNAVAILABLE and restart the process;
 *  - refusals at open: no Python path, a module outside it, a missing
 *    function, a Python path directory or a module others may write (the
 *    worker would run their code); no child process and no descriptor left after
 * teardown; a runner holds nothing but stdin/out/err, its socket and the memfd, in a
 * process group of its own. PYOPS_DIR comes from the build.
 */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/chain.h"
#include "check.h"
#include "badlog.h"
#include "gen.h"
#include "ops_python.h"
#include "stoker/augment.h"
#include "util.h"

static char root[4096], tmp[4200];
static const uint32_t B = 8, SIDE = 32;

static int count_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));) n += e->d_name[0] != '.';
  if (d) closedir(d);
  return n;
}

static void spec_of(stk_job_spec *s, const char *chain) {
  tu_spec(s, STK_SOURCE_IMAGEFOLDER, "ds/imagefolder", 0, STK_DTYPE_UINT8,
          STK_LAYOUT_NHWC, B, SIDE);
  s->resize = 256; /* the default: a chain leaves the named pipelines' keys alone */
  char err[512];
  int rc = stk_job_spec_set(s, "pipeline", chain, err, sizeof(err));
  CHECK(rc == STK_OK);
  if (rc) fprintf(stderr, "%s: %s\n", chain, err);
  s->dtype = STK_DTYPE_UINT8, s->layout = STK_LAYOUT_NHWC;
}

typedef struct {
  stk_dataset *ds;
  stk_builder *b;
  stk_batch_layout L;
  uint8_t *buf;
  badlog log; /* what the dataset reports (tests/badlog.h) */
} job;

static int job_open(job *j, const stk_job_spec *s, const char *pypath, char *err,
                    size_t errlen) {
  memset(j, 0, sizeof(*j));
  badlog_init(&j->log);
  stk_limits lim;
  memset(&lim, 0, sizeof(lim));
  lim.python_path = pypath;
  int rc = stk_dataset_open(s, root, &lim, &j->ds, err, errlen);
  if (rc) return rc;
  stk_dataset_set_log(j->ds, badlog_fn, &j->log);
  if ((rc = stk_builder_create(j->ds, s, &j->b, err, errlen))) {
    stk_dataset_close(j->ds);
    return rc;
  }
  stk_batch_layout_of(s, &j->L);
  j->buf = malloc(j->L.total_bytes);
  return STK_OK;
}

static void job_close(job *j) {
  free(j->buf);
  stk_builder_destroy(j->b);
  stk_dataset_close(j->ds);
  badlog_clear(&j->log);
}

static const uint8_t *image(job *j) {
  return j->buf + j->L.tensors[STK_TENSOR_IMAGE].offset;
}
static size_t image_bytes(job *j) { return j->L.tensors[STK_TENSOR_IMAGE].nbytes; }

/* Steps 0..steps-1 of epoch 0, image tensors concatenated (caller frees);
 * substituted slots added to *subst. */
static uint8_t *build_steps(const char *chain, uint64_t seed, uint32_t steps,
                            uint64_t *subst) {
  stk_job_spec s;
  spec_of(&s, chain);
  s.seed = seed;
  job j;
  char err[512];
  if (job_open(&j, &s, PYOPS_DIR, err, sizeof(err))) {
    fprintf(stderr, "open %s: %s\n", chain, err);
    CHECK(0);
    return NULL;
  }
  size_t ib = image_bytes(&j);
  uint8_t *out = malloc(ib * steps);
  for (uint32_t st = 0; st < steps; st++) {
    stk_build_info info;
    int rc = stk_builder_build(j.b, 0, 0, st, j.buf, j.L.total_bytes, &info);
    CHECK(rc == STK_OK);
    if (rc) fprintf(stderr, "build %s: %s\n", chain, stk_builder_error(j.b));
    if (subst) *subst += info.substituted;
    memcpy(out + ib * st, image(&j), ib);
  }
  job_close(&j);
  return out;
}

static void test_text(void) {
  stk__chain c;
  char err[256], buf[512];
  CHECK(stk__chain_parse("resize(64) | python( m_1:f , 3, x=a b, size=10:12 ) | "
                         "center_crop(8)",
                         &c, NULL, err, sizeof(err)) == STK_OK);
  CHECK(c.ops[2].kind == STK__OP_PYTHON && c.ops[2].h == 10 && c.ops[2].w == 12);
  CHECK(!strcmp(c.ops[2].args, "m_1:f, 3, x=a b"));
  stk__chain_format(&c, buf, sizeof(buf));
  CHECK(strstr(buf, "| python(m_1:f, 3, x=a b, size=10:12) |") != NULL);
  uint32_t h, w;
  CHECK(stk__chain_parse("resize(64) | python(m:f, size=10:12)", &c, NULL, err,
                         sizeof(err)) == STK_OK &&
        stk__chain_size(&c, &h, &w, err, sizeof(err)) == STK_OK && h == 10 && w == 12);
  const char *bad[] = {"python",        "python(f)",           "python(m:_f)",
                       "python(1m:f)",  "python(m:f, size=3)", "python(m:f, size=0:4)",
                       "python(x=m:f)", "python(m.n:f)"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    int rc = stk__chain_parse(bad[i], &c, NULL, err, sizeof(err));
    CHECK(rc == STK_INVALID_ARGUMENT && strstr(err, "'python'"));
    if (rc != STK_INVALID_ARGUMENT) fprintf(stderr, "accepted: %s\n", bad[i]);
  }
}

static const char *NUMPY_NOISE =
    /* stk_test_ops.noise, written again: per sample a u64 seed and the
     * image before the op */
    "import sys, numpy as np\n"
    "h, w, amp = int(sys.argv[3]), int(sys.argv[4]), 20\n"
    "raw = open(sys.argv[1], 'rb').read()\n"
    "n = h * w * 3\n"
    "out = bytearray()\n"
    "for k in range(0, len(raw), 8 + n):\n"
    "    seed = int.from_bytes(raw[k:k + 8], 'little')\n"
    "    img = np.frombuffer(raw[k + 8:k + 8 + n], np.uint8).reshape(h, w, 3)\n"
    "    g = np.random.default_rng(seed)\n"
    "    v = img.astype(np.int64) + g.integers(-amp, amp + 1, size=img.shape)\n"
    "    v = np.clip(v, 0, 255).astype(np.uint8)\n"
    "    out += (255 - v if g.random() < 0.5 else v).tobytes()\n"
    "open(sys.argv[2], 'wb').write(out)\n";

static void test_numpy(void) {
  const uint32_t steps = 3;
  uint64_t subst = 0;
  uint8_t *base = build_steps("resize(32, 32)", 42, steps, &subst);
  uint8_t *got =
      build_steps("resize(32, 32) | python(stk_test_ops:noise)", 42, steps, &subst);
  CHECK(subst == 0);
  if (!base || !got) goto out;
  /* the seeds: the sample's stream (job seed, epoch, sample index), two
   * u32 draws, as the op makes them (resize draws nothing) */
  stk_job_spec s;
  spec_of(&s, "resize(32, 32)");
  s.seed = 42;
  job j;
  char err[512];
  CHECK(job_open(&j, &s, NULL, err, sizeof(err)) == STK_OK);
  char in[4300], outp[4300], cmd[14000];
  snprintf(in, sizeof(in), "%s/noise.in", tmp);
  snprintf(outp, sizeof(outp), "%s/noise.out", tmp);
  FILE *f = fopen(in, "wb");
  size_t per = (size_t)SIDE * SIDE * 3, ib = per * B;
  for (uint32_t st = 0; st < steps; st++) {
    stk_build_info info;
    CHECK(stk_builder_build(j.b, 0, 0, st, j.buf, j.L.total_bytes, &info) == STK_OK);
    const int64_t *idx =
        (const int64_t *)(j.buf +
                          j.L.tensors[stk_batch_layout_find(&j.L, "index")].offset);
    for (uint32_t k = 0; k < B; k++) {
      stk_rng r;
      stk_rng_init(&r, s.seed, 0, (uint64_t)idx[k]);
      uint64_t seed = (uint64_t)stk_rng_u32(&r) << 32;
      seed |= stk_rng_u32(&r);
      fwrite(&seed, 8, 1, f);
      fwrite(base + ib * st + per * k, 1, per, f);
    }
  }
  fclose(f);
  job_close(&j);
  /* the program goes in a file: no quoting through the shell */
  char prog[4300];
  snprintf(prog, sizeof(prog), "%s/noise.py", tmp);
  CHECK(tu_write(prog, NUMPY_NOISE, strlen(NUMPY_NOISE)) == 0);
  snprintf(cmd, sizeof(cmd), "/usr/bin/python3 %s %s %s %u %u", prog, in, outp, SIDE,
           SIDE);
  CHECK(system(cmd) == 0);
  f = fopen(outp, "rb");
  uint8_t *want = malloc(ib * steps);
  CHECK(f && fread(want, 1, ib * steps, f) == ib * steps);
  if (f) fclose(f);
  CHECK(memcmp(want, got, ib * steps) == 0);
  CHECK(memcmp(base, got, ib * steps) != 0);
  free(want);
  /* another job seed: other bytes */
  uint8_t *other =
      build_steps("resize(32, 32) | python(stk_test_ops:noise)", 43, steps, NULL);
  CHECK(other && memcmp(other, got, ib * steps) != 0);
  free(other);
  /* size=: every other pixel of the 32x32 image */
  uint8_t *half = build_steps("resize(32, 32) | python(stk_test_ops:shrink, size=16:16)",
                              42, 1, NULL);
  int ok = half != NULL;
  for (uint32_t k = 0; ok && k < B; k++)
    for (uint32_t y = 0; y < 16; y++)
      for (uint32_t x = 0; x < 16; x++)
        ok &= !memcmp(half + (size_t)k * 16 * 16 * 3 + (y * 16 + x) * 3,
                      base + per * k + ((2 * y) * SIDE + 2 * x) * 3, 3);
  CHECK(ok);
  free(half);
out:
  free(base), free(got);
}

/* Two builders of one dataset on two threads, steps 0..3 between them. */
typedef struct {
  stk_dataset *ds;
  const stk_job_spec *s;
  uint32_t first;
  uint8_t *out;
  size_t ib;
  int rc;
} worker_arg;

static void *worker(void *p) {
  worker_arg *a = p;
  stk_builder *b;
  char err[512];
  if ((a->rc = stk_builder_create(a->ds, a->s, &b, err, sizeof(err)))) return NULL;
  stk_batch_layout L;
  stk_batch_layout_of(a->s, &L);
  uint8_t *buf = malloc(L.total_bytes);
  for (uint32_t st = a->first; st < 4; st += 2) {
    stk_build_info info;
    if (stk_builder_build(b, 0, 0, st, buf, L.total_bytes, &info)) a->rc = -1;
    memcpy(a->out + a->ib * st, buf + L.tensors[STK_TENSOR_IMAGE].offset, a->ib);
  }
  free(buf);
  stk_builder_destroy(b);
  return NULL;
}

static void test_threads(void) {
  const char *chain = "resize(40) | center_crop(32) | python(stk_test_ops:noise, 30)";
  uint8_t *one = build_steps(chain, 5, 4, NULL);
  stk_job_spec s;
  spec_of(&s, chain);
  s.seed = 5;
  job j;
  char err[512];
  if (job_open(&j, &s, PYOPS_DIR, err, sizeof(err))) {
    fprintf(stderr, "open: %s\n", err);
    CHECK(0);
    free(one);
    return;
  }
  size_t ib = image_bytes(&j);
  uint8_t *two = calloc(4, ib);
  worker_arg a[2] = {{j.ds, &s, 0, two, ib, 0}, {j.ds, &s, 1, two, ib, 0}};
  pthread_t t[2];
  for (int k = 0; k < 2; k++) pthread_create(&t[k], NULL, worker, &a[k]);
  for (int k = 0; k < 2; k++) pthread_join(t[k], NULL);
  CHECK(a[0].rc == 0 && a[1].rc == 0);
  CHECK(one && memcmp(one, two, 4 * ib) == 0);
  free(one), free(two);
  job_close(&j);
}

/* The chain with fn replacing the identity: every slot either equals the
 * plain chain's (kept) or not (substituted); the counts agree. */
static void test_bad_samples(const char *fn, const char *expect) {
  char chain[200];
  snprintf(chain, sizeof(chain), "resize(32, 32) | python(stk_test_ops:%s)", fn);
  uint8_t *base = build_steps("resize(32, 32)", 9, 1, NULL);
  stk_job_spec s;
  spec_of(&s, chain);
  s.seed = 9;
  job j;
  char err[512];
  CHECK(job_open(&j, &s, PYOPS_DIR, err, sizeof(err)) == STK_OK);
  stk_build_info info;
  CHECK(stk_builder_build(j.b, 0, 0, 0, j.buf, j.L.total_bytes, &info) == STK_OK);
  size_t per = (size_t)SIDE * SIDE * 3;
  uint32_t differ = 0;
  for (uint32_t k = 0; k < B; k++)
    differ += memcmp(image(&j) + per * k, base + per * k, per) != 0;
  fprintf(stderr, "%s: %u of %u substituted, %d reported, last: %s\n", fn, differ, B,
          j.log.n, j.log.last);
  CHECK(differ > 0 && differ < B);
  CHECK(info.substituted == differ);
  CHECK(j.log.n >= (int)differ && (uint64_t)j.log.n == stk_dataset_bad_samples(j.ds));
  CHECK(strstr(j.log.last, expect) != NULL);
  /* a user-code error: the sample's index, the op, then the traceback */
  CHECK(strstr(j.log.last, ": sample index ") != NULL);
  CHECK(strstr(j.log.last, "python op stk_test_ops:") != NULL);
  CHECK(strstr(j.log.last, " raised ") != NULL);
  CHECK(strstr(j.log.last, "\nTraceback (most recent call last)") != NULL);
  free(base);
  job_close(&j);
}

/* A runner that fails `times` times (how: exit, kill, hang) in batch 0. */
static void test_failures(const char *fn, const char *how, int times) {
  char marker[4300], chain[9000];
  snprintf(marker, sizeof(marker), "%s/marker-%s-%s-%d", tmp, fn, how, times);
  snprintf(chain, sizeof(chain), "resize(32, 32) | python(stk_test_ops:%s, %s, %d%s%s)",
           fn, marker, times, how[0] ? ", how=" : "", how);
  uint8_t *want = build_steps("resize(32, 32) | python(stk_test_ops:noise)", 11, 2, NULL);
  stk_job_spec s;
  spec_of(&s, chain);
  s.seed = 11;
  job j;
  char err[512];
  CHECK(job_open(&j, &s, PYOPS_DIR, err, sizeof(err)) == STK_OK);
  size_t ib = image_bytes(&j);
  for (uint32_t st = 0; st < 2; st++) {
    stk_build_info info;
    int rc = stk_builder_build(j.b, 0, 0, st, j.buf, j.L.total_bytes, &info);
    if (st == 0 && times == 2) {
      /* the sample fails, then fails again alone: the batch is not built */
      CHECK(rc == STK_UNAVAILABLE);
      fprintf(stderr, "%s %s x2: %s\n", fn, how, stk_builder_error(j.b));
      CHECK(strstr(stk_builder_error(j.b), "python op") != NULL);
      rc = stk_builder_build(j.b, 0, 0, st, j.buf, j.L.total_bytes, &info);
    }
    CHECK(rc == STK_OK);
    CHECK(info.substituted == 0);
    if (st == 0 && times == 1) CHECK(info.reread == 1);
    CHECK(want && memcmp(image(&j), want + ib * st, ib) == 0);
  }
  CHECK(j.log.n == 0);
  free(want);
  job_close(&j);
}

/* The op's own calls: STK_UNAVAILABLE for a crash, a restart after it. */
static void test_restart(void) {
  char marker[4300], text[4600], err[256], why[512];
  snprintf(marker, sizeof(marker), "%s/marker-direct", tmp);
  snprintf(text, sizeof(text), "python(stk_test_ops:crash, %s, 1, how=kill)", marker);
  stk__chain c;
  CHECK(stk__chain_parse(text, &c, NULL, err, sizeof(err)) == STK_OK);
  stk__pyop *p;
  CHECK(stk__pyop_create(&p, &c, PYOPS_DIR, err, sizeof(err)) == STK_OK && p);
  CHECK(stk__pyop_starts(p) == 0); /* nothing started before the first call */
  uint8_t in[4 * 5 * 3], out[4 * 5 * 3];
  memset(in, 7, sizeof(in));
  int rc = stk__pyop_apply(p, 1, in, 5, 4, out, 5, 4, 1, why, sizeof(why));
  CHECK(rc == STK_UNAVAILABLE && strstr(why, "signal 9"));
  fprintf(stderr, "crash: %s\n", why);
  CHECK(stk__pyop_starts(p) == 1);
  CHECK(stk__pyop_apply(p, 1, in, 5, 4, out, 5, 4, 1, why, sizeof(why)) == STK_OK);
  CHECK(stk__pyop_apply(p, 1, in, 5, 4, out, 5, 4, 1, why, sizeof(why)) == STK_OK);
  CHECK(stk__pyop_starts(p) == 2);
  /* the runner holds stdin/out/err, its socket and the memfd (Python's
   * mmap keeps a dup of it) and nothing else of this process, and has
   * left our process group */
  char path[128];
  snprintf(path, sizeof path, "/proc/self/task/%d/children", (int)getpid());
  FILE *f = fopen(path, "r");
  int child = 0;
  CHECK(f && fscanf(f, "%d", &child) == 1 && child > 0);
  if (f) fclose(f);
  snprintf(path, sizeof path, "/proc/%d/fd", child);
  DIR *d = opendir(path);
  int nfd = 0, others = 0;
  for (struct dirent *e; d && (e = readdir(d));) {
    if (e->d_name[0] == '.' || atoi(e->d_name) < 3) continue;
    char fp[400], to[300] = "";
    snprintf(fp, sizeof fp, "%s/%s", path, e->d_name);
    ssize_t k = readlink(fp, to, sizeof to - 1);
    to[k > 0 ? k : 0] = 0;
    nfd++;
    if (strncmp(to, "socket:", 7) && strncmp(to, "/memfd:stoker-pyop", 18)) {
      fprintf(stderr, "runner descriptor %s -> %s\n", e->d_name, to);
      others++;
    }
  }
  if (d) closedir(d);
  fprintf(stderr, "runner %d: %d descriptors past 2, process group %d\n", child, nfd,
          (int)getpgid(child));
  CHECK(nfd >= 2 && others == 0);
  CHECK(getpgid(child) == child && getpgid(child) != getpgrp());
  /* a bigger image grows the shared memory */
  size_t big = (size_t)900 * 700 * 3;
  uint8_t *bi = malloc(big), *bo = malloc(big);
  memset(bi, 200, big);
  CHECK(stk__pyop_apply(p, 1, bi, 700, 900, bo, 700, 900, 1, why, sizeof(why)) == STK_OK);
  CHECK(stk__pyop_starts(p) == 2);
  free(bi), free(bo);
  stk__pyop_free(p);
}

static void test_refusals(void) {
  job j;
  char err[512];
  stk_job_spec s;
  spec_of(&s, "resize(32, 32) | python(stk_test_ops:noise)");
  unsetenv("STOKER_PYTHON_PATH");
  CHECK(job_open(&j, &s, NULL, err, sizeof(err)) == STK_INVALID_ARGUMENT &&
        strstr(err, "no Python path"));
  /* the environment variable is the fallback */
  setenv("STOKER_PYTHON_PATH", PYOPS_DIR, 1);
  int rc = job_open(&j, &s, NULL, err, sizeof(err));
  CHECK(rc == STK_OK);
  if (rc) fprintf(stderr, "with STOKER_PYTHON_PATH: %s\n", err);
  else job_close(&j);
  unsetenv("STOKER_PYTHON_PATH");
  spec_of(&s, "resize(32, 32) | python(stk_test_ops:nothing_here)");
  CHECK(job_open(&j, &s, PYOPS_DIR, err, sizeof(err)) == STK_INVALID_ARGUMENT &&
        strstr(err, "has no function nothing_here"));
  fprintf(stderr, "refused: %s\n", err);
  /* json is a standard module, but not in the Python path */
  spec_of(&s, "resize(32, 32) | python(json:dumps)");
  CHECK(job_open(&j, &s, PYOPS_DIR, err, sizeof(err)) == STK_INVALID_ARGUMENT &&
        strstr(err, "no module json in the python path"));
  fprintf(stderr, "refused: %s\n", err);
  /* A directory of the Python path, or the op's module, that others may
   * write: refused at open, naming it; with go-w both, it opens. */
  char dir[4300], mod[4400], src[600], cmd[9000];
  snprintf(dir, sizeof(dir), "%s/pyunsafe", root);
  snprintf(mod, sizeof(mod), "%s/stk_test_ops.py", dir);
  snprintf(src, sizeof(src), "%s/stk_test_ops.py", PYOPS_DIR);
  CHECK(mkdir(dir, 0700) == 0);
  snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", src, mod);
  CHECK(system(cmd) == 0);
  spec_of(&s, "resize(32, 32) | python(stk_test_ops:noise)");
  for (int k = 0; k < 3; k++) {
    CHECK(chmod(dir, k == 0 ? 0777 : 0755) == 0);
    CHECK(chmod(mod, k == 1 ? 0666 : 0644) == 0);
    err[0] = 0;
    rc = job_open(&j, &s, dir, err, sizeof(err));
    if (k < 2) {
      CHECK(rc == STK_INVALID_ARGUMENT && strstr(err, "is writable by others") &&
            strstr(err, k ? mod : dir));
      fprintf(stderr, "refused: %s\n", err);
    } else {
      CHECK(rc == STK_OK);
      if (rc) fprintf(stderr, "go-w Python path: %s\n", err);
      else job_close(&j);
    }
  }
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
  CHECK(system(cmd) == 0);
}

int main(void) {
  if (system("/usr/bin/python3 -c 'import numpy' 2>/dev/null") != 0) {
    printf("skip: /usr/bin/python3 with numpy is needed\n");
    return 77;
  }
  if (tu_tmpdir(root, sizeof(root), "pyop")) return 77;
  snprintf(tmp, sizeof(tmp), "%s/tmp", root);
  CHECK(mkdir(tmp, 0700) == 0);
  char ds[4200], err[256];
  snprintf(ds, sizeof(ds), "%s/ds", root);
  stk__gen_opts o = {ds, 40, 7, 4, 1, 0, 16, 60, 120};
  if (stk__gen_dataset(&o, err, sizeof(err))) {
    fprintf(stderr, "gen: %s\n", err);
    return 1;
  }
  setenv("STOKER_PYTHON_TIMEOUT", "2", 1);
  int fds = count_fds();
  test_text();
  test_numpy();
  test_threads();
  test_bad_samples("raise_some", "ValueError: unlucky sample");
  test_bad_samples("bad_result", "the op wants uint8 (32, 32, 3)");
  /* a runner that shrinks the memfd: refused by its seal, not a SIGBUS */
  test_bad_samples("shrink_shm_some", "PermissionError");
  test_failures("crash", "", 1);
  test_failures("crash", "kill", 1);
  test_failures("crash", "", 2);
  test_failures("hang", "", 1);
  test_failures("hang", "", 2);
  test_restart();
  test_refusals();
  /* every runner reaped, every descriptor closed */
  errno = 0;
  CHECK(waitpid(-1, NULL, WNOHANG) == -1 && errno == ECHILD);
  CHECK(count_fds() == fds);
  tu_rmtree(root);
  CHECK_DONE();
}
