/* test_secret_advice.c - common/secret.c: a token file's first line (CRLF
 * and trailing blanks cut; empty, too long, control bytes or a space, a
 * missing file refused without showing the content), the precedence of
 * stk__token_resolve (argument, file, $STOKER_TOKEN, $STOKER_TOKEN_FILE;
 * both arguments refused); common/advice.c: the input-bound formula and
 * the job verdict. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "common/advice.h"
#include "common/secret.h"

static char dir[64];

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
  stk__verdict v;
  stk__job_verdict(2, 1.5, 1, 0.25, &v); /* 25% stall: 2 / 0.75 */
  CHECK(v.kind == STK_VERDICT_INPUT_BOUND && v.workers_needed > 2.66 &&
        v.workers_needed < 2.67);
  stk__job_verdict(4, 1.2, 2, 0.01, &v); /* 1.2 busy of 4: ceil(1.5) = 2 needed */
  CHECK(v.kind == STK_VERDICT_COMPUTE_BOUND && v.workers_spare == 2);
  stk__job_verdict(2, 1.9, 2, 0.0, &v);
  CHECK(v.kind == STK_VERDICT_BALANCED && v.workers_spare == 0);
  stk__job_verdict(2, 1.0, 0, 0.5, &v);
  CHECK(v.kind == STK_VERDICT_UNKNOWN);
  stk__job_verdict(0, 0, 2, 0.5, &v);
  CHECK(v.kind == STK_VERDICT_UNKNOWN);
  CHECK_DONE();
}
