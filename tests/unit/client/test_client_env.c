/* test_client_env.c - client defaults from the environment
 * (stk_client_config_from_env, and stk_client_open / open_local using it):
 * the precedence of explicit fields over RANK/WORLD_SIZE over
 * OMPI_COMM_WORLD_* over SLURM_*, LOCAL_RANK for the CUDA ordinal, and a
 * clear STK_INVALID_ARGUMENT naming the variable for each bad value. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "stoker/client.h"

#define JOB                                                       \
  "source = synthetic\nnum_samples = 64\nheight = 8\nwidth = 8\n" \
  "batch_size = 4\nworld_size = 2\nepochs = 1\nseed = 7\n"

static const char *const vars[] = {"STOKER_COORDINATOR",
                                   "RANK",
                                   "WORLD_SIZE",
                                   "LOCAL_RANK",
                                   "OMPI_COMM_WORLD_RANK",
                                   "OMPI_COMM_WORLD_SIZE",
                                   "OMPI_COMM_WORLD_LOCAL_RANK",
                                   "SLURM_PROCID",
                                   "SLURM_NTASKS",
                                   "SLURM_LOCALID",
                                   "STOKER_WORKING_SET",
                                   "STOKER_NO_WORKER_TIMEOUT_MS"};

static void clear_env(void) {
  for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) unsetenv(vars[i]);
}

static char err[512];

/* Resolve a defaults() config with device dev; returns the status. */
static int resolve(stk_client_config *cfg, int32_t dev) {
  stk_client_config_defaults(cfg);
  cfg->device = dev;
  return stk_client_config_from_env(cfg, err, sizeof(err));
}

/* Bad environment: INVALID_ARGUMENT and the message names `want`. */
static int bad(int32_t dev, const char *want) {
  stk_client_config cfg;
  err[0] = 0;
  int st = resolve(&cfg, dev);
  if (st != STK_INVALID_ARGUMENT || !strstr(err, want)) {
    fprintf(stderr, "want INVALID_ARGUMENT naming '%s', got %d '%s'\n", want, st, err);
    return 0;
  }
  return 1;
}

int main(void) {
  stk_client_config cfg;
  clear_env();

  /* Defaults are "not given"; with no environment: rank 0 of 1, device 0. */
  stk_client_config_defaults(&cfg);
  CHECK(cfg.rank == STK_RANK_FROM_ENV && cfg.world_size == STK_WORLD_SIZE_FROM_ENV);
  CHECK(cfg.cuda_device == STK_CUDA_DEVICE_FROM_ENV && cfg.coordinator == NULL);
  CHECK(resolve(&cfg, STK_DEVICE_CUDA) == STK_OK);
  CHECK(cfg.rank == 0 && cfg.world_size == 1 && cfg.cuda_device == 0);
  CHECK(cfg.coordinator == NULL);
  CHECK(stk_client_config_from_env(NULL, err, sizeof(err)) == STK_INVALID_ARGUMENT);

  /* Coordinator: env when not given, explicit wins, "" counts as not given. */
  setenv("STOKER_COORDINATOR", "algo-1:7000", 1);
  CHECK(resolve(&cfg, STK_DEVICE_CPU) == STK_OK);
  CHECK(cfg.coordinator && !strcmp(cfg.coordinator, "algo-1:7000"));
  stk_client_config_defaults(&cfg);
  cfg.coordinator = "10.0.0.1:9";
  CHECK(stk_client_config_from_env(&cfg, err, sizeof(err)) == STK_OK);
  CHECK(!strcmp(cfg.coordinator, "10.0.0.1:9"));
  stk_client_config_defaults(&cfg);
  cfg.coordinator = "";
  CHECK(stk_client_config_from_env(&cfg, err, sizeof(err)) == STK_OK);
  CHECK(!strcmp(cfg.coordinator, "algo-1:7000"));

  /* Families in order: RANK/WORLD_SIZE, OMPI_COMM_WORLD_*, SLURM_*. */
  setenv("SLURM_PROCID", "1", 1), setenv("SLURM_NTASKS", "2", 1);
  setenv("SLURM_LOCALID", "1", 1);
  CHECK(resolve(&cfg, STK_DEVICE_CUDA) == STK_OK);
  CHECK(cfg.rank == 1 && cfg.world_size == 2 && cfg.cuda_device == 1);
  setenv("OMPI_COMM_WORLD_RANK", "5", 1), setenv("OMPI_COMM_WORLD_SIZE", "8", 1);
  CHECK(resolve(&cfg, STK_DEVICE_CUDA) == STK_OK);
  CHECK(cfg.rank == 5 && cfg.world_size == 8 && cfg.cuda_device == 0);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "3", 1);
  CHECK(resolve(&cfg, STK_DEVICE_CUDA) == STK_OK);
  CHECK(cfg.cuda_device == 3);
  setenv("RANK", "3", 1), setenv("WORLD_SIZE", "4", 1);
  CHECK(resolve(&cfg, STK_DEVICE_CUDA) == STK_OK);
  CHECK(cfg.rank == 3 && cfg.world_size == 4 && cfg.cuda_device == 0);
  setenv("LOCAL_RANK", "2", 1);
  CHECK(resolve(&cfg, STK_DEVICE_CUDA) == STK_OK);
  CHECK(cfg.cuda_device == 2);

  /* Explicit fields win, each on its own. */
  stk_client_config_defaults(&cfg);
  cfg.rank = 1, cfg.device = STK_DEVICE_CUDA, cfg.cuda_device = 0;
  CHECK(stk_client_config_from_env(&cfg, err, sizeof(err)) == STK_OK);
  CHECK(cfg.rank == 1 && cfg.world_size == 4 && cfg.cuda_device == 0);
  stk_client_config_defaults(&cfg);
  cfg.world_size = 16;
  CHECK(stk_client_config_from_env(&cfg, err, sizeof(err)) == STK_OK);
  CHECK(cfg.rank == 3 && cfg.world_size == 16);
  stk_client_config_defaults(&cfg);
  cfg.rank = 0, cfg.world_size = 1;
  setenv("RANK", "junk", 1); /* not read: both given */
  CHECK(stk_client_config_from_env(&cfg, err, sizeof(err)) == STK_OK);
  CHECK(cfg.rank == 0 && cfg.world_size == 1);
  /* A CPU client never reads LOCAL_RANK. */
  setenv("RANK", "3", 1), setenv("LOCAL_RANK", "x", 1);
  CHECK(resolve(&cfg, STK_DEVICE_CPU) == STK_OK);
  CHECK(cfg.cuda_device == 0);

  /* Each bad value is INVALID_ARGUMENT naming the variable. */
  CHECK(bad(STK_DEVICE_CUDA, "LOCAL_RANK"));
  setenv("LOCAL_RANK", "-1", 1);
  CHECK(bad(STK_DEVICE_CUDA, "LOCAL_RANK"));
  unsetenv("LOCAL_RANK");
  const char *bad_numbers[] = {"abc", "-1",          "",          " 1", "1 ", "+2",
                               "0x1", "99999999999", "4294967295"};
  for (size_t i = 0; i < sizeof(bad_numbers) / sizeof(bad_numbers[0]); i++) {
    setenv("RANK", bad_numbers[i], 1);
    CHECK(bad(STK_DEVICE_CPU, "RANK"));
  }
  setenv("RANK", "3", 1);
  setenv("WORLD_SIZE", "four", 1);
  CHECK(bad(STK_DEVICE_CPU, "WORLD_SIZE"));
  setenv("WORLD_SIZE", "0", 1);
  CHECK(bad(STK_DEVICE_CPU, "WORLD_SIZE=0"));
  setenv("WORLD_SIZE", "3", 1);
  CHECK(bad(STK_DEVICE_CPU, "rank 3 (RANK) must be < world size 3 (WORLD_SIZE)"));
  unsetenv("WORLD_SIZE");
  CHECK(bad(STK_DEVICE_CPU, "WORLD_SIZE is not set but RANK is"));
  setenv("WORLD_SIZE", "4", 1), unsetenv("RANK");
  CHECK(bad(STK_DEVICE_CPU, "RANK is not set but WORLD_SIZE is"));
  unsetenv("WORLD_SIZE");
  setenv("OMPI_COMM_WORLD_RANK", "8", 1);
  CHECK(bad(STK_DEVICE_CPU, "OMPI_COMM_WORLD_RANK"));
  unsetenv("OMPI_COMM_WORLD_RANK"), unsetenv("OMPI_COMM_WORLD_SIZE");
  setenv("SLURM_NTASKS", "x", 1);
  CHECK(bad(STK_DEVICE_CPU, "SLURM_NTASKS"));
  setenv("SLURM_NTASKS", "2", 1);
  setenv("SLURM_PROCID", "2", 1);
  CHECK(bad(STK_DEVICE_CPU, "SLURM_PROCID"));
  stk_client_config_defaults(&cfg); /* env rank vs an explicit world size */
  cfg.world_size = 2;
  CHECK(stk_client_config_from_env(&cfg, err, sizeof(err)) == STK_INVALID_ARGUMENT);
  CHECK(strstr(err, "SLURM_PROCID") && strstr(err, "cfg.world_size"));
  setenv("STOKER_COORDINATOR", "", 1);
  CHECK(bad(STK_DEVICE_CPU, "STOKER_COORDINATOR"));
  clear_env();

  /* The working set: env when not given (1..1024), explicit wins. */
  CHECK(resolve(&cfg, STK_DEVICE_CPU) == STK_OK && cfg.working_set == 0);
  setenv("STOKER_WORKING_SET", "12", 1);
  CHECK(resolve(&cfg, STK_DEVICE_CPU) == STK_OK && cfg.working_set == 12);
  stk_client_config_defaults(&cfg);
  cfg.working_set = 3;
  CHECK(stk_client_config_from_env(&cfg, err, sizeof(err)) == STK_OK);
  CHECK(cfg.working_set == 3);
  static const char *const bad_ws[] = {"0", "1025", "-1", "8x", ""};
  for (size_t i = 0; i < sizeof(bad_ws) / sizeof(bad_ws[0]); i++) {
    setenv("STOKER_WORKING_SET", bad_ws[i], 1);
    CHECK(bad(STK_DEVICE_CPU, "STOKER_WORKING_SET"));
  }
  clear_env();

  /* The no-worker limit: env when not given (>= 1 ms), explicit wins. */
  CHECK(resolve(&cfg, STK_DEVICE_CPU) == STK_OK && cfg.no_worker_timeout_ms == 0);
  setenv("STOKER_NO_WORKER_TIMEOUT_MS", "300000", 1);
  CHECK(resolve(&cfg, STK_DEVICE_CPU) == STK_OK && cfg.no_worker_timeout_ms == 300000);
  stk_client_config_defaults(&cfg);
  cfg.no_worker_timeout_ms = 5;
  CHECK(stk_client_config_from_env(&cfg, err, sizeof(err)) == STK_OK);
  CHECK(cfg.no_worker_timeout_ms == 5);
  static const char *const bad_nw[] = {"0", "-1", "5s", "", "99999999999"};
  for (size_t i = 0; i < sizeof(bad_nw) / sizeof(bad_nw[0]); i++) {
    setenv("STOKER_NO_WORKER_TIMEOUT_MS", bad_nw[i], 1);
    CHECK(bad(STK_DEVICE_CPU, "STOKER_NO_WORKER_TIMEOUT_MS"));
  }
  clear_env();

  /* A coordinator without its port is refused at once, naming it. */
  stk_client_config_defaults(&cfg);
  cfg.coordinator = "127.0.0.1";
  cfg.join_timeout_ms = 120000;
  {
    stk_client *nc = NULL;
    CHECK(stk_client_open(&cfg, &nc, err, sizeof(err)) == STK_INVALID_ARGUMENT);
    CHECK(nc == NULL && strstr(err, "has no port") != NULL);
    cfg.coordinator = "127.0.0.1:0";
    CHECK(stk_client_open(&cfg, &nc, err, sizeof(err)) == STK_INVALID_ARGUMENT);
    CHECK(nc == NULL && strstr(err, "has no port") != NULL);
  }

  /* Through the opens: the effective rank is the one the client uses. */
  stk_client *c = NULL;
  stk_client_config_defaults(&cfg);
  CHECK(stk_client_open(&cfg, &c, err, sizeof(err)) == STK_INVALID_ARGUMENT);
  CHECK(strstr(err, "STOKER_COORDINATOR") != NULL);
  setenv("STOKER_COORDINATOR", "127.0.0.1:1", 1);
  setenv("RANK", "seven", 1), setenv("WORLD_SIZE", "2", 1);
  CHECK(stk_client_open(&cfg, &c, err, sizeof(err)) == STK_INVALID_ARGUMENT);
  CHECK(c == NULL && strstr(err, "RANK") != NULL);
  setenv("RANK", "1", 1);
  CHECK(stk_client_open_local(&cfg, JOB, NULL, &c, err, sizeof(err)) == STK_OK);
  CHECK(cfg.rank == STK_RANK_FROM_ENV); /* the caller's cfg is not changed */
  unsigned char st[64];
  size_t len = sizeof(st);
  CHECK(c && stk_client_save_state(c, st, &len) == STK_OK);
  CHECK(len >= 24 && st[16] == 1 && st[20] == 2); /* rank 1 of 2 */
  stk_client_close(c);
  setenv("WORLD_SIZE", "3", 1); /* the job says 2 */
  CHECK(stk_client_open_local(&cfg, JOB, NULL, &c, err, sizeof(err)) ==
        STK_INVALID_ARGUMENT);
  clear_env();
  CHECK_DONE();
}
