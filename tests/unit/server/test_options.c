/* test_options.c - the daemons' option table (server/daemon_options.c): defaults,
 * config file, command line overriding it, repeatable key=value options,
 * range and validator errors, --help/--print-config outcomes; and the
 * port file (server/daemon.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "daemon.h"
#include "daemon_options.h"

static struct {
  char *addr, *name;
  long long n;
  int flag;
  stk__strlist set;
} o;

static stk__option table[] = {
    {"addr", OPT_STR, "127.0.0.1:0", stk__opt_hostport, "address", &o.addr, 0, 0},
    {"name", OPT_STR, "", NULL, "name", &o.name, 0, 0},
    {"n", OPT_INT, "5", NULL, "a number", &o.n, 1, 10},
    {"flag", OPT_BOOL, "false", NULL, "a flag", &o.flag, 0, 0},
    {"set", OPT_LIST, NULL, NULL, "key=value", &o.set, 0, 0},
};
#define N (sizeof(table) / sizeof(table[0]))

static int parse(int argc, const char **argv) {
  /* stdout/stderr of --help etc. are noise here */
  return stk__options_parse(table, N, argc, (char **)argv, "t", "synopsis", "codes\n");
}

int main(void) {
  const char *a0[] = {"t"};
  CHECK(parse(1, a0) == OPTS_RUN);
  CHECK(!strcmp(o.addr, "127.0.0.1:0") && o.n == 5 && !o.flag && o.set.n == 0);

  char dir[] = "/tmp/stoker-opt-XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char conf[256];
  snprintf(conf, sizeof(conf), "%s/c.conf", dir);
  FILE *f = fopen(conf, "w");
  fprintf(f, "# comment\n\nn = 7\nname = from-file\nset = a=1\nflag = true\n");
  fclose(f);
  const char *a1[] = {"t", "--n", "9", "--config", conf, "--set", "b=2", "--addr=h:1"};
  CHECK(parse(8, a1) == OPTS_RUN);
  CHECK(o.n == 9); /* the command line wins over the file */
  CHECK(!strcmp(o.name, "from-file"));
  CHECK(o.flag == 1);
  CHECK(!strcmp(o.addr, "h:1"));
  CHECK(o.set.n == 2 && !strcmp(o.set.v[0], "a=1") && !strcmp(o.set.v[1], "b=2"));

  /* A '#' starts a comment after a value too, as in job files (one reader:
   * common/text.h). */
  f = fopen(conf, "w");
  fprintf(f, "n = 2 # two\nname = /d   # where\n  # indented comment\n");
  fclose(f);
  const char *ac[] = {"t", "--config", conf};
  CHECK(parse(3, ac) == OPTS_RUN);
  CHECK(o.n == 2);
  CHECK(!strcmp(o.name, "/d"));

  /* A second parse starts from the defaults again. */
  const char *a2[] = {"t", "--flag"};
  CHECK(parse(2, a2) == OPTS_RUN);
  CHECK(o.flag == 1 && o.n == 5 && o.set.n == 0);

  const char *bad[][3] = {{"t", "--n", "11"},        {"t", "--n", "x"},
                          {"t", "--addr", "nohost"}, {"t", "--addr", "h:70000"},
                          {"t", "--nope", "1"},      {"t", "--set", "novalue"},
                          {"t", "--flag", "maybe"},  {"t", "stray", "x"}};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    CHECK(parse(3, bad[i]) == OPTS_USAGE);
  }
  const char *a3[] = {"t", "--n"};
  CHECK(parse(2, a3) == OPTS_USAGE);
  f = fopen(conf, "w");
  fprintf(f, "bogus = 1\n");
  fclose(f);
  const char *a4[] = {"t", "--config", conf};
  CHECK(parse(3, a4) == OPTS_USAGE);
  const char *a5[] = {"t", "--config", "/nonexistent/x.conf"};
  CHECK(parse(3, a5) == OPTS_USAGE);

  FILE *saved = stdout;
  stdout = fopen("/dev/null", "w");
  const char *a6[] = {"t", "--help"};
  int h = parse(2, a6);
  const char *a7[] = {"t", "--n", "3", "--print-config"};
  int p = parse(4, a7);
  fclose(stdout);
  stdout = saved;
  CHECK(h == OPTS_EXIT_OK);
  CHECK(p == OPTS_EXIT_OK && o.n == 3);

  /* Port file: whole content, no temporary left behind. */
  char pf[256], err[256];
  snprintf(pf, sizeof(pf), "%s/port", dir);
  CHECK(stk__write_port_file(pf, 4242, err, sizeof(err)) == 0);
  f = fopen(pf, "r");
  char buf[32] = "";
  CHECK(f && fgets(buf, sizeof(buf), f));
  if (f) fclose(f);
  CHECK(!strcmp(buf, "4242\n"));
  char bad_pf[300];
  snprintf(bad_pf, sizeof(bad_pf), "%s/no/such/dir/port", dir);
  CHECK(stk__write_port_file(bad_pf, 1, err, sizeof(err)) == -1);

  unlink(pf);
  unlink(conf);
  rmdir(dir);
  stk__options_free(table, N);
  CHECK_DONE();
}
