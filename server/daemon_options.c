/* daemon_options.c - parse the daemons' option table from defaults, a config
 * file and the command line; print help and the effective config. Owns
 * the strings it stores in the table's destinations. Must not exit: it
 * returns an outcome and main decides. */
#include "daemon_options.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/costmodel.h"
#include "common/text.h"
#include "daemon_log.h"

/* The --config file whose `token =` line was read last (a pointer into
 * argv), or NULL. Written while parsing, from main only. */
static const char *token_config;

static const char *type_name(stk__opt_type t) {
  switch (t) {
    case OPT_STR:
      return "string";
    case OPT_INT:
      return "int";
    case OPT_BOOL:
      return "bool";
    case OPT_LIST:
      return "key=value, repeatable";
    case OPT_DOUBLE:
      return "number";
  }
  return "?";
}

static stk__option *find(stk__option *opts, size_t n, const char *name, size_t len) {
  for (size_t i = 0; i < n; i++)
    if (strlen(opts[i].name) == len && !strncmp(opts[i].name, name, len)) return &opts[i];
  return NULL;
}

static void list_clear(stk__strlist *l) {
  for (size_t i = 0; i < l->n; i++) free(l->v[i]);
  free(l->v);
  l->v = NULL;
  l->n = 0;
}

/* Store value into o->dst; 0 or -1 with err. */
static int set_value(stk__option *o, const char *value, char *err, size_t errlen) {
  switch (o->type) {
    case OPT_STR: {
      char **d = o->dst;
      char *v = strdup(value ? value : "");
      if (!v) return stk__errf(err, errlen, -1, "out of memory");
      free(*d);
      *d = v;
      break;
    }
    case OPT_INT: {
      char *end;
      errno = 0;
      long long v = strtoll(value, &end, 0);
      if (errno || end == value || *end) {
        return stk__errf(err, errlen, -1, "--%s: '%s' is not an integer", o->name, value);
      }
      if (v < o->min || v > o->max) {
        return stk__errf(err, errlen, -1, "--%s: %lld is outside %lld..%lld", o->name, v,
                         o->min, o->max);
      }
      *(long long *)o->dst = v;
      break;
    }
    case OPT_DOUBLE: {
      char *end;
      errno = 0;
      double v = strtod(value, &end);
      if (errno || end == value || *end || v != v) {
        return stk__errf(err, errlen, -1, "--%s: '%s' is not a number", o->name, value);
      }
      if (v < (double)o->min || v > (double)o->max) {
        return stk__errf(err, errlen, -1, "--%s: %g is outside %lld..%lld", o->name, v,
                         o->min, o->max);
      }
      *(double *)o->dst = v;
      break;
    }
    case OPT_BOOL: {
      int v;
      if (!strcmp(value, "true") || !strcmp(value, "1") || !strcmp(value, "yes")) v = 1;
      else if (!strcmp(value, "false") || !strcmp(value, "0") || !strcmp(value, "no"))
        v = 0;
      else {
        return stk__errf(err, errlen, -1, "--%s: '%s' is not true/false", o->name, value);
      }
      *(int *)o->dst = v;
      break;
    }
    case OPT_LIST: {
      stk__strlist *l = o->dst;
      if (!strchr(value, '=')) {
        return stk__errf(err, errlen, -1, "--%s: '%s' is not key=value", o->name, value);
      }
      char **nv = realloc(l->v, (l->n + 1) * sizeof(char *));
      if (!nv) return stk__errf(err, errlen, -1, "out of memory");
      l->v = nv;
      if (!(l->v[l->n] = strdup(value)))
        return stk__errf(err, errlen, -1, "out of memory");
      l->n++;
      break;
    }
  }
  if (o->validate && o->validate(o, err, errlen)) return -1;
  return 0;
}

static int load_file(stk__option *opts, size_t n, const char *path, char *err,
                     size_t errlen) {
  FILE *f = fopen(path, "r");
  if (!f) {
    return stk__errf(err, errlen, -1, "cannot read config file %s: %s", path,
                     strerror(errno));
  }
  char line[4096], msg[512];
  int lineno = 0, rc = 0;
  while (fgets(line, sizeof(line), f)) {
    lineno++;
    char *name, *value;
    int kv = stk__kv_split(line, &name, &value); /* the job text's rules too */
    if (kv == 0) continue;
    if (kv < 0) {
      snprintf(err, errlen, "%s:%d: expected 'name = value'", path, lineno);
      rc = -1;
      break;
    }
    if (!strcmp(name, "config")) continue;
    stk__option *o = find(opts, n, name, strlen(name));
    if (!o) {
      snprintf(err, errlen, "%s:%d: unknown option '%s'", path, lineno, name);
      rc = -1;
      break;
    }
    if (set_value(o, value, msg, sizeof(msg))) {
      snprintf(err, errlen, "%s:%d: %s", path, lineno, msg);
      rc = -1;
      break;
    }
    if (!strcmp(o->name, "token")) token_config = path;
  }
  fclose(f);
  return rc;
}

const char *stk__options_token_config(void) { return token_config; }

static void print_help(const stk__option *opts, size_t n, const char *program,
                       const char *synopsis, const char *exit_codes) {
  printf(
      "usage: %s [--name value]...\n%s\n\noptions (also accepted as "
      "'name = value' lines in --config FILE):\n",
      program, synopsis);
  printf("  --%-22s %s\n", "config FILE", "read options from FILE first");
  printf("  --%-22s %s\n", "print-config", "print the effective configuration and exit");
  printf("  --%-22s %s\n", "help", "this text");
  for (size_t i = 0; i < n; i++) {
    const stk__option *o = &opts[i];
    printf("  --%-22s %s [%s, default: %s", o->name, o->help, type_name(o->type),
           o->def && *o->def ? o->def : "(none)");
    if (o->type == OPT_INT || o->type == OPT_DOUBLE)
      printf(", range %lld..%lld", o->min, o->max);
    printf("]\n");
  }
  printf("\nexit codes:\n%s", exit_codes);
}

int stk__options_parse(stk__option *opts, size_t n, int argc, char **argv,
                       const char *program, const char *synopsis,
                       const char *exit_codes) {
  char err[600];
  for (size_t i = 0; i < n; i++) {
    if (opts[i].type == OPT_LIST) {
      list_clear(opts[i].dst);
      continue;
    }
    if (set_value(&opts[i], opts[i].def ? opts[i].def : "", err, sizeof(err))) {
      fprintf(stderr, "%s: bad built-in default: %s\n", program, err);
      return OPTS_USAGE;
    }
  }
  int help = 0, print = 0;
  /* The config file first, so the command line overrides it. */
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) help = 1;
    if (!strcmp(argv[i], "--print-config")) print = 1;
    const char *file = NULL;
    if (!strcmp(argv[i], "--config") && i + 1 < argc) file = argv[i + 1];
    else if (!strncmp(argv[i], "--config=", 9)) file = argv[i] + 9;
    if (file && load_file(opts, n, file, err, sizeof(err))) {
      fprintf(stderr, "%s: %s\n", program, err);
      return OPTS_USAGE;
    }
  }
  if (help) {
    print_help(opts, n, program, synopsis, exit_codes);
    return OPTS_EXIT_OK;
  }
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--print-config")) continue;
    if (strncmp(a, "--", 2)) {
      fprintf(stderr, "%s: unexpected argument '%s' (see --help)\n", program, a);
      return OPTS_USAGE;
    }
    a += 2;
    const char *eq = strchr(a, '=');
    size_t len = eq ? (size_t)(eq - a) : strlen(a);
    const char *value = eq ? eq + 1 : NULL;
    if (len == 6 && !strncmp(a, "config", 6)) {
      if (!eq) i++;
      continue;
    }
    stk__option *o = find(opts, n, a, len);
    if (!o) {
      fprintf(stderr, "%s: unknown option '--%.*s' (see --help)\n", program, (int)len, a);
      return OPTS_USAGE;
    }
    if (!value) {
      if (o->type == OPT_BOOL && (i + 1 >= argc || !strncmp(argv[i + 1], "--", 2))) {
        value = "true";
      } else if (i + 1 < argc) {
        value = argv[++i];
      } else {
        fprintf(stderr, "%s: option '--%s' needs a value\n", program, o->name);
        return OPTS_USAGE;
      }
    }
    if (set_value(o, value, err, sizeof(err))) {
      fprintf(stderr, "%s: %s\n", program, err);
      return OPTS_USAGE;
    }
  }
  if (print) {
    stk__options_print(opts, n);
    return OPTS_EXIT_OK;
  }
  return OPTS_RUN;
}

void stk__options_print(const stk__option *opts, size_t n) {
  for (size_t i = 0; i < n; i++) {
    const stk__option *o = &opts[i];
    switch (o->type) {
      case OPT_STR: {
        const char *v = *(char **)o->dst;
        /* Never echo a secret. */
        if (!strcmp(o->name, "token") && v && *v) v = "(set)";
        printf("%s = %s\n", o->name, v ? v : "");
        break;
      }
      case OPT_INT:
        printf("%s = %lld\n", o->name, *(long long *)o->dst);
        break;
      case OPT_BOOL:
        printf("%s = %s\n", o->name, *(int *)o->dst ? "true" : "false");
        break;
      case OPT_DOUBLE:
        printf("%s = %.10g\n", o->name, *(double *)o->dst);
        break;
      case OPT_LIST: {
        const stk__strlist *l = o->dst;
        for (size_t j = 0; j < l->n; j++) printf("%s = %s\n", o->name, l->v[j]);
        break;
      }
    }
  }
}

void stk__options_free(stk__option *opts, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (opts[i].type == OPT_STR) {
      free(*(char **)opts[i].dst);
      *(char **)opts[i].dst = NULL;
    } else if (opts[i].type == OPT_LIST) {
      list_clear(opts[i].dst);
    }
  }
}

int stk__opt_hostport(const stk__option *o, char *err, size_t errlen) {
  const char *v = *(char **)o->dst;
  if (!v || !*v) return 0; /* empty = not set; main decides if required */
  const char *colon = strrchr(v, ':');
  if (!colon || colon == v || !colon[1]) {
    return stk__errf(err, errlen, -1, "--%s: '%s' is not host:port", o->name, v);
  }
  char *end;
  long p = strtol(colon + 1, &end, 10);
  if (*end || p < 0 || p > 65535) {
    return stk__errf(err, errlen, -1, "--%s: bad port in '%s'", o->name, v);
  }
  return 0;
}

int stk__opt_instance_type(const stk__option *o, char *err, size_t errlen) {
  const char *v = *(char **)o->dst;
  if (!v || !*v) return 0; /* empty = not told */
  if (!stk__instance_name_ok(v)) {
    char shown[64]; /* the value, control bytes and the rest shown as '?' */
    size_t k = 0;
    for (; v[k] && k < sizeof(shown) - 1; k++)
      shown[k] = v[k] > 0x20 && v[k] < 0x7f ? v[k] : '?';
    shown[k] = 0;
    return stk__errf(err, errlen, -1,
                     "--%s: '%s' is not an instance type name (at most %d letters, "
                     "digits and . _ - : / +, e.g. ml.c5.18xlarge)",
                     o->name, shown, STK_INSTANCE_NAME_MAX - 1);
  }
  return 0;
}

int stk__opt_loglevel(const stk__option *o, char *err, size_t errlen) {
  const char *v = *(char **)o->dst;
  int l = stk__log_level_parse(v ? v : "");
  if (l < 0) {
    return stk__errf(err, errlen, -1, "--%s: '%s' is not debug|info|warn|error", o->name,
                     v);
  }
  stk__log_set_level(l);
  return 0;
}
