/* replay_main.c - runs a libFuzzer target over files and directories
 * given on the command line (the corpus as a regression test), for
 * builds without libFuzzer. Exits 0 when every input ran. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
  size_t got = n > 0 ? fread(buf, 1, (size_t)n, f) : 0;
  fclose(f);
  LLVMFuzzerTestOneInput(buf, got);
  free(buf);
  return 0;
}

int main(int argc, char **argv) {
  int files = 0;
  for (int i = 1; i < argc; i++) {
    struct stat st;
    if (stat(argv[i], &st)) {
      fprintf(stderr, "%s: cannot stat\n", argv[i]);
      return 1;
    }
    if (!S_ISDIR(st.st_mode)) {
      files += run_file(argv[i]) == 0;
      continue;
    }
    DIR *d = opendir(argv[i]);
    struct dirent *e;
    while (d && (e = readdir(d))) {
      if (e->d_name[0] == '.') continue;
      char p[4096];
      snprintf(p, sizeof(p), "%s/%s", argv[i], e->d_name);
      files += run_file(p) == 0;
    }
    if (d) closedir(d);
  }
  printf("replayed %d inputs\n", files);
  return files ? 0 : 1;
}
