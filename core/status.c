/* status.c - stk_strerror: the text of each stk_status, generated from
 * the same X-macro as the enum (stoker/status.h), so they cannot drift.
 */
#include "stoker/status.h"

const char *stk_strerror(int status) {
  switch (status) {
#define STK__STATUS_STR(name, num, msg) \
  case num:                             \
    return msg;
    STK_STATUS_MAP(STK__STATUS_STR)
#undef STK__STATUS_STR
  }
  return "unknown status";
}
