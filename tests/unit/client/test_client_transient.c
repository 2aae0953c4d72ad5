/* test_client_transient.c - a transient build error re-asks, never fails
 * the job and never changes data (client/local.c, the local builder):
 * a local client over a real ImageFolder dataset runs out of file
 * descriptors mid-epoch (the test's child dups /dev/null until EMFILE,
 * once the client's buffers are full and its builder holds no file);
 * builds fail STK_UNAVAILABLE and go back to the queue; once the
 * descriptors are freed (a helper thread, as soon as the client has
 * re-queued a request) every batch of the epoch arrives, in order, equal to
 * the reference, with nothing substituted.
 *
 * usage: test_client_transient <stoker-dataset>
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "stoker/client.h"

#define STEPS 10
#define JOB                                                                  \
  "source = imagefolder\ndataset = gen/imagefolder\nnum_samples = 0\n"       \
  "pipeline = eval\nheight = 16\nwidth = 16\nresize = 18\nbatch_size = 32\n" \
  "world_size = 1\nepochs = 1\nseed = 3\n"

static int dummies[65536], ndummies;
static stk_client *client;

static void *freer(void *arg) {
  (void)arg;
  /* wait (bounded, 60 s) until the client has re-queued a failed build */
  for (int i = 0; i < 60000; i++) {
    stk_stats s;
    memset(&s, 0, sizeof(s));
    stk_client_stats(client, &s);
    if (s.reissued > 0) break;
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  for (int i = 0; i < ndummies; i++) close(dummies[i]);
  return NULL;
}

static int child(const char *root) {
  stk_client_config cfg;
  stk_client_config_defaults(&cfg);
  cfg.rank = 0;
  cfg.world_size = 1;
  cfg.prefetch = 2;
  char err[512] = "";
  if (stk_client_open_local(&cfg, JOB, root, &client, err, sizeof(err))) {
    fprintf(stderr, "open_local: %s\n", err);
    return 1;
  }
  size_t bytes = stk_client_payload_bytes(client);
  unsigned char *got = malloc(STEPS * bytes), *ref = malloc(bytes);
  CHECK(got && ref);
  /* Wait (bounded, 60 s) until the client has built all it can hold
   * before we consume (prefetch receive buffers + slots): its builder then
   * waits for a free buffer and holds no descriptor. Taken mid-build, the
   * builder's open files would be free again when it closes them, enough
   * for every later build, and no build would ever fail. */
  uint64_t full = ((uint64_t)cfg.prefetch + cfg.slots) * bytes;
  for (int i = 0; i < 60000; i++) {
    stk_stats s0;
    memset(&s0, 0, sizeof(s0));
    stk_client_stats(client, &s0);
    if (s0.bytes >= full) break;
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  /* out of descriptors from here on */
  int nul = open("/dev/null", O_RDONLY);
  CHECK(nul >= 0);
  dummies[ndummies++] = nul;
  while (ndummies < 65536) {
    int fd = dup(nul);
    if (fd < 0) break;
    dummies[ndummies++] = fd;
  }
  CHECK(errno == EMFILE);
  pthread_t th;
  CHECK(pthread_create(&th, NULL, freer, NULL) == 0);
  int n = 0, st;
  stk_batch *b;
  while ((st = stk_client_next(client, &b)) == STK_OK) {
    size_t len = 0;
    const void *p = stk_batch_payload(b, &len);
    CHECK(len == bytes && stk_batch_step(b) == (uint64_t)n);
    if (n < STEPS) memcpy(got + (size_t)n * bytes, p, bytes);
    n++;
    stk_batch_release(b);
  }
  pthread_join(th, NULL);
  printf("epoch: %d batches, last status %d (%s) %s\n", n, st, stk_strerror(st),
         stk_client_error(client));
  CHECK(st == STK_END_OF_EPOCH || st == STK_END_OF_DATA);
  CHECK(n == STEPS);
  stk_stats s;
  memset(&s, 0, sizeof(s));
  stk_client_stats(client, &s);
  printf("re-asked after a transient error: %llu, substituted: %llu\n",
         (unsigned long long)s.reissued, (unsigned long long)s.substituted);
  CHECK(s.reissued > 0);
  CHECK(s.substituted == 0);
  int same = 0;
  for (int k = 0; k < n && k < STEPS; k++) {
    CHECK(stk_client_reference(client, 0, (uint64_t)k, NULL, ref, bytes) == STK_OK);
    same += !memcmp(ref, got + (size_t)k * bytes, bytes);
  }
  printf("equal to the reference: %d of %d batches\n", same, n);
  CHECK(same == STEPS);
  stk_client_close(client);
  free(got), free(ref);
  return check_failures;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s <stoker-dataset>\n", argv[0]);
    return 2;
  }
  char root[] = "/tmp/stoker-ctrans-XXXXXX";
  if (!mkdtemp(root)) return 77;
  char out[600];
  snprintf(out, sizeof(out), "%s/gen", root);
  pid_t g = fork();
  if (g == 0) {
    execl(argv[1], argv[1], "gen", "--out", out, "--count", "320", "--layout",
          "imagefolder", "--min-side", "24", "--max-side", "48", (char *)NULL);
    _exit(127);
  }
  int ws = 0;
  CHECK(g > 0 && waitpid(g, &ws, 0) == g && WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    int f = child(root);
    fflush(stdout);
    _exit(f ? 1 : 0);
  }
  CHECK(pid > 0 && waitpid(pid, &ws, 0) == pid);
  CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
  char cmd[700];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
  CHECK(system(cmd) == 0);
  CHECK_DONE();
}
