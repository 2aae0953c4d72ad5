/* stoker_dataset.c - the `stoker-dataset` tool: `gen` writes a procedural
 * JPEG dataset in ImageFolder and/or tar-shard layout (demos, tests,
 * benchmarks); `index` builds the tar index cache of a shard directory so
 * workers start without scanning. A thin command line over gen.c and
 * stk_tar_index.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gen.h"
#include "stoker/augment.h"

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

int main(int argc, char **argv) {
  if (argc >= 2 && !strcmp(argv[1], "gen")) return cmd_gen(argc - 1, argv + 1);
  if (argc >= 2 && !strcmp(argv[1], "index")) return cmd_index(argc - 1, argv + 1);
  FILE *f = argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) ? stdout
                                                                                : stderr;
  fputs(
      "usage: stoker-dataset gen|index [--help]\n"
      "  gen    write a procedural JPEG dataset (ImageFolder and tar shards)\n"
      "  index  build the index cache of a tar shard directory\n",
      f);
  return f == stdout ? 0 : 2;
}
