/* test_client_ids.c - libstoker against a rogue coordinator (a small gRPC
 * server in this process speaking Join and WatchWorkers: fakecoord.h)
 * whose worker list breaks the shared id limit (rpc/wire_limits.h): an
 * id of 300 bytes and an address of 300 bytes. The client must not
 * truncate them into workers it would dial: both entries are refused, no worker is used,
 * and the client ends with STK_UNAVAILABLE saying why ("worker list entry refused: ...
 * (at most 255)") instead of hanging or crashing.
 *
 * usage: test_client_ids <stoker-coordinator> <stoker-worker> [...]
 *        (the binaries are not used: the coordinator is the test itself)
 */
#include <string.h>
#include <time.h>

#include "check.h"
#include "fakecoord.h"
#include "stoker/client.h"

static char long_id[301], long_addr[301];

int main(void) {
  memset(long_id, 'i', 300), long_id[300] = 0;
  memset(long_addr, 'a', 300), long_addr[300] = 0;
  stk_job_spec spec;
  stk_job_spec_defaults(&spec);
  CHECK(stk_job_spec_set(&spec, "num_samples", "64", NULL, 0) == STK_OK);
  CHECK(stk_job_spec_set(&spec, "batch_size", "4", NULL, 0) == STK_OK);
  CHECK(stk_job_spec_set(&spec, "world_size", "1", NULL, 0) == STK_OK);
  CHECK(stk_job_spec_set(&spec, "height", "8", NULL, 0) == STK_OK);
  CHECK(stk_job_spec_set(&spec, "width", "8", NULL, 0) == STK_OK);
  char job_text[4096];
  CHECK(stk_job_spec_format(&spec, job_text, sizeof(job_text)) < sizeof(job_text));
  fakecoord_set_job(job_text, stk_job_spec_hash(&spec));
  /* both entries, in Join and again in the watch's first list */
  const char *ids[] = {long_id, "short-id"}, *addrs[] = {"127.0.0.1:1", long_addr};
  fakecoord_publish(2, ids, addrs);
  fakecoord_resend_known(1);

  stk__rpc_init();
  stk__rpc_server *srv = NULL;
  int port = 0;
  char err[512];
  if (fakecoord_start(NULL, 0, &srv, &port, err, sizeof(err))) {
    fprintf(stderr, "rogue coordinator: %s\n", err);
    return 1;
  }
  char addr[64];
  snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
  stk_client_config cfg;
  stk_client_config_defaults(&cfg);
  cfg.coordinator = addr;
  cfg.rank = 0;
  cfg.world_size = 1;
  cfg.join_timeout_ms = 1500;
  stk_client *c = NULL;
  int st = stk_client_open(&cfg, &c, err, sizeof(err));
  if (st != STK_OK) {
    /* refusing at open would be as good, if it says why */
    printf("open: %d %s\n", st, err);
    CHECK(strstr(err, "at most 255") != NULL);
  } else {
    stk_batch *b = NULL;
    st = stk_client_next(c, &b);
    printf("next: status %d (%s): %s\n", st, stk_strerror(st), stk_client_error(c));
    CHECK(st == STK_UNAVAILABLE);
    CHECK(strstr(stk_client_error(c), "worker list entry refused") != NULL);
    CHECK(strstr(stk_client_error(c), "of 300 bytes (at most 255)") != NULL);
    stk_stats s;
    memset(&s, 0, sizeof(s));
    stk_client_stats(c, &s);
    CHECK(s.nworkers == 0); /* nothing truncated into a worker entry */
    stk_client_close(c);
  }
  stk__rpc_server_stop(srv, 500);
  stk__rpc_shutdown();
  CHECK_DONE();
}
