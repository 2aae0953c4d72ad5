/* badlog.h - the bad-sample log of a test's dataset: a stk_bad_sample_fn
 * (stoker/augment.h, stk_dataset_set_log) that records what a dataset
 * reports, for the test to count and search. Test code only.
 *
 * Thread-safe: every builder thread of a dataset may report into one log
 * (a mutex guards it); read it after the builds that report into it are
 * done, or through badlog_count.
 */
#ifndef STOKER_TEST_BADLOG_H
#define STOKER_TEST_BADLOG_H

#include <pthread.h>

typedef struct badlog {
  pthread_mutex_t mu;
  int n;           /* reports so far */
  int dups;        /* reports of a path reported before */
  char last[4096]; /* the last report, "path: why" */
  char why[256];   /* the last report's reason alone */
  char **paths;    /* every distinct path reported, in order (owned) */
  int npaths, cap;
} badlog;

/* An empty log. Free what it holds with badlog_clear. */
void badlog_init(badlog *l);
/* Forget every report (frees the paths); the log can be used again. */
void badlog_clear(badlog *l);
/* The callback: ud is a badlog *. Pass it to stk_dataset_set_log. A
 * report that cannot be stored for lack of memory still counts in n. */
void badlog_fn(void *ud, const char *path, const char *why);
/* Reports so far (under the lock, so while builders still run). */
int badlog_count(badlog *l);
/* 1 if a reported path ends with suffix, else 0. */
int badlog_has(badlog *l, const char *suffix);

#endif
