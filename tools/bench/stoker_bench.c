/* stoker_bench.c - `stoker-bench`, one binary for the in-tree benchmarks:
 * a table of subcommands {name, main, help}. Each subcommand prints its
 * figures and a baseline measured in the same run. */
#include <stdio.h>
#include <string.h>

int bench_augment_main(int argc, char **argv);
int bench_transport_main(int argc, char **argv);
int bench_tokens_main(int argc, char **argv);
int bench_decode_main(int argc, char **argv);

static const struct {
  const char *name;
  int (*main)(int argc, char **argv);
  const char *help;
} commands[] = {
    {"augment", bench_augment_main,
     "RandomResizedCrop(224)+flip+Normalize images/s vs full decode and torchvision;\n"
     "                --recipes: the recipe chains vs torchvision; --pyop: a python op "
     "vs C"},
    {"transport", bench_transport_main,
     "worker -> client batch stream GB/s and CPU s/GB vs one raw TCP stream"},
    {"tokens", bench_tokens_main,
     "source = megatron token batches/s and GB/s (seq_len 2048, batch 8) vs memcpy"},
    {"decode-modes", bench_decode_main,
     "JPEG decode to RGB vs to planar YCbCr: the cost of upsampling + colour"},
};

static int usage(FILE *f) {
  fprintf(f, "usage: stoker-bench COMMAND [ARGS] (COMMAND --help for its options)\n");
  for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
    fprintf(f, "  %-13s %s\n", commands[i].name, commands[i].help);
  return f == stdout ? 0 : 2;
}

int main(int argc, char **argv) {
  if (argc < 2) return usage(stderr);
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) return usage(stdout);
  for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
    if (!strcmp(argv[1], commands[i].name)) return commands[i].main(argc - 1, argv + 1);
  fprintf(stderr, "stoker-bench: unknown command %s\n", argv[1]);
  return usage(stderr);
}
