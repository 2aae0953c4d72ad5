/* test_secret_advice.c - common/secret.c: a token file's first line (CRLF
 * and trailing blanks cut; empty, too long, control bytes or a space, a
 * missing file refused without showing the content), the precedence of
 * stk__token_resolve (argument, file, $STOKER_TOKEN, $STOKER_TOKEN_FILE;
 * both arguments refused); common/advice.c: the input-bound formula and
 * the job verdict in cores (missing figures named, the 25% margin). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "common/advice.h"
#include "common/secret.h"

static char dir[64];

static int has(const char *text, const char *part) { return strstr(text, part) != NULL; }

/* The verdict in cores: no count without the figures, cores as the unit,
 * "could go" only with the 25% margin. */
static void advice_checks(void) {
  stk__verdict v;
  char t[600];
  /* the homogeneous shape: one 0.35-core worker measured at 30
   * batches per CPU-second (about 10.5 batches/s), one rank with a 25 ms
   * step stalling 68%: 40 batches/s need 1.33 cores, 0.98 more */
  stk__worker_fig w1[] = {{0.35, 30, 1.0}};
  stk__rank_fig r1[] = {{0.68, 25, 12.8}};
  stk__job_verdict(w1, 1, r1, 1, &v);
  stk__verdict_text(&v, t, sizeof(t));
  CHECK(v.kind == STK_VERDICT_INPUT_BOUND);
  CHECK(v.demand_bps > 39.99 && v.demand_bps < 40.01);
  CHECK(v.cores_needed > 1.33 && v.cores_needed < 1.34);
  CHECK(v.cores_more > 0.98 && v.cores_more < 0.99);
  CHECK(has(t, "about 1.0 more cores of this pipeline's CPU") &&
        !has(t, "workers would"));
  printf("%s\n", t);

  /* no step time (--step-ms 0: 0.02 ms outside next()): missing, no count */
  stk__rank_fig r0[] = {{0.97, 0.02, 400}};
  stk__job_verdict(w1, 1, r0, 1, &v);
  stk__verdict_text(&v, t, sizeof(t));
  CHECK(v.kind == STK_VERDICT_UNKNOWN && v.cores_more == 0 && v.workers_needed == 0);
  CHECK(has(t, "missing: a step time") && !has(t, "more"));
  printf("%s\n", t);
  /* a client that does not report its step time */
  stk__rank_fig rn[] = {{0.5, 0, 10}};
  stk__job_verdict(w1, 1, rn, 1, &v);
  stk__verdict_text(&v, t, sizeof(t));
  CHECK(v.kind == STK_VERDICT_UNKNOWN && has(t, "missing: the ranks' step time"));
  /* no rank report, no worker, a worker that did not tell its cores */
  stk__job_verdict(w1, 1, NULL, 0, &v);
  stk__verdict_text(&v, t, sizeof(t));
  CHECK(v.kind == STK_VERDICT_UNKNOWN && has(t, "missing: the ranks' stall"));
  stk__job_verdict(NULL, 0, r1, 1, &v);
  CHECK(v.kind == STK_VERDICT_UNKNOWN && has(v.missing, "a live worker"));
  stk__worker_fig wu[] = {{0, 30, 1.0}};
  stk__job_verdict(wu, 1, r1, 1, &v);
  CHECK(v.kind == STK_VERDICT_UNKNOWN && has(v.missing, "usable cores of 1 of 1"));
  /* capacity not measured yet: missing, no count */
  stk__worker_fig wm[] = {{0.35, 0, 1.0}};
  stk__job_verdict(wm, 1, r1, 1, &v);
  stk__verdict_text(&v, t, sizeof(t));
  CHECK(v.kind == STK_VERDICT_UNKNOWN &&
        has(t, "missing: the workers' measured capacity"));
  /* input-bound although the CPU is there: no "more cores" */
  stk__worker_fig wb[] = {{4, 30, 0.2}};
  stk__job_verdict(wb, 1, r1, 1, &v);
  stk__verdict_text(&v, t, sizeof(t));
  CHECK(v.kind == STK_VERDICT_INPUT_BOUND && v.cores_more == 0 &&
        has(t, "not for want of worker CPU"));
  /* NaN and negative figures off the wire count as absent */
  stk__rank_fig rbad[] = {{NAN, -5, -1}};
  stk__job_verdict(w1, 1, rbad, 1, &v);
  CHECK(v.kind != STK_VERDICT_INPUT_BOUND);

  /* the margin rule: 3 workers of 0.45 core at 30 batches per CPU-second
   * (13.5 batches/s each), ranks taking 20 batches/s with no stall */
  stk__worker_fig w3[] = {{0.45, 30, 0.5}, {0.45, 30, 0.5}, {0.45, 30, 0.5}};
  stk__rank_fig rq[] = {{0.01, 50, 20}};
  /* 2 workers: 27 >= 1.25 x 20 = 25: one could go */
  stk__job_verdict(w3, 3, rq, 1, &v);
  stk__verdict_text(&v, t, sizeof(t));
  CHECK(v.kind == STK_VERDICT_COMPUTE_BOUND && v.workers_spare == 1);
  CHECK(has(t, "1 of 3 workers could go"));
  printf("%s\n", t);
  /* 22 batches/s: 2 workers give 27 < 27.5: every worker stays */
  stk__rank_fig rq2[] = {{0.01, 45, 22}};
  stk__job_verdict(w3, 3, rq2, 1, &v);
  stk__verdict_text(&v, t, sizeof(t));
  CHECK(v.kind == STK_VERDICT_BALANCED && v.workers_spare == 0 && !has(t, "could go"));
  /* the biggest workers are the ones kept */
  stk__worker_fig wmix[] = {{0.2, 30, 0.5}, {2, 30, 0.5}, {0.2, 30, 0.5}};
  stk__job_verdict(wmix, 3, rq, 1, &v); /* 60 >= 25 with the 2-core one */
  CHECK(v.kind == STK_VERDICT_COMPUTE_BOUND && v.workers_spare == 2);
  /* a worker not measured yet: nobody "could go" */
  stk__worker_fig w3m[] = {{0.45, 30, 0.5}, {0.45, 30, 0.5}, {0.45, 0, 0.5}};
  stk__job_verdict(w3m, 3, rq, 1, &v);
  stk__verdict_text(&v, t, sizeof(t));
  CHECK(v.kind == STK_VERDICT_BALANCED && v.workers_spare == 0 &&
        has(t, "missing: the measured capacity of 1 of 3 workers"));
  CHECK(!strcmp(stk__verdict_name(STK_VERDICT_INPUT_BOUND), "input-bound"));
}

static const char *file_with(const char *name, const char *content) {
  static char path[2][128];
  static int k;
  char *p = path[k++ % 2];
  snprintf(p, 128, "%s/%s", dir, name);
  FILE *f = fopen(p, "w");
  if (f) {
    fputs(content, f);
    fclose(f);
  }
  return p;
}

int main(void) {
  snprintf(dir, sizeof(dir), "/tmp/stoker-secret-XXXXXX");
  CHECK(mkdtemp(dir) != NULL);
  char tok[64], err[256];
  CHECK(stk__token_read_file(file_with("a", "s3cret\r\nsecond line\n"), tok, sizeof(tok),
                             err, sizeof(err)) == 0 &&
        !strcmp(tok, "s3cret"));
  CHECK(stk__token_read_file(file_with("b", "abc  \t"), tok, sizeof(tok), err,
                             sizeof(err)) == 0 &&
        !strcmp(tok, "abc"));
  CHECK(stk__token_read_file(file_with("c", "\nx\n"), tok, sizeof(tok), err,
                             sizeof(err)) == -1 &&
        strstr(err, "no token") && !tok[0]);
  CHECK(stk__token_read_file(file_with("d", "has space\n"), tok, sizeof(tok), err,
                             sizeof(err)) == -1 &&
        !strstr(err, "has space") && !tok[0]);
  CHECK(stk__token_read_file(file_with("e", "bell\a\n"), tok, sizeof(tok), err,
                             sizeof(err)) == -1);
  char longtok[200];
  memset(longtok, 'k', sizeof(longtok) - 1);
  longtok[sizeof(longtok) - 1] = 0;
  CHECK(stk__token_read_file(file_with("f", longtok), tok, sizeof(tok), err,
                             sizeof(err)) == -1 &&
        strstr(err, "longer than 63") && !strstr(err, "kkkk"));
  CHECK(stk__token_read_file("/nonexistent/token", tok, sizeof(tok), err, sizeof(err)) ==
            -1 &&
        strstr(err, "/nonexistent/token"));

  stk__token_source src;
  const char *fa = file_with("g", "from-file\n");
  unsetenv("STOKER_TOKEN");
  unsetenv("STOKER_TOKEN_FILE");
  CHECK(stk__token_resolve(NULL, NULL, tok, sizeof(tok), &src, err, sizeof(err)) == 0 &&
        src == STK_TOKEN_NONE && !tok[0]);
  setenv("STOKER_TOKEN_FILE", fa, 1);
  CHECK(stk__token_resolve("", "", tok, sizeof(tok), &src, err, sizeof(err)) == 0 &&
        src == STK_TOKEN_ENV_FILE && !strcmp(tok, "from-file"));
  setenv("STOKER_TOKEN", "from-env", 1);
  CHECK(stk__token_resolve(NULL, NULL, tok, sizeof(tok), &src, err, sizeof(err)) == 0 &&
        src == STK_TOKEN_ENV && !strcmp(tok, "from-env"));
  CHECK(stk__token_resolve(NULL, fa, tok, sizeof(tok), &src, err, sizeof(err)) == 0 &&
        src == STK_TOKEN_FILE && !strcmp(tok, "from-file"));
  CHECK(stk__token_resolve("argv", NULL, tok, sizeof(tok), &src, err, sizeof(err)) == 0 &&
        src == STK_TOKEN_ARGV && !strcmp(tok, "argv"));
  CHECK(stk__token_resolve("argv", fa, tok, sizeof(tok), &src, err, sizeof(err)) == -1 &&
        strstr(err, "once"));
  CHECK(stk__token_resolve(longtok, NULL, tok, sizeof(tok), &src, err, sizeof(err)) ==
            -1 &&
        src == STK_TOKEN_NONE && !strstr(err, "kkkk"));
  CHECK(!strcmp(stk__token_source_name(STK_TOKEN_ENV), "STOKER_TOKEN"));
  unsetenv("STOKER_TOKEN");
  unsetenv("STOKER_TOKEN_FILE");
  for (const char *n = "abcdefg"; *n; n++) {
    char p[128];
    snprintf(p, sizeof(p), "%s/%c", dir, *n);
    unlink(p);
  }
  CHECK(rmdir(dir) == 0);

  /* 2 workers, a loop that stalls 1 s per 3 s of compute: 2 x 4/3. */
  CHECK(stk__workers_needed(2, 1e9, 3e9) > 2.66 &&
        stk__workers_needed(2, 1e9, 3e9) < 2.67);
  CHECK(stk__workers_needed(2, 5, 0) == 12); /* compute floored at 1 */
  advice_checks();
  CHECK_DONE();
}
