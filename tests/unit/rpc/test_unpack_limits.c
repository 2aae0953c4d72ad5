/* test_unpack_limits.c - stk__rpc_unpack_bytes against each limit of
 * rpc/wire_limits.h, without a network: a message over its size limit,
 * a parse over its memory budget, too many unknown fields (count and
 * bytes), too many repeated sub-messages - each refused with the right
 * gRPC code and a reason naming the message type - while real messages,
 * also with a newer peer's extra fields on each list entry, still parse.
 */
#include <grpc/status.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "rpc/rpc.h"
#include "stoker.pb-c.h"
#include "rpc/wire_limits.h"

static uint8_t buf[4u << 20];

/* Append an unknown length-delimited field (number 99) of n bytes. */
static size_t put_unknown(uint8_t *p, size_t n) {
  size_t i = 0;
  p[i++] = 0x9a, p[i++] = 0x06; /* (99 << 3) | 2 */
  size_t v = n;
  for (; v >= 0x80; v >>= 7) p[i++] = (uint8_t)(v | 0x80);
  p[i++] = (uint8_t)v;
  memset(p + i, 'u', n);
  return i + n;
}

static ProtobufCMessage *unpack(const ProtobufCMessageDescriptor *d, size_t len,
                                size_t max, int *code, char *why) {
  *code = 0;
  why[0] = 0;
  return stk__rpc_unpack_bytes(d, buf, len, max, 0, code, why, 300);
}

/* A WorkerList of n workers with ids of idlen bytes, each entry carrying
 * extra unknown fields of extra bytes (0 = none); its length in buf. */
static size_t worker_list(size_t n, size_t idlen, size_t extra) {
  static char id[300];
  memset(id, 'w', idlen);
  id[idlen] = 0;
  size_t off = 0;
  for (size_t k = 0; k < n; k++) {
    Stoker__V1__WorkerInfo w = STOKER__V1__WORKER_INFO__INIT;
    w.worker_id = id, w.address = "10.0.0.1:5555", w.cores = 8;
    uint8_t one[700];
    size_t l = protobuf_c_message_pack(&w.base, one);
    if (extra) l += put_unknown(one + l, extra);
    buf[off++] = 0x12; /* field 2 (workers), length-delimited */
    buf[off++] = (uint8_t)(l | 0x80), buf[off++] = (uint8_t)(l >> 7);
    memcpy(buf + off, one, l);
    off += l;
  }
  return off;
}

int main(void) {
  char why[300];
  int code;
  ProtobufCMessage *m;

  /* A real request, and one with a newer peer's field, parse. */
  Stoker__V1__BatchRequest q = STOKER__V1__BATCH_REQUEST__INIT;
  q.job_hash = 0x1234, q.step = 7;
  size_t len = protobuf_c_message_pack(&q.base, buf);
  m = unpack(&stoker__v1__batch_request__descriptor, len, STK_MAX_REQUEST_MSG, &code,
             why);
  CHECK(m && ((Stoker__V1__BatchRequest *)m)->step == 7);
  protobuf_c_message_free_unpacked(m, NULL);
  len += put_unknown(buf + len, 100);
  m = unpack(&stoker__v1__batch_request__descriptor, len, STK_MAX_REQUEST_MSG, &code,
             why);
  CHECK(m && m->n_unknown_fields == 1);
  protobuf_c_message_free_unpacked(m, NULL);

  /* Over the size limit. */
  m = unpack(&stoker__v1__batch_request__descriptor, STK_MAX_REQUEST_MSG + 1,
             STK_MAX_REQUEST_MSG, &code, why);
  CHECK(!m && code == GRPC_STATUS_RESOURCE_EXHAUSTED && strstr(why, "over its limit"));
  printf("size:     %s\n", why);

  /* Not a message at all. */
  buf[0] = 0x0f;
  m = unpack(&stoker__v1__batch_request__descriptor, 1, STK_MAX_REQUEST_MSG, &code, why);
  CHECK(!m && code == GRPC_STATUS_INVALID_ARGUMENT && strstr(why, "not a valid"));

  /* 1 MiB of 2-byte unknown varints: over the parse budget (8x + 64 KiB). */
  for (size_t i = 0; i < (1u << 20); i += 2) buf[i] = 0x78, buf[i + 1] = 0x01;
  m = unpack(&stoker__v1__worker_list__descriptor, 1u << 20, STK_MAX_LIST_MSG, &code,
             why);
  CHECK(!m && code == GRPC_STATUS_RESOURCE_EXHAUSTED && strstr(why, "to parse"));
  printf("budget:   %s\n", why);

  /* Unknown fields: 1100 of 8 bytes fit the budget, not the count. */
  len = 0;
  for (int i = 0; i < 1100; i++) len += put_unknown(buf + len, 5);
  m = unpack(&stoker__v1__worker_list__descriptor, len, STK_MAX_LIST_MSG, &code, why);
  CHECK(!m && code == GRPC_STATUS_INVALID_ARGUMENT && strstr(why, "unknown fields"));
  printf("count:    %s\n", why);
  /* ... 5 of 4 KiB: the byte budget. */
  len = 0;
  for (int i = 0; i < 5; i++) len += put_unknown(buf + len, 4096);
  m = unpack(&stoker__v1__worker_list__descriptor, len, STK_MAX_LIST_MSG, &code, why);
  CHECK(!m && code == GRPC_STATUS_INVALID_ARGUMENT && strstr(why, "unknown fields"));
  printf("bytes:    %s\n", why);

  /* A real list of 256 workers with ids at the limit, each entry with a
   * newer peer's extra field: parses. */
  len = worker_list(256, STK_MAX_ID_BYTES - 1, 8);
  CHECK(len <= STK_MAX_LIST_MSG);
  m = unpack(&stoker__v1__worker_list__descriptor, len, STK_MAX_LIST_MSG, &code, why);
  CHECK(m && ((Stoker__V1__WorkerList *)m)->n_workers == 256);
  if (!m) printf("refused: %s\n", why);
  protobuf_c_message_free_unpacked(m, NULL);
  /* 2000 workers with short ids (76 KiB): parses. */
  len = worker_list(2000, 40, 0);
  m = unpack(&stoker__v1__worker_list__descriptor, len, STK_MAX_LIST_MSG, &code, why);
  CHECK(m && ((Stoker__V1__WorkerList *)m)->n_workers == 2000);
  if (!m) printf("refused: %s\n", why);
  protobuf_c_message_free_unpacked(m, NULL);
  /* 5000 entries: more repeated sub-messages than allowed. */
  len = worker_list(5000, 100, 0);
  CHECK(len <= STK_MAX_LIST_MSG);
  m = unpack(&stoker__v1__worker_list__descriptor, len, STK_MAX_LIST_MSG, &code, why);
  CHECK(!m && code == GRPC_STATUS_RESOURCE_EXHAUSTED && strstr(why, "repeated"));
  printf("repeated: %s\n", why);

  /* A batch header at the largest batch (65536 indices of 5 bytes). */
  Stoker__V1__BatchHeader h = STOKER__V1__BATCH_HEADER__INIT;
  uint64_t *idx = calloc(65536, sizeof(uint64_t));
  CHECK(idx != NULL);
  if (idx) {
    for (size_t i = 0; i < 65536; i++) idx[i] = (1ull << 28) + i;
    h.n_sample_indices = 65536, h.sample_indices = idx;
    Stoker__V1__BatchResponse r = STOKER__V1__BATCH_RESPONSE__INIT;
    r.header = &h;
    len = protobuf_c_message_pack(&r.base, buf);
    CHECK(len <= STK_MAX_HEADER_MSG);
    m = unpack(&stoker__v1__batch_response__descriptor, len, STK_MAX_HEADER_MSG, &code,
               why);
    CHECK(m && ((Stoker__V1__BatchResponse *)m)->header->n_sample_indices == 65536);
    protobuf_c_message_free_unpacked(m, NULL);
    free(idx);
  }
  CHECK_DONE();
}
