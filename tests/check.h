/* check.h - the tests' tiny assertion macros: print file:line and the
 * failed expression, count failures, and let main() return the verdict. */
#ifndef STOKER_TEST_CHECK_H
#define STOKER_TEST_CHECK_H
#include <stdio.h>

static int check_failures;
#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      check_failures++;                                                        \
    }                                                                          \
  } while (0)
#define CHECK_EQ_U64(a, b)                                                         \
  do {                                                                             \
    unsigned long long a_ = (unsigned long long)(a), b_ = (unsigned long long)(b); \
    if (a_ != b_) {                                                                \
      fprintf(stderr, "%s:%d: CHECK failed: %s == %s (%llu vs %llu)\n", __FILE__,  \
              __LINE__, #a, #b, a_, b_);                                           \
      check_failures++;                                                            \
    }                                                                              \
  } while (0)
#define CHECK_DONE()                                                             \
  do {                                                                           \
    if (check_failures) fprintf(stderr, "%d check(s) failed\n", check_failures); \
    return check_failures ? 1 : 0;                                               \
  } while (0)
#endif
