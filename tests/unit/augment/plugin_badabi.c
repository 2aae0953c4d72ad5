/* plugin_badabi.c - a plugin op built for another ABI version (99), for
 * test_aug_chain: a worker must refuse to load it, naming both versions. */
#include <stddef.h>

#include "stoker/op.h"

static int create(const char *args, void **state, char *err, size_t errlen) {
  (void)args, (void)state, (void)err, (void)errlen;
  return 0;
}

static const stk_op_info info = {99, "test_plugin_badabi", create, NULL, NULL};

__attribute__((visibility("default"))) const stk_op_info *stoker_op_info(void) {
  return &info;
}
