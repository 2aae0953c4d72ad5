/* test_client_config.c - bad configurations are clean errors with a
 * message (environment defaults: test_client_env.c); a coordinator that is not there is
 * STK_UNAVAILABLE after join_timeout_ms; resume-state sizes, round trip and mismatches.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "common/clock.h"
#include "stoker/client.h"

#define JOB                                                       \
  "source = synthetic\nnum_samples = 64\nheight = 8\nwidth = 8\n" \
  "batch_size = 4\nworld_size = 2\nepochs = 2\nseed = 7\n"

static int open_bad(stk_client_config *cfg, const char *want) {
  stk_client *c = NULL;
  char err[512] = "";
  int st = stk_client_open(cfg, &c, err, sizeof(err));
  if (c) stk_client_close(c);
  if (want && !strstr(err, want)) {
    fprintf(stderr, "error text '%s' lacks '%s'\n", err, want);
    return -1;
  }
  return st;
}

int main(void) {
  stk_client_config cfg;
  char err[512];
  stk_client *c = NULL;
  /* Fields left "not given" come from these (test_client_env.c): none set. */
  const char *env[] = {
      "STOKER_COORDINATOR",   "RANK",         "WORLD_SIZE",  "OMPI_COMM_WORLD_RANK",
      "OMPI_COMM_WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS"};
  for (size_t i = 0; i < sizeof(env) / sizeof(env[0]); i++) unsetenv(env[i]);
  CHECK(stk_client_open(NULL, &c, err, sizeof(err)) == STK_INVALID_ARGUMENT);
  CHECK(c == NULL);
  stk_client_config_defaults(&cfg);
  CHECK(cfg.prefetch == 8 && cfg.slots == 2 && cfg.verify_crc == 1);
  cfg.world_size = 1;
  CHECK(open_bad(&cfg, "coordinator") == STK_INVALID_ARGUMENT);
  cfg.coordinator = "127.0.0.1:1";
  cfg.world_size = 2, cfg.rank = 2;
  CHECK(open_bad(&cfg, "rank") == STK_INVALID_ARGUMENT);
  cfg.rank = 0, cfg.slots = 1;
  CHECK(open_bad(&cfg, "slots") == STK_INVALID_ARGUMENT);
  cfg.slots = 2, cfg.prefetch = 0;
  CHECK(open_bad(&cfg, "prefetch") == STK_INVALID_ARGUMENT);
  cfg.prefetch = 4, cfg.device = 9;
  CHECK(open_bad(&cfg, "device") == STK_INVALID_ARGUMENT);
  cfg.device = STK_DEVICE_CPU, cfg.convert = 7;
  CHECK(open_bad(&cfg, "convert") == STK_INVALID_ARGUMENT);
  cfg.convert = 0, cfg.working_set = 1025;
  CHECK(open_bad(&cfg, "working_set") == STK_INVALID_ARGUMENT);
  cfg.working_set = 8, cfg.working_set_max = 4;
  CHECK(open_bad(&cfg, "working_set_max") == STK_INVALID_ARGUMENT);
  cfg.working_set = 0, cfg.working_set_max = 0;
  unsigned char junk[40] = {1, 2, 3};
  cfg.resume_state = junk, cfg.resume_len = sizeof(junk);
  CHECK(open_bad(&cfg, "resume_state") == STK_INVALID_ARGUMENT);
  cfg.resume_state = NULL, cfg.resume_len = 0;

  /* Nobody listens on port 1: UNAVAILABLE once the join timeout passed
   * (never before it; how long after is the machine's business). */
  cfg.join_timeout_ms = 300;
  int64_t t0 = stk__now_ms();
  CHECK(open_bad(&cfg, "could not join") == STK_UNAVAILABLE);
  CHECK(stk__now_ms() - t0 >= 300);

  /* Local: a job/world mismatch and a bad job line. */
  cfg.world_size = 3;
  CHECK(stk_client_open_local(&cfg, JOB, NULL, &c, err, sizeof(err)) ==
        STK_INVALID_ARGUMENT);
  cfg.world_size = 2;
  CHECK(stk_client_open_local(&cfg, "no_such_key = 1\n", NULL, &c, err, sizeof(err)) ==
        STK_INVALID_ARGUMENT);
  CHECK(stk_client_open_local(&cfg, JOB "batch_size = 0\n", NULL, &c, err, sizeof(err)) ==
        STK_INVALID_ARGUMENT);

  /* Resume state: size query, round trip, mismatches. */
  CHECK(stk_client_open_local(&cfg, JOB, NULL, &c, err, sizeof(err)) == STK_OK);
  size_t len = 0;
  CHECK(stk_client_save_state(c, NULL, &len) == STK_LIMIT);
  CHECK_EQ_U64(len, 48);
  unsigned char st[64];
  len = 10;
  CHECK(stk_client_save_state(c, st, &len) == STK_LIMIT);
  len = sizeof(st);
  stk_batch *b;
  for (int i = 0; i < 3; i++) {
    CHECK(stk_client_next(c, &b) == STK_OK);
    stk_batch_release(b);
  }
  CHECK(stk_client_save_state(c, st, &len) == STK_OK);
  CHECK_EQ_U64(len, 48);
  stk_client_close(c);
  cfg.resume_state = st, cfg.resume_len = len;
  CHECK(stk_client_open_local(&cfg, JOB, NULL, &c, err, sizeof(err)) == STK_OK);
  CHECK(stk_client_next(c, &b) == STK_OK);
  CHECK_EQ_U64(stk_batch_step(b), 3);
  CHECK_EQ_U64(stk_batch_epoch(b), 0);
  stk_batch_release(b);
  stk_client_close(c);
  CHECK(stk_client_open_local(&cfg, JOB "seed = 8\n", NULL, &c, err, sizeof(err)) ==
        STK_MISMATCH);
  cfg.rank = 1;
  CHECK(stk_client_open_local(&cfg, JOB, NULL, &c, err, sizeof(err)) == STK_MISMATCH);
  cfg.rank = 0;
  st[4] = 9; /* version */
  CHECK(stk_client_open_local(&cfg, JOB, NULL, &c, err, sizeof(err)) == STK_UNSUPPORTED);
  CHECK(stk_client_struct_size("stk_client_config") == sizeof(stk_client_config));
  CHECK(stk_client_struct_size("stk_stats") == sizeof(stk_stats));
  /* fields are appended: the older ones keep their offsets */
  CHECK(offsetof(stk_stats, recv_cpu_user_s_per_gb) >= offsetof(stk_stats, reserved) + 4);
  CHECK(stk_client_struct_size("nope") == 0);
  stk_client_close(NULL);
  stk_batch_release(NULL);
  CHECK_DONE();
}
