/* bench_tokens.c - `stoker-bench tokens`: single-thread token batches/s
 * and payload GB/s of the megatron source (source = megatron) for
 * seq_len 2048 and batch 8 by default, over a synthetic Megatron corpus
 * (uint16 tokens, written to a temporary directory with the tokens tool,
 * so it sits in the page cache), for two layouts: tokens + labels (+
 * index), and all four tensors (tokens, labels, loss_mask with eod
 * masking, position_ids reset at eod). Baseline in the same run: memcpy
 * of the same number of token bytes from the mapped .bin into a batch
 * buffer (what any reader pays to move the data once). Rates are per CPU
 * second of the building thread (the machine is shared); wall-clock rates
 * in brackets. The first build of an epoch pays its document prefix sums,
 * timed apart.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench_util.h"
#include "stoker/augment.h"
#include "tokens.h"

static const char *help =
    "usage: stoker-bench tokens [--seq-len S] [--batch B] [--docs N] [--seconds T]\n"
    "                           [--token-dtype int32|int64]\n"
    "Builds token batches of a source = megatron job on one thread over a\n"
    "synthetic corpus of N documents (default 20000, 1..2048 uint16 tokens\n"
    "each, vocab 50257) for about T seconds per layout (default 3), and\n"
    "prints batches/s, tokens/s and GB/s of batch payload, with a memcpy\n"
    "baseline. Defaults: seq_len 2048, batch 8, int64.\n";

typedef struct result {
  double batches_per_s, wall_batches_per_s, first_build_ms;
  uint64_t payload;
} result;

static int run(const char *root, const stk_job_spec *spec, double seconds, result *res) {
  char err[512];
  stk_dataset *ds = NULL;
  stk_builder *b = NULL;
  int rc = stk_dataset_open(spec, root, NULL, &ds, err, sizeof(err));
  if (!rc) rc = stk_builder_create(ds, spec, &b, err, sizeof(err));
  if (rc) {
    fprintf(stderr, "stoker-bench tokens: %s\n", err);
    stk_dataset_close(ds);
    return rc;
  }
  stk_job_spec s = *spec;
  s.num_samples = stk_dataset_size(ds);
  stk_batch_layout L;
  stk_batch_layout_of(&s, &L);
  unsigned char *buf = malloc(L.total_bytes);
  uint64_t steps = stk_steps_per_epoch(&s, s.num_samples), n = 0;
  double c0 = bu_thread_cpu_s();
  rc = stk_builder_build(b, 0, 0, 0, buf, L.total_bytes, NULL);
  res->first_build_ms = (bu_thread_cpu_s() - c0) * 1e3;
  double t0 = bu_thread_cpu_s(), w0 = bu_now_s();
  while (!rc && bu_thread_cpu_s() - t0 < seconds) {
    for (int k = 0; k < 16 && !rc; k++, n++)
      rc = stk_builder_build(b, 0, 0, steps > 1 ? 1 + n % (steps - 1) : 0, buf,
                             L.total_bytes, NULL);
  }
  double dt = bu_thread_cpu_s() - t0, dw = bu_now_s() - w0;
  if (rc) fprintf(stderr, "stoker-bench tokens: build: %s\n", stk_builder_error(b));
  res->batches_per_s = n / dt;
  res->wall_batches_per_s = n / dw;
  res->payload = L.total_bytes;
  free(buf);
  stk_builder_destroy(b);
  stk_dataset_close(ds);
  return rc;
}

/* memcpy of B windows of seq_len + 1 uint16 tokens from the mapped .bin. */
static double baseline(const char *bin, uint64_t B, uint64_t S, double seconds) {
  FILE *f = fopen(bin, "rb");
  struct stat st;
  if (!f || fstat(fileno(f), &st)) return 0;
  size_t len = (size_t)st.st_size;
  unsigned char *m = mmap(NULL, len, PROT_READ, MAP_SHARED, fileno(f), 0);
  fclose(f);
  if (m == MAP_FAILED) return 0;
  size_t win = (S + 1) * 2, n = 0;
  unsigned char *dst = malloc(win * B);
  double t0 = bu_thread_cpu_s();
  uint64_t x = 88172645463325252ull;
  while (bu_thread_cpu_s() - t0 < seconds) {
    for (uint64_t j = 0; j < B; j++, n++) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      memcpy(dst + j * win, m + (x % ((len - win) / 2)) * 2, win);
    }
  }
  double dt = bu_thread_cpu_s() - t0;
  volatile unsigned char sink = dst[0];
  (void)sink;
  free(dst);
  munmap(m, len);
  return (double)n / B / dt; /* "batches" of B windows per second */
}

int bench_tokens_main(int argc, char **argv) {
  unsigned long long S = 2048, B = 8, docs = 20000;
  double seconds = 3;
  int dtype = STK_DTYPE_INT64;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      fputs(help, stdout);
      return 0;
    }
    if (!v) goto usage;
    i++;
    if (!strcmp(a, "--seq-len")) S = strtoull(v, NULL, 10);
    else if (!strcmp(a, "--batch")) B = strtoull(v, NULL, 10);
    else if (!strcmp(a, "--docs")) docs = strtoull(v, NULL, 10);
    else if (!strcmp(a, "--seconds")) seconds = atof(v);
    else if (!strcmp(a, "--token-dtype") && (stk_dtype_from_name(v) == STK_DTYPE_INT32 ||
                                             stk_dtype_from_name(v) == STK_DTYPE_INT64))
      dtype = stk_dtype_from_name(v);
    else goto usage;
  }
  if (!S || !B || !docs || S > (1u << 20) || B > 65536 || !(seconds > 0)) goto usage;
  char root[] = "/tmp/stoker-bench-tokens-XXXXXX", prefix[64], bin[80];
  if (!mkdtemp(root)) return perror("mkdtemp"), 1;
  snprintf(prefix, sizeof(prefix), "%s/corpus", root);
  stk__tokens_opts o = {0};
  o.out = prefix, o.synthetic = docs, o.code = stk__tokens_code("uint16");
  o.vocab = 50257, o.eod = 0, o.min_len = 1, o.max_len = 2048, o.seed = 1;
  char err[512];
  uint64_t nd, nt;
  if (stk__tokens_write(&o, &nd, &nt, err, sizeof(err))) {
    fprintf(stderr, "stoker-bench tokens: %s\n", err);
    return 1;
  }
  stk_job_spec spec;
  stk_job_spec_defaults(&spec);
  spec.source = STK_SOURCE_MEGATRON;
  snprintf(spec.dataset, sizeof(spec.dataset), "corpus");
  spec.seq_len = (uint32_t)S, spec.batch_size = (uint32_t)B;
  spec.token_dtype = dtype;
  spec.eod_token = 0;
  result r1, r2;
  int rc = run(root, &spec, seconds, &r1);
  spec.loss_mask = spec.position_ids = spec.eod_mask_loss = spec.reset_position_ids = 1;
  if (!rc) rc = run(root, &spec, seconds, &r2);
  snprintf(bin, sizeof(bin), "%s.bin", prefix);
  double base = rc ? 0 : baseline(bin, B, S, seconds);
  unlink(bin);
  snprintf(bin, sizeof(bin), "%s.idx", prefix);
  unlink(bin);
  rmdir(root);
  if (rc) return 1;
  printf(
      "stoker-bench tokens: %llu documents, %llu uint16 tokens (%.0f MB), seq_len %llu, "
      "batch %llu, token_dtype %s, one thread\n",
      (unsigned long long)nd, (unsigned long long)nt, nt * 2 / 1e6, S, B,
      stk_dtype_name(dtype));
  printf("per CPU second of one thread (wall-clock rate in brackets)\n");
  const result *rs[2] = {&r1, &r2};
  const char *names[2] = {"tokens+labels+index            ",
                          "tokens+labels+loss_mask+pos_ids"};
  for (int k = 0; k < 2; k++)
    printf(
        "  %s: %9.0f batches/s (%.0f), %6.2f Mtokens/s, %6.2f GB/s of payload "
        "(%llu B/batch); first build of the epoch %.1f ms (prefix sums)\n",
        names[k], rs[k]->batches_per_s, rs[k]->wall_batches_per_s,
        rs[k]->batches_per_s * B * S / 1e6, rs[k]->batches_per_s * rs[k]->payload / 1e9,
        (unsigned long long)rs[k]->payload, rs[k]->first_build_ms);
  printf(
      "  baseline memcpy of the same windows from the mapped .bin: %9.0f batches/s, "
      "%.2f GB/s of uint16 tokens\n",
      base, base * B * (S + 1) * 2 / 1e9);
  return 0;
usage:
  fputs(help, stderr);
  return 2;
}
