/* rpc_common.c - what both sides of the RPC layer share: gRPC's
 * init/shutdown, the one table from a gRPC status to an stk_status (and
 * "final or retry"), packing a protobuf-c message into a byte buffer, and
 * the bounded unpack (a parse budget, floods of unknown fields and
 * repeated sub-messages refused, each refusal naming the type and the
 * limit of wire_limits.h).
 *
 * Owns: nothing global. Must not: print, exit, or allocate past an
 * unpack's budget.
 */
#include <grpc/support/alloc.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rpc/rpc.h"
#include "rpc/wire_limits.h"
#include "stoker/status.h"

void stk__rpc_init(void) { grpc_init(); }
void stk__rpc_shutdown(void) { grpc_shutdown(); }

/* The final codes are the ones only a change on our side can fix: a job or
 * protocol mismatch (FAILED_PRECONDITION), a request the peer rejects as
 * malformed (INVALID_ARGUMENT, OUT_OF_RANGE), a peer that does not serve
 * the method at all (UNIMPLEMENTED: another service on that address, or an
 * incompatible version) and credentials (UNAUTHENTICATED,
 * PERMISSION_DENIED). Credentials are final because a
 * process reads its token once at start: retrying sends the same token,
 * and a worker that retried would only reach its orphan timeout much
 * later with a less clear reason (session.c once treated UNAUTHENTICATED
 * as final in one place and not in its twin). Everything else (no peer
 * yet, deadline, overload, a peer restarting) is transient. */
static const struct {
  int status, final;
} rpc_status_map[] = {
    [GRPC_STATUS_OK] = {STK_OK, 0},
    [GRPC_STATUS_CANCELLED] = {STK_CANCELLED, 0},
    [GRPC_STATUS_UNKNOWN] = {STK_UNAVAILABLE, 0},
    [GRPC_STATUS_INVALID_ARGUMENT] = {STK_INVALID_ARGUMENT, 1},
    [GRPC_STATUS_DEADLINE_EXCEEDED] = {STK_TIMEOUT, 0},
    [GRPC_STATUS_NOT_FOUND] = {STK_NOT_FOUND, 0},
    [GRPC_STATUS_ALREADY_EXISTS] = {STK_STATE, 0},
    [GRPC_STATUS_PERMISSION_DENIED] = {STK_INVALID_ARGUMENT, 1},
    [GRPC_STATUS_RESOURCE_EXHAUSTED] = {STK_LIMIT, 0},
    [GRPC_STATUS_FAILED_PRECONDITION] = {STK_MISMATCH, 1},
    [GRPC_STATUS_ABORTED] = {STK_CANCELLED, 0},
    [GRPC_STATUS_OUT_OF_RANGE] = {STK_INVALID_ARGUMENT, 1},
    [GRPC_STATUS_UNIMPLEMENTED] = {STK_UNSUPPORTED, 1},
    [GRPC_STATUS_INTERNAL] = {STK_INTERNAL, 0},
    [GRPC_STATUS_UNAVAILABLE] = {STK_UNAVAILABLE, 0},
    [GRPC_STATUS_DATA_LOSS] = {STK_CORRUPT, 0},
    [GRPC_STATUS_UNAUTHENTICATED] = {STK_INVALID_ARGUMENT, 1},
};

int stk__rpc_status(int grpc_code, int *final) {
  int n = (int)(sizeof(rpc_status_map) / sizeof(rpc_status_map[0]));
  int ok = grpc_code >= 0 && grpc_code < n;
  if (final) *final = ok ? rpc_status_map[grpc_code].final : 1;
  return ok ? rpc_status_map[grpc_code].status : STK_PROTOCOL;
}

grpc_byte_buffer *stk__rpc_pack(const ProtobufCMessage *m) {
  size_t n = protobuf_c_message_get_packed_size(m);
  grpc_slice s = grpc_slice_malloc(n);
  protobuf_c_message_pack(m, GRPC_SLICE_START_PTR(s));
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
  grpc_slice_unref(s);
  return bb;
}

/* ---- Bounded unpack --------------------------------------------------- */

/* A protobuf-c allocator that fails past a byte budget, so a parse of
 * hostile bytes ends with NULL instead of allocating a hundred times their
 * size. It hands out plain malloc blocks, so the message is freed with
 * protobuf_c_message_free_unpacked(m, NULL) like any other. Frees are not
 * credited back: the budget bounds everything the parse ever asked for,
 * which bounds its peak. */
typedef struct unpack_budget {
  ProtobufCAllocator a;
  size_t used, budget;
  int exceeded;
} unpack_budget;

#define MALLOC_OVERHEAD 16 /* glibc: a chunk header, 16-byte granules */

static void *budget_alloc(void *ud, size_t n) {
  unpack_budget *b = ud;
  size_t cost = n + MALLOC_OVERHEAD;
  if (cost < n || cost > b->budget - b->used) {
    b->exceeded = 1;
    return NULL;
  }
  b->used += cost;
  return malloc(n);
}

static void budget_free(void *ud, void *p) {
  (void)ud;
  free(p);
}

typedef struct unknown_count {
  size_t fields, bytes, repeated;
} unknown_count;

/* Add up m's unknown fields and repeated sub-messages, recursively. 0, or
 * -1 as soon as a budget of wire_limits.h is passed. */
static int count_unknown(const ProtobufCMessage *m, unknown_count *n, int depth) {
  if (depth > 32) return -1; /* stoker.proto nests 4 deep */
  n->fields += m->n_unknown_fields;
  for (unsigned i = 0; i < m->n_unknown_fields; i++) n->bytes += m->unknown_fields[i].len;
  if (n->fields > STK_MAX_UNKNOWN_FIELDS || n->bytes > STK_MAX_UNKNOWN_BYTES) return -1;
  const ProtobufCMessageDescriptor *d = m->descriptor;
  const char *base = (const char *)m;
  for (unsigned i = 0; i < d->n_fields; i++) {
    const ProtobufCFieldDescriptor *f = &d->fields[i];
    if (f->type != PROTOBUF_C_TYPE_MESSAGE) continue;
    if (f->label == PROTOBUF_C_LABEL_REPEATED) {
      size_t k = *(const size_t *)(base + f->quantifier_offset);
      ProtobufCMessage *const *v = *(ProtobufCMessage *const *const *)(base + f->offset);
      n->repeated += k;
      if (n->repeated > STK_MAX_REPEATED_MSGS) return -1;
      for (size_t j = 0; j < k; j++)
        if (v[j] && count_unknown(v[j], n, depth + 1)) return -1;
      continue;
    }
    if ((f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) &&
        *(const uint32_t *)(base + f->quantifier_offset) != f->id)
      continue; /* another member of the oneof owns the storage */
    const ProtobufCMessage *sub = *(ProtobufCMessage *const *)(base + f->offset);
    if (sub && count_unknown(sub, n, depth + 1)) return -1;
  }
  return 0;
}

static void set_why(int *code, char *why, size_t whylen, int c, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static void set_why(int *code, char *why, size_t whylen, int c, const char *fmt, ...) {
  if (code) *code = c;
  if (!why || !whylen) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, whylen, fmt, ap);
  va_end(ap);
}

ProtobufCMessage *stk__rpc_unpack_bytes(const ProtobufCMessageDescriptor *d,
                                        const uint8_t *data, size_t len, size_t max_bytes,
                                        size_t mem_budget, int *code, char *why,
                                        size_t whylen) {
  if (len > max_bytes) {
    set_why(code, why, whylen, GRPC_STATUS_RESOURCE_EXHAUSTED,
            "%s of %zu bytes is over its limit of %zu bytes", d->name, len, max_bytes);
    return NULL;
  }
  unpack_budget b;
  memset(&b, 0, sizeof(b));
  b.a.alloc = budget_alloc;
  b.a.free = budget_free;
  b.a.allocator_data = &b;
  b.budget = mem_budget ? mem_budget
                        : (len > SIZE_MAX / 16
                               ? SIZE_MAX / 2
                               : STK_UNPACK_MEM_FACTOR * len + STK_UNPACK_MEM_SLACK);
  ProtobufCMessage *m = protobuf_c_message_unpack(d, &b.a, len, data);
  if (!m) {
    if (b.exceeded)
      set_why(code, why, whylen, GRPC_STATUS_RESOURCE_EXHAUSTED,
              "%s of %zu bytes would need more than %zu bytes to parse (too many "
              "fields)",
              d->name, len, b.budget);
    else
      set_why(code, why, whylen, GRPC_STATUS_INVALID_ARGUMENT,
              "%zu bytes are not a valid %s", len, d->name);
    return NULL;
  }
  unknown_count n = {0, 0, 0};
  if (count_unknown(m, &n, 0)) {
    if (n.repeated > STK_MAX_REPEATED_MSGS)
      set_why(code, why, whylen, GRPC_STATUS_RESOURCE_EXHAUSTED,
              "%s holds more than %u repeated sub-messages", d->name,
              STK_MAX_REPEATED_MSGS);
    else
      set_why(code, why, whylen, GRPC_STATUS_INVALID_ARGUMENT,
              "%s holds more unknown fields than allowed (%u fields, %u bytes at most)",
              d->name, STK_MAX_UNKNOWN_FIELDS, STK_MAX_UNKNOWN_BYTES);
    protobuf_c_message_free_unpacked(m, NULL);
    return NULL;
  }
  return m;
}

ProtobufCMessage *stk__rpc_unpack_ex(const ProtobufCMessageDescriptor *d,
                                     grpc_byte_buffer *bb, size_t max_bytes,
                                     size_t mem_budget, int *code, char *why,
                                     size_t whylen) {
  if (!bb) {
    set_why(code, why, whylen, GRPC_STATUS_INVALID_ARGUMENT, "no %s", d->name);
    return NULL;
  }
  size_t len = grpc_byte_buffer_length(bb);
  if (len > max_bytes) /* before copying it into one slice */
    return stk__rpc_unpack_bytes(d, NULL, len, max_bytes, 0, code, why, whylen);
  grpc_byte_buffer_reader r;
  if (!grpc_byte_buffer_reader_init(&r, bb)) {
    set_why(code, why, whylen, GRPC_STATUS_INVALID_ARGUMENT, "unreadable %s", d->name);
    return NULL;
  }
  grpc_slice s = grpc_byte_buffer_reader_readall(&r);
  grpc_byte_buffer_reader_destroy(&r);
  ProtobufCMessage *m =
      stk__rpc_unpack_bytes(d, GRPC_SLICE_START_PTR(s), GRPC_SLICE_LENGTH(s), max_bytes,
                            mem_budget, code, why, whylen);
  grpc_slice_unref(s);
  return m;
}

ProtobufCMessage *stk__rpc_unpack(const ProtobufCMessageDescriptor *d,
                                  grpc_byte_buffer *bb, size_t max_bytes) {
  return stk__rpc_unpack_ex(d, bb, max_bytes, 0, NULL, NULL, 0);
}
