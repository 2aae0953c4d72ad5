/* stoker_dataset.c - the `stoker-dataset` tool: `gen` writes a procedural
 * JPEG dataset in ImageFolder and/or tar-shard layout (demos, tests,
 * benchmarks); `index` builds the tar index cache of a shard directory so
 * workers start without scanning; `tokens`, `tokens-check` and
 * `tokens-dump` write, check and read back Megatron .bin/.idx token
 * datasets; `prepare` transcodes an ImageFolder's JPEGs losslessly with
 * restart markers. A thin command line over gen.c, tokens.c, prepare.c and
 * stk_tar_index.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gen.h"
#include "prepare.h"
#include "stoker/augment.h"
#include "tokens.h"

static const char *gen_help =
    "usage: stoker-dataset gen --out DIR --count N [--seed S] [--classes K]\n"
    "                          [--layout imagefolder|tar|both] [--per-shard M]\n"
    "                          [--min-side PX] [--max-side PX]\n"
    "Writes N procedural JPEGs (class-dependent content, ImageNet-like sizes,\n"
    "some progressive, some grayscale) as DIR/imagefolder/classNNN/*.jpg\n"
    "and/or DIR/shards/shard-NNNNNN.tar (<key>.jpg + <key>.cls members).\n"
    "Defaults: seed 0, 10 classes, both layouts, 1000 samples per shard,\n"
    "longer side 250..600 px.\n";
static const char *index_help =
    "usage: stoker-dataset index DIR\n"
    "Builds DIR/.stoker-index, the sample index of the *.tar shards in DIR\n"
    "(workers rebuild it themselves when it is missing or stale).\n";

static const char *prepare_help =
    "usage: stoker-dataset prepare SRC DST [--interval N] [--threads T]\n"
    "Copies the ImageFolder or tar-shard dataset SRC to DST with every JPEG\n"
    "(files, and .jpg members of *.tar shards) transcoded\n"
    "losslessly (same DCT coefficients; progressive files become sequential)\n"
    "with restart markers every N MCUs, the largest N <= 8 (--interval: the\n"
    "most) dividing the MCUs per row, else every MCU (a prime row, say), so\n"
    "workers decode only the part of a file a crop needs. Each output is\n"
    "checked to decode to its input's pixels; other files are copied\n"
    "unchanged. Outputs that exist and check out are kept, so an interrupted\n"
    "run resumes. T threads (default 2).\n";

static int parse_u64(const char *s, unsigned long long *v) {
  char *end;
  if (!s || !*s) return -1;
  *v = strtoull(s, &end, 0);
  return *end ? -1 : 0;
}

static int cmd_gen(int argc, char **argv) {
  stk__gen_opts o = {0};
  o.classes = 10, o.imagefolder = o.tar = 1;
  unsigned long long v;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      fputs(gen_help, stdout);
      return 0;
    }
    if (!val) goto usage;
    i++;
    if (!strcmp(a, "--out")) o.out = val;
    else if (!strcmp(a, "--count") && !parse_u64(val, &v)) o.count = v;
    else if (!strcmp(a, "--seed") && !parse_u64(val, &v)) o.seed = v;
    else if (!strcmp(a, "--classes") && !parse_u64(val, &v) && v && v <= 100000)
      o.classes = (uint32_t)v;
    else if (!strcmp(a, "--per-shard") && !parse_u64(val, &v) && v && v < (1ull << 31))
      o.per_shard = (uint32_t)v;
    else if (!strcmp(a, "--min-side") && !parse_u64(val, &v) && v >= 8 && v <= 8192)
      o.min_side = (uint32_t)v;
    else if (!strcmp(a, "--max-side") && !parse_u64(val, &v) && v >= 8 && v <= 8192)
      o.max_side = (uint32_t)v;
    else if (!strcmp(a, "--layout")) {
      o.imagefolder = !strcmp(val, "imagefolder") || !strcmp(val, "both");
      o.tar = !strcmp(val, "tar") || !strcmp(val, "both");
      if (!o.imagefolder && !o.tar) goto usage;
    } else goto usage;
  }
  if (!o.out || !o.count) goto usage;
  char err[512];
  if (stk__gen_dataset(&o, err, sizeof(err))) {
    fprintf(stderr, "stoker-dataset gen: %s\n", err);
    return 1;
  }
  if (o.tar) {
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/shards", o.out);
    if (stk_tar_index(dir, err, sizeof(err)) != STK_OK) {
      fprintf(stderr, "stoker-dataset gen: index: %s\n", err);
      return 1;
    }
  }
  printf("wrote %llu samples in %u classes under %s\n", (unsigned long long)o.count,
         o.classes, o.out);
  return 0;
usage:
  fputs(gen_help, stderr);
  return 2;
}

static int cmd_prepare(int argc, char **argv) {
  const char *src = NULL, *dst = NULL;
  unsigned long long interval = 8, threads = 2;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      fputs(prepare_help, stdout);
      return 0;
    }
    if (!strcmp(a, "--interval")) {
      if (!val || parse_u64(val, &interval) || !interval || interval > 64) goto usage;
      i++;
    } else if (!strcmp(a, "--threads")) {
      if (!val || parse_u64(val, &threads) || !threads || threads > 256) goto usage;
      i++;
    } else if (!src) src = a;
    else if (!dst) dst = a;
    else goto usage;
  }
  if (!src || !dst) goto usage;
  return stk__prepare_dir(src, dst, (unsigned)interval, (unsigned)threads) ? 1 : 0;
usage:
  fputs(prepare_help, stderr);
  return 2;
}

static int cmd_index(int argc, char **argv) {
  if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
    fputs(index_help, stdout);
    return 0;
  }
  if (argc != 2) {
    fputs(index_help, stderr);
    return 2;
  }
  char err[512];
  int rc = stk_tar_index(argv[1], err, sizeof(err));
  if (rc != STK_OK) {
    fprintf(stderr, "stoker-dataset index: %s (%s)\n", err, stk_strerror(rc));
    return 1;
  }
  return 0;
}

static const char *tokens_help =
    "usage: stoker-dataset tokens --out PREFIX (--in FILE | --synthetic N)\n"
    "                             [--dtype uint16] [--seed S] [--vocab V]\n"
    "                             [--eod ID|none] [--min-len A] [--max-len B]\n"
    "Writes a Megatron-LM/NeMo indexed dataset PREFIX.bin + PREFIX.idx (one\n"
    "document per sequence). --in: a text file (- = stdin) of pre-tokenized\n"
    "documents, one a line of integers separated by spaces or commas.\n"
    "--synthetic N: N documents of A..B random tokens in [0, V), each ended\n"
    "by the eod token, the same for the same seed. dtype: uint8 int8 int16\n"
    "int32 int64 uint16. Defaults: uint16, seed 0, vocab 50257, eod 0,\n"
    "lengths 1..1024.\n";
static const char *check_help =
    "usage: stoker-dataset tokens-check PREFIX\n"
    "Checks PREFIX.idx against PREFIX.bin with the worker's parser and prints\n"
    "its dtype code, sequence, document and token counts.\n";
static const char *dump_help =
    "usage: stoker-dataset tokens-dump --job FILE --data-root DIR [--epoch E]\n"
    "Prints every sample of epoch E (default 0) of a source = megatron job as\n"
    "a worker builds it, with each prefix's document order (tools/README.md).\n";

static int cmd_tokens(int argc, char **argv) {
  stk__tokens_opts o = {0};
  o.code = stk__tokens_code("uint16");
  o.vocab = 50257, o.eod = 0, o.min_len = 1, o.max_len = 1024;
  unsigned long long v;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      fputs(tokens_help, stdout);
      return 0;
    }
    if (!val) goto usage;
    i++;
    if (!strcmp(a, "--out")) o.out = val;
    else if (!strcmp(a, "--in")) o.in = val;
    else if (!strcmp(a, "--synthetic") && !parse_u64(val, &v) && v) o.synthetic = v;
    else if (!strcmp(a, "--dtype") && stk__tokens_code(val))
      o.code = stk__tokens_code(val);
    else if (!strcmp(a, "--seed") && !parse_u64(val, &v)) o.seed = v;
    else if (!strcmp(a, "--vocab") && !parse_u64(val, &v) && v) o.vocab = v;
    else if (!strcmp(a, "--eod") && !strcmp(val, "none")) o.eod = -1;
    else if (!strcmp(a, "--eod") && !parse_u64(val, &v) && v < (1ull << 62))
      o.eod = (int64_t)v;
    else if (!strcmp(a, "--min-len") && !parse_u64(val, &v)) o.min_len = v;
    else if (!strcmp(a, "--max-len") && !parse_u64(val, &v)) o.max_len = v;
    else goto usage;
  }
  if (!o.out || (!o.in == !o.synthetic)) goto usage;
  char err[512];
  uint64_t docs = 0, tokens = 0;
  if (stk__tokens_write(&o, &docs, &tokens, err, sizeof(err))) {
    fprintf(stderr, "stoker-dataset tokens: %s\n", err);
    return 1;
  }
  printf("wrote %llu documents, %llu tokens to %s.bin and %s.idx\n",
         (unsigned long long)docs, (unsigned long long)tokens, o.out, o.out);
  return 0;
usage:
  fputs(tokens_help, stderr);
  return 2;
}

static int cmd_tokens_check(int argc, char **argv) {
  if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
    fputs(check_help, stdout);
    return 0;
  }
  if (argc != 2) {
    fputs(check_help, stderr);
    return 2;
  }
  char err[512];
  if (stk__tokens_check(argv[1], stdout, err, sizeof(err))) {
    fprintf(stderr, "stoker-dataset tokens-check: %s\n", err);
    return 1;
  }
  return 0;
}

static int cmd_tokens_dump(int argc, char **argv) {
  const char *job = NULL, *root = NULL;
  unsigned long long epoch = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      fputs(dump_help, stdout);
      return 0;
    }
    if (!val) goto usage;
    i++;
    if (!strcmp(a, "--job")) job = val;
    else if (!strcmp(a, "--data-root")) root = val;
    else if (!strcmp(a, "--epoch") && !parse_u64(val, &epoch)) {
    } else goto usage;
  }
  if (!job || !root) goto usage;
  char err[512];
  stk_job_spec spec;
  stk_job_spec_defaults(&spec);
  int rc = stk_job_spec_load(&spec, job, err, sizeof(err));
  if (!rc && spec.source != STK_SOURCE_MEGATRON) {
    snprintf(err, sizeof(err), "%s is not a source = megatron job", job);
    rc = STK_INVALID_ARGUMENT;
  }
  if (!rc) rc = stk__tokens_dump(&spec, root, epoch, stdout, err, sizeof(err));
  if (rc) {
    fprintf(stderr, "stoker-dataset tokens-dump: %s (%s)\n", err, stk_strerror(rc));
    return 1;
  }
  return 0;
usage:
  fputs(dump_help, stderr);
  return 2;
}

int main(int argc, char **argv) {
  if (argc >= 2 && !strcmp(argv[1], "gen")) return cmd_gen(argc - 1, argv + 1);
  if (argc >= 2 && !strcmp(argv[1], "prepare")) return cmd_prepare(argc - 1, argv + 1);
  if (argc >= 2 && !strcmp(argv[1], "index")) return cmd_index(argc - 1, argv + 1);
  if (argc >= 2 && !strcmp(argv[1], "tokens")) return cmd_tokens(argc - 1, argv + 1);
  if (argc >= 2 && !strcmp(argv[1], "tokens-check"))
    return cmd_tokens_check(argc - 1, argv + 1);
  if (argc >= 2 && !strcmp(argv[1], "tokens-dump"))
    return cmd_tokens_dump(argc - 1, argv + 1);
  FILE *f = argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) ? stdout
                                                                                : stderr;
  fputs(
      "usage: stoker-dataset gen|index|prepare|tokens|tokens-check|tokens-dump [--help]\n"
      "  gen           write a procedural JPEG dataset (ImageFolder and tar shards)\n"
      "  index         build the index cache of a tar shard directory\n"
      "  prepare       copy a dataset with restart markers in its JPEGs (lossless)\n"
      "  tokens        write a Megatron .bin/.idx token dataset (text or synthetic)\n"
      "  tokens-check  check a .bin/.idx pair with the worker's parser\n"
      "  tokens-dump   print the samples of a token job as a worker builds them\n",
      f);
  return f == stdout ? 0 : 2;
}
