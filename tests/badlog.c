/* badlog.c - a dataset's bad-sample log for tests (badlog.h). */
#include "badlog.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void badlog_init(badlog *l) {
  memset(l, 0, sizeof(*l));
  pthread_mutex_init(&l->mu, NULL);
}

void badlog_clear(badlog *l) {
  pthread_mutex_lock(&l->mu);
  for (int i = 0; i < l->npaths; i++) free(l->paths[i]);
  free(l->paths);
  l->paths = NULL;
  l->npaths = l->cap = l->n = l->dups = 0;
  l->last[0] = l->why[0] = 0;
  pthread_mutex_unlock(&l->mu);
}

void badlog_fn(void *ud, const char *path, const char *why) {
  badlog *l = ud;
  pthread_mutex_lock(&l->mu);
  l->n++;
  snprintf(l->last, sizeof(l->last), "%s: %s", path, why);
  snprintf(l->why, sizeof(l->why), "%s", why);
  int seen = 0;
  for (int i = 0; i < l->npaths && !seen; i++) seen = !strcmp(l->paths[i], path);
  if (seen) {
    l->dups++;
  } else {
    if (l->npaths == l->cap) {
      int cap = l->cap ? 2 * l->cap : 64;
      char **p = realloc(l->paths, (size_t)cap * sizeof(*p));
      if (p) l->paths = p, l->cap = cap;
    }
    char *copy = l->npaths < l->cap ? strdup(path) : NULL;
    if (copy) l->paths[l->npaths++] = copy;
  }
  pthread_mutex_unlock(&l->mu);
}

int badlog_count(badlog *l) {
  pthread_mutex_lock(&l->mu);
  int n = l->n;
  pthread_mutex_unlock(&l->mu);
  return n;
}

int badlog_has(badlog *l, const char *suffix) {
  size_t sl = strlen(suffix);
  int found = 0;
  pthread_mutex_lock(&l->mu);
  for (int i = 0; i < l->npaths && !found; i++) {
    size_t pl = strlen(l->paths[i]);
    found = pl >= sl && !strcmp(l->paths[i] + pl - sl, suffix);
  }
  pthread_mutex_unlock(&l->mu);
  return found;
}
