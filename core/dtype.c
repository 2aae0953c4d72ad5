/* dtype.c - stk_dtype_name and stk_dtype_from_name: both ways through
 * the one dtype table (STK_DTYPE_MAP, stoker/core.h), so a dtype's number
 * and its text cannot drift apart. Pure; no state.
 */
#include <string.h>

#include "stoker/core.h"

const char *stk_dtype_name(int dtype) {
  switch (dtype) {
#define STK__DTYPE_TEXT(name, num, text, size, use) \
  case num:                                         \
    return text;
    STK_DTYPE_MAP(STK__DTYPE_TEXT)
#undef STK__DTYPE_TEXT
  }
  return NULL;
}

int stk_dtype_from_name(const char *name) {
  if (!name) return 0;
#define STK__DTYPE_FIND(name_, num, text, size, use) \
  if (!strcmp(name, text)) return num;
  STK_DTYPE_MAP(STK__DTYPE_FIND)
#undef STK__DTYPE_FIND
  return 0;
}
