/* test_journal.c - the coordinator's state journal (server/journal.c):
 *  - format then parse gives back every field (ranks, dataset, the end,
 *    worker ids with any byte but NUL);
 *  - every truncation and every single-byte change of a valid file is a
 *    clear error (the line and what is wrong), never a crash or a silent
 *    misread; garbage, an empty file, another version, a rank past
 *    world_size are refused;
 *  - the state dir: created when missing, locked against a second opener,
 *    the file replaced atomically (no temp file left), a symbolic link
 *    planted at the temp file or at the state file refused, nothing
 *    written through it.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "common/crc32c.h"
#include "journal.h"

static char tmpdir[] = "/tmp/stoker-test-journal-XXXXXX";

static stk__journal sample(void) {
  static uint8_t joined[5] = {1, 1, 0, 1, 1}, finished[5] = {0, 1, 0, 0, 1};
  static char *ids[] = {"host-a:123:1", "w\n2 \x1b[31m\xff odd", "z"};
  stk__journal j;
  memset(&j, 0, sizeof(j));
  j.job_hash = 0x0123456789abcdefull;
  j.job_name = "imagenet-run.7";
  j.world_size = 5;
  j.num_samples = 1281167;
  j.have_fp = 1;
  j.fingerprint = 0xfedcba9876543210ull;
  j.joined = joined;
  j.finished = finished;
  j.ended = 1;
  j.exit_code = 4;
  j.failed = 1;
  j.reason = "rank 3 aborted the job: exit 1";
  j.worker_ids = ids;
  j.nworkers = 3;
  return j;
}

static void round_trip(void) {
  stk__journal j = sample(), k;
  char *text = NULL, err[300];
  size_t len = 0;
  CHECK(stk__journal_format(&j, &text, &len) == 0);
  if (!text) return;
  printf("journal text (%zu bytes):\n%s", len, text);
  CHECK(strlen(text) == len);
  CHECK(stk__journal_parse(text, len, &k, err, sizeof(err)) == 0);
  CHECK(k.job_hash == j.job_hash && k.world_size == 5 && k.num_samples == 1281167);
  CHECK(k.have_fp && k.fingerprint == j.fingerprint);
  CHECK(k.job_name && !strcmp(k.job_name, j.job_name));
  for (int r = 0; r < 5; r++)
    CHECK(k.joined && k.finished && k.joined[r] == j.joined[r] &&
          k.finished[r] == j.finished[r]);
  CHECK(k.ended && k.exit_code == 4 && k.failed && !strcmp(k.reason, j.reason));
  CHECK(k.nworkers == 3);
  for (size_t i = 0; i < k.nworkers && i < 3; i++)
    CHECK(!strcmp(k.worker_ids[i], j.worker_ids[i]));
  stk__journal_free(&k);
  stk__journal_free(&k); /* zeroed: a second free is harmless */

  /* A running job, nothing learnt yet, no workers. */
  stk__journal e = sample();
  e.ended = 0, e.have_fp = 0, e.num_samples = 0, e.nworkers = 0, e.job_name = "";
  uint8_t none[5] = {0};
  e.joined = e.finished = none;
  char *t2 = NULL;
  size_t l2 = 0;
  CHECK(stk__journal_format(&e, &t2, &l2) == 0);
  CHECK(t2 && stk__journal_parse(t2, l2, &k, err, sizeof(err)) == 0);
  CHECK(!k.ended && !k.have_fp && !k.num_samples && !k.nworkers && !*k.job_name);
  stk__journal_free(&k);
  free(t2);

  /* Every truncation and every single-byte change is refused, with a
   * message; none crashes (ASan watches the reads). */
  int refused = 0, total = 0;
  char *copy = malloc(len + 1);
  for (size_t n = 0; copy && n < len; n++) {
    memcpy(copy, text, n);
    err[0] = 0;
    int rc = stk__journal_parse(copy, n, &k, err, sizeof(err));
    stk__journal_free(&k);
    total++;
    if (rc == -1 && err[0]) refused++;
    else fprintf(stderr, "truncated to %zu bytes: parsed\n", n);
  }
  for (size_t i = 0; copy && i < len; i++) {
    static const unsigned char flips[] = {0x01, 0x20, 0x80, 0xff};
    for (size_t f = 0; f < sizeof(flips); f++) {
      memcpy(copy, text, len);
      copy[i] = (char)(copy[i] ^ flips[f]);
      err[0] = 0;
      int rc = stk__journal_parse(copy, len, &k, err, sizeof(err));
      stk__journal_free(&k);
      total++;
      if (rc == -1 && err[0]) refused++;
      else fprintf(stderr, "byte %zu ^ 0x%02x: parsed\n", i, flips[f]);
    }
  }
  printf("damaged copies refused: %d of %d\n", refused, total);
  CHECK(refused == total);
  /* Two examples of the messages (copy NUL-terminated for strstr). */
  memcpy(copy, text, len);
  copy[len] = 0;
  CHECK(stk__journal_parse(copy, len - 5, &k, err, sizeof(err)) == -1);
  printf("truncated: %s\n", err);
  CHECK(strstr(err, "line") && strstr(err, "truncated"));
  stk__journal_free(&k);
  char *p = strstr(copy, "num_samples 1");
  if (p) p[12] = '2';
  CHECK(stk__journal_parse(copy, len, &k, err, sizeof(err)) == -1);
  printf("one digit changed: %s\n", err);
  CHECK(strstr(err, "checksum"));
  stk__journal_free(&k);
  free(copy);
  free(text);
}

static void refusals(void) {
  stk__journal k;
  char err[300];
  static const char *const bad[] = {
      "",
      "hello\n",
      "stoker-coordinator-state 2\njob_hash 0000000000000001\n",
      "stoker-coordinator-state x\n",
      "stoker-coordinator-state 1\njob_hash 00000000000000AB\n",
      "stoker-coordinator-state 1\njob_hash 0000000000000001\njob_name -\n"
      "world_size 2\nnum_samples 8\nfingerprint -\njoined 0 2\n",
      "stoker-coordinator-state 1\njob_hash 0000000000000001\njob_name -\n"
      "world_size 0\n",
      "stoker-coordinator-state 1\njob_hash 0000000000000001\njob_name 6\n",
      "stoker-coordinator-state 1\njob_hash 0000000000000001\njob_name 00\n",
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    err[0] = 0;
    CHECK(stk__journal_parse(bad[i], strlen(bad[i]), &k, err, sizeof(err)) == -1);
    printf("refused: %s\n", err);
    CHECK(err[0] != 0);
    stk__journal_free(&k);
  }
  /* A rank past world_size, even with a good checksum. */
  stk__journal j = sample();
  char *text = NULL;
  size_t len = 0;
  CHECK(stk__journal_format(&j, &text, &len) == 0);
  char *ws = text ? strstr(text, "world_size 5") : NULL,
       *crc = text ? strstr(text, "crc32c ") : NULL;
  CHECK(ws && crc);
  if (ws && crc) {
    ws[11] = '2';
    snprintf(crc, 17, "crc32c %08x", stk_crc32c(0, text, (size_t)(crc - text)));
    crc[15] = '\n';
    CHECK(stk__journal_parse(text, len, &k, err, sizeof(err)) == -1);
    printf("refused: %s\n", err);
    CHECK(strstr(err, "world_size"));
    stk__journal_free(&k);
  }
  free(text);
  CHECK(stk__journal_parse("stoker-coordinator-state 1\nother\n", 33, &k, err,
                           sizeof(err)) == -1);
  printf("refused: %s\n", err);
  stk__journal_free(&k);
}

static void state_dir(void) {
  char dir[300], path[400], text[400];
  snprintf(dir, sizeof(dir), "%s/state", tmpdir);
  char err[600];
  stk__state_dir *d = NULL, *d2 = NULL;
  CHECK(stk__state_dir_open(dir, &d, err, sizeof(err)) == 0); /* created */
  if (!d) return;
  struct stat st;
  CHECK(stat(dir, &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 0777) == 0700);
  /* A second coordinator on the same dir is refused. */
  CHECK(stk__state_dir_open(dir, &d2, err, sizeof(err)) == -1 && !d2);
  printf("second opener: %s\n", err);
  CHECK(strstr(err, "in use"));
  char *t = NULL;
  size_t n = 0;
  CHECK(stk__state_dir_read(d, &t, &n, err, sizeof(err)) == 0 && !t); /* none yet */
  CHECK(stk__state_dir_write(d, "one\n", 4, err, sizeof(err)) == 0);
  CHECK(stk__state_dir_write(d, "two\n", 4, err, sizeof(err)) == 0);
  CHECK(stk__state_dir_read(d, &t, &n, err, sizeof(err)) == 1 && n == 4 && t &&
        !memcmp(t, "two\n", 4));
  free(t);
  snprintf(path, sizeof(path), "%s/state.tmp.%d", dir, (int)getpid());
  CHECK(access(path, F_OK) != 0); /* no temp file left */

  /* A symbolic link planted at the temp file: refused, target untouched. */
  char target[400];
  snprintf(target, sizeof(target), "%s/target", tmpdir);
  FILE *f = fopen(target, "w");
  if (f) fputs("precious\n", f), fclose(f);
  CHECK(symlink(target, path) == 0);
  CHECK(stk__state_dir_write(d, "three\n", 6, err, sizeof(err)) == -1);
  printf("planted temp link: %s\n", err);
  f = fopen(target, "r");
  CHECK(f && fgets(text, sizeof(text), f) && !strcmp(text, "precious\n"));
  if (f) fclose(f);
  unlink(path);
  /* A stale regular temp file of our pid is replaced. */
  f = fopen(path, "w");
  if (f) fputs("stale", f), fclose(f);
  CHECK(stk__state_dir_write(d, "four\n", 5, err, sizeof(err)) == 0);
  CHECK(stk__state_dir_read(d, &t, &n, err, sizeof(err)) == 1 && n == 5);
  free(t);
  /* The state file itself a symbolic link: reading refuses it. */
  snprintf(path, sizeof(path), "%s/state", dir);
  unlink(path);
  CHECK(symlink(target, path) == 0);
  CHECK(stk__state_dir_read(d, &t, &n, err, sizeof(err)) == -1 && !t);
  printf("state file a link: %s\n", err);
  CHECK(strstr(err, "symbolic link"));
  /* ... and a write replaces the link, not its target. */
  CHECK(stk__state_dir_write(d, "five\n", 5, err, sizeof(err)) == 0);
  CHECK(lstat(path, &st) == 0 && S_ISREG(st.st_mode));
  f = fopen(target, "r");
  CHECK(f && fgets(text, sizeof(text), f) && !strcmp(text, "precious\n"));
  if (f) fclose(f);
  CHECK(!strcmp(stk__state_dir_path(d), dir));
  stk__state_dir_close(d);
  /* The lock goes with its holder. */
  CHECK(stk__state_dir_open(dir, &d2, err, sizeof(err)) == 0);
  stk__state_dir_close(d2);
  stk__state_dir_close(NULL);
  /* Not a directory. */
  CHECK(stk__state_dir_open(target, &d2, err, sizeof(err)) == -1);
  printf("a file as state dir: %s\n", err);
  /* A symbolic link to a directory: refused (give the directory itself). */
  char link[400];
  snprintf(link, sizeof(link), "%s/state-link", tmpdir);
  CHECK(symlink(dir, link) == 0);
  CHECK(stk__state_dir_open(link, &d2, err, sizeof(err)) == -1 && !d2);
  printf("a link as state dir: %s\n", err);
  CHECK(strstr(err, "symbolic link") != NULL);
  unlink(link);
  /* Writable by others: refused, saying how to fix it. */
  CHECK(chmod(dir, 0777) == 0);
  CHECK(stk__state_dir_open(dir, &d2, err, sizeof(err)) == -1 && !d2);
  printf("a state dir others may write: %s\n", err);
  CHECK(strstr(err, "writable by others") != NULL && strstr(err, "chmod 700") != NULL);
  CHECK(chmod(dir, 0700) == 0);
  /* clean up */
  unlink(path);
  snprintf(path, sizeof(path), "%s/lock", dir);
  unlink(path);
  rmdir(dir);
  unlink(target);
}

int main(void) {
  if (!mkdtemp(tmpdir)) {
    perror("mkdtemp");
    return 1;
  }
  round_trip();
  refusals();
  state_dir();
  rmdir(tmpdir);
  CHECK_DONE();
}
