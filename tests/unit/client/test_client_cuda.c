/* test_client_cuda.c - asking for the CUDA backend where there is none is a
 * clean STK_UNSUPPORTED with a clear message, never a crash.
 *   missing : STOKER_CUDART points at no library -> "CUDA runtime not found"
 *   nodevice: the default search; with a runtime but no driver/GPU ->
 *             "no CUDA device" (exit 77 if this machine has a GPU, or if no
 *             runtime is installed, which the first case covers). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "stoker/client.h"

int main(int argc, char **argv) {
  int missing = argc > 1 && !strcmp(argv[1], "missing");
  if (missing) setenv("STOKER_CUDART", "/nonexistent/libcudart.so.99", 1);
  else unsetenv("STOKER_CUDART");
  stk_client_config cfg;
  stk_client_config_defaults(&cfg);
  cfg.coordinator = "127.0.0.1:1";
  cfg.world_size = 1;
  cfg.device = STK_DEVICE_CUDA;
  cfg.join_timeout_ms = 100;
  stk_client *c = NULL;
  char err[512] = "";
  int st = stk_client_open(&cfg, &c, err, sizeof(err));
  printf("status %d (%s): %s\n", st, stk_strerror(st), err);
  if (!missing) {
    if (st != STK_UNSUPPORTED) {
      stk_client_close(c);
      printf("SKIP: a CUDA device seems present (status %d); nothing to test\n", st);
      return 77;
    }
    if (strstr(err, "runtime not found")) {
      printf("SKIP: no CUDA runtime installed here (the 'missing' case covers it)\n");
      return 77;
    }
    CHECK(strstr(err, "no CUDA device") != NULL);
  } else {
    CHECK(st == STK_UNSUPPORTED);
    CHECK(strstr(err, "CUDA runtime not found") != NULL);
    CHECK(strstr(err, "libcudart.so.99") != NULL);
  }
  CHECK(c == NULL);
  /* The local variant fails the same way, before building anything. */
  stk_client *c2 = NULL;
  st = stk_client_open_local(&cfg, "world_size = 1\n", NULL, &c2, err, sizeof(err));
  CHECK(st == STK_UNSUPPORTED);
  CHECK(c2 == NULL);
  CHECK_DONE();
}
