/* test_tokens_kill.c - a token job (source = megatron) end to end under a
 * worker kill: two synthetic Megatron corpora made by stoker-dataset,
 * blended 0.7/0.3, seq_len 32, int32 tokens with loss_mask and reset
 * position_ids (four tensors, so no index tensor: the worker takes the
 * sample ids from the addressing), drop_last = false (padded samples with
 * loss_mask 0), two epochs, a coordinator, one worker and two ranks on
 * 127.0.0.1. Once both ranks are well into the job the worker is stopped,
 * then killed once each rank has a request it can never answer, and a
 * replacement starts (the same steps as test_worker_kill.c, whose waits
 * on the clients' own counters make it independent of timing). Both ranks
 * must receive every step exactly once, in order, byte-identical to
 * stk_build_reference; the replacement serves what the victim held.
 *
 * usage: test_tokens_kill <stoker-coordinator> <stoker-worker> <stoker-dataset>
 */
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "daemon_util.h"
#include "e2e_util.h"

int main(int argc, char **argv) {
  if (du_init(argc, argv)) return 2;
  if (argc < 4) {
    fprintf(stderr, "usage: %s <coordinator> <worker> <stoker-dataset>\n", argv[0]);
    return 2;
  }
  char root[600], pa[700], pb[700];
  snprintf(root, sizeof root, "%s/data", proc_tmpdir());
  mkdir(root, 0700);
  snprintf(pa, sizeof pa, "%s/a", root);
  snprintf(pb, sizeof pb, "%s/b", root);
  char *gen_a[] = {argv[3],  "tokens",  "--synthetic", "400",       "--out",
                   pa,       "--dtype", "uint16",      "--max-len", "120",
                   "--seed", "1",       NULL};
  char *gen_b[] = {argv[3], "tokens",    "--synthetic", "300",    "--out", pb,  "--dtype",
                   "int32", "--max-len", "60",          "--seed", "2",     NULL};
  stk_proc g;
  CHECK(proc_spawn(&g, "gen_a", gen_a) == 0 && proc_wait(&g, 60000) == 0);
  CHECK(proc_spawn(&g, "gen_b", gen_b) == 0 && proc_wait(&g, 60000) == 0);
  const char *job[] = {"--set", "source=megatron",
                       "--set", "dataset=a:0.7, b:0.3",
                       "--set", "seq_len=32",
                       "--set", "batch_size=8",
                       "--set", "world_size=2",
                       "--set", "epochs=2",
                       "--set", "drop_last=false",
                       "--set", "token_dtype=int32",
                       "--set", "loss_mask=true",
                       "--set", "position_ids=true",
                       "--set", "eod_token=0",
                       "--set", "eod_mask_loss=true",
                       "--set", "reset_position_ids=true",
                       "--set", "seed=5",
                       NULL};
  /* the steps each rank must get: from the dataset itself */
  stk_job_spec spec;
  stk_job_spec_defaults(&spec);
  char err[512];
  for (int i = 0; job[i]; i += 2) {
    char kv[128];
    snprintf(kv, sizeof kv, "%s", job[i + 1]);
    char *eq = strchr(kv, '=');
    *eq = 0;
    CHECK(stk_job_spec_set(&spec, kv, eq + 1, err, sizeof err) == STK_OK);
  }
  stk_dataset *ds = NULL;
  CHECK(stk_dataset_open(&spec, root, NULL, &ds, err, sizeof err) == STK_OK);
  if (!ds) {
    fprintf(stderr, "%s\n", err);
    CHECK_DONE();
  }
  uint64_t want = 2 * stk_steps_per_epoch(&spec, stk_dataset_size(ds));
  stk_dataset_close(ds);
  fprintf(stderr, "token job: %llu batches per rank\n", (unsigned long long)want);
  stk_proc p[3];
  memset(p, 0, sizeof(p));
  int port = du_start_coordinator(&p[0], "coordinator", job);
  CHECK(port > 0);
  if (port <= 0) CHECK_DONE();
  const char *wargs[] = {"--threads", "1", "--data-root", root, NULL};
  int vport = du_start_worker(&p[1], "victim", port, wargs);
  CHECK(vport > 0);
  stk__rpc_channel *ch = du_channel(port);
  CHECK(du_wait_workers(ch, 1, 10000) == 0);
  if (check_failures) CHECK_DONE();

  rank_run r[2];
  pthread_t t[2];
  for (uint32_t i = 0; i < 2; i++) {
    rank_init(&r[i]);
    r[i].port = port, r[i].rank = i, r[i].world = 2, r[i].finish = 1;
    r[i].prefetch = 6;
    r[i].data_root = root;
    r[i].step_ms = 2;
    pthread_create(&t[i], NULL, rank_main, &r[i]);
  }

  /* 1. Both ranks well into the epoch (bounded: 60 s). */
  int ready = 0;
  for (int i = 0; i < 12000 && !ready; i++) {
    ready = __atomic_load_n(&r[0].progress, __ATOMIC_ACQUIRE) >= 10 &&
            __atomic_load_n(&r[1].progress, __ATOMIC_ACQUIRE) >= 10;
    if (!ready) stk__sleep_ms(5);
  }
  CHECK(ready);

  /* 2. Stop the victim and wait until the kernel says it is stopped. */
  proc_signal(&p[1], SIGSTOP);
  int wst = 0;
  CHECK(waitpid(p[1].pid, &wst, WUNTRACED) == p[1].pid && WIFSTOPPED(wst));
  int64_t base[2];
  uint64_t reissued = 0;
  for (int i = 0; i < 2; i++) base[i] = victim_sent(&r[i], vport, &reissued);
  fprintf(stderr, "victim stopped at rank0=%d rank1=%d batches\n",
          __atomic_load_n(&r[0].progress, __ATOMIC_ACQUIRE),
          __atomic_load_n(&r[1].progress, __ATOMIC_ACQUIRE));

  /* 3. Until each rank has a request the stopped victim can never answer
   *    (sent after the stop), or has already moved some elsewhere. */
  int stuck[2] = {0, 0};
  for (int i = 0; i < 6000 && !(stuck[0] && stuck[1]); i++) {
    for (int k = 0; k < 2; k++) {
      int64_t now = victim_sent(&r[k], vport, &reissued);
      if (base[k] < 0) base[k] = now;
      if ((base[k] >= 0 && now > base[k]) || reissued > 0) stuck[k] = 1;
    }
    if (!(stuck[0] && stuck[1])) stk__sleep_ms(5);
  }
  CHECK(stuck[0] && stuck[1]);

  /* 4. Kill it; a replacement registers and takes over. */
  proc_signal(&p[1], SIGKILL);
  CHECK(proc_wait(&p[1], 5000) == 128 + SIGKILL);
  int rport = du_start_worker(&p[2], "replacement", port, wargs);
  CHECK(rport > 0);
  stk__rpc_channel_close(ch);

  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < 2; i++) {
    if (r[i].error[0]) fprintf(stderr, "rank %d: %s\n", i, r[i].error);
    CHECK(r[i].final_status == STK_END_OF_DATA);
    CHECK_EQ_U64(r[i].delivered, want);
    CHECK_EQ_U64(r[i].mismatches, 0);
    CHECK_EQ_U64(r[i].order_errors, 0);
    /* the victim held requests when it died: they moved */
    CHECK(r[i].stats.reissued > 0);
    int ri = worker_index(&r[i].stats, rport);
    uint64_t by_replacement = ri >= 0 ? r[i].stats.workers[ri].batches : 0;
    int vi = worker_index(&r[i].stats, vport);
    uint64_t by_victim = vi >= 0 ? r[i].stats.workers[vi].batches : 0;
    /* what the victim could not answer, the replacement built */
    CHECK(by_replacement > 0);
    CHECK_EQ_U64(by_victim + by_replacement, want);
    fprintf(stderr,
            "rank %d: %llu batches (victim %llu, replacement %llu), reissued %llu, "
            "duplicates %llu\n",
            i, (unsigned long long)r[i].delivered, (unsigned long long)by_victim,
            (unsigned long long)by_replacement, (unsigned long long)r[i].stats.reissued,
            (unsigned long long)r[i].stats.duplicates);
  }
  /* every rank finished: the job ends and both live daemons exit 0 */
  int codes[3] = {proc_wait(&p[0], 15000), 0, proc_wait(&p[2], 15000)};
  for (int i = 0; i < 3; i += 2) {
    if (codes[i] != 0) fprintf(stderr, "%s: exit %d\n", p[i].name, codes[i]);
    CHECK(codes[i] == 0);
  }
  for (int i = 0; i < 2; i++) pthread_mutex_destroy(&r[i].mu);
  if (check_failures) {
    for (int i = 0; i < 3; i++) proc_dump_log(&p[i]);
    proc_keep_tmp();
  }
  CHECK_DONE();
}
