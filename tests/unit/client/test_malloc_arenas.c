/* test_malloc_arenas.c - a networked client caps glibc at one arena: after
 * stk_client_open (here against a coordinator nobody serves, so the open
 * fails after its join timeout: the malloc settings come before the join),
 * 8 new threads that allocate all share one heap, as malloc_info lists
 * them. With more arenas, gRPC's threads spread its 64 KiB receive buffers
 * over several and each keeps a free pool of its own (docs/operations.md,
 * "Multi-day jobs"). Run with the argument "default" under
 * STOKER_MALLOC_TUNING=0, the same threads get arenas of their own (the
 * control: glibc gives each new thread one until its limit). Skipped (77)
 * when MALLOC_ARENA_MAX is set, glibc has no malloc_info, or a sanitizer's
 * allocator replaces glibc's.
 */
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stoker/client.h"

#define THREADS 8

static pthread_barrier_t all_in;

/* Allocate past glibc's per-thread cache while every thread is alive. */
static void *churn(void *arg) {
  (void)arg;
  void *p[4];
  for (int i = 0; i < 4; i++) p[i] = malloc(200 << 10);
  pthread_barrier_wait(&all_in);
  for (int i = 0; i < 4; i++) free(p[i]);
  return NULL;
}

/* Heaps (arenas) malloc_info reports; -1 if it cannot say. */
static int heaps(void) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f) return -1;
  int rc = malloc_info(0, f);
  fclose(f);
  int n = 0;
  for (const char *s = buf; rc == 0 && s && (s = strstr(s, "<heap nr=")); s++) n++;
  free(buf);
  return rc == 0 ? n : -1;
}

int main(int argc, char **argv) {
  int control = argc > 1 && !strcmp(argv[1], "default");
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  printf("SKIP: a sanitizer's allocator replaces glibc's arenas\n");
  return 77;
#endif
  if (getenv("MALLOC_ARENA_MAX")) {
    printf("SKIP: MALLOC_ARENA_MAX is set\n");
    return 77;
  }
  stk_client_config cfg;
  stk_client_config_defaults(&cfg);
  cfg.coordinator = "127.0.0.1:1"; /* nobody: the open fails after its join timeout */
  cfg.rank = 0;
  cfg.world_size = 1;
  cfg.join_timeout_ms = 300;
  stk_client *c = NULL;
  char err[512];
  if (stk_client_open(&cfg, &c, err, sizeof(err)) == STK_OK) stk_client_close(c);
  pthread_t t[THREADS];
  pthread_barrier_init(&all_in, NULL, THREADS);
  for (int i = 0; i < THREADS; i++) {
    if (pthread_create(&t[i], NULL, churn, NULL)) {
      fprintf(stderr, "pthread_create failed\n");
      return 1;
    }
  }
  for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
  int n = heaps();
  if (n < 0) {
    printf("SKIP: malloc_info says nothing\n");
    return 77;
  }
  int ok = control ? n > 1 : n == 1;
  printf("%s heaps after %d allocating threads: %d (want %s): %s\n",
         control ? "STOKER_MALLOC_TUNING=0:" : "tuned:", THREADS, n,
         control ? "more than 1" : "1", ok ? "ok" : "FAIL");
  return ok ? 0 : 1;
}
