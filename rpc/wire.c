/* wire.c - zero-copy BatchResponse chunk framing (see wire.h). */
#include "rpc/wire.h"

#include <grpc/slice.h>
#include <stdio.h>
#include <string.h>

#include "rpc/rpc.h"
#include "common/crc32c.h"
#include "rpc/wire_limits.h"

static size_t put_varint(unsigned char *p, uint64_t v) {
  size_t n = 0;
  while (v >= 0x80) {
    p[n++] = (unsigned char)(v | 0x80);
    v >>= 7;
  }
  p[n++] = (unsigned char)v;
  return n;
}

grpc_byte_buffer *stk__wire_chunk(uint64_t offset, const void *data, size_t len,
                                  void (*release)(void *), void *ud) {
  unsigned char hdr[24];
  size_t n = 0;
  hdr[n++] = 0x10; /* field 2, varint: chunk_offset */
  n += put_varint(hdr + n, offset);
  hdr[n++] = 0x1a; /* field 3, length-delimited: chunk */
  n += put_varint(hdr + n, len);
  grpc_slice s[2];
  s[0] = grpc_slice_from_copied_buffer((const char *)hdr, n);
  s[1] = grpc_slice_new_with_user_data((void *)data, len, release, ud);
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(s, 2);
  grpc_slice_unref(s[0]);
  grpc_slice_unref(s[1]);
  return bb;
}

/* Sequential reader over the first bytes of a byte buffer's slices. */
typedef struct {
  grpc_byte_buffer_reader r;
  grpc_slice cur;
  size_t pos, consumed;
  int have;
} byte_reader;

static int br_byte(byte_reader *b, unsigned char *out) {
  while (!b->have || b->pos >= GRPC_SLICE_LENGTH(b->cur)) {
    if (b->have) grpc_slice_unref(b->cur);
    b->have = 0;
    if (!grpc_byte_buffer_reader_next(&b->r, &b->cur)) return -1;
    b->have = 1;
    b->pos = 0;
  }
  *out = GRPC_SLICE_START_PTR(b->cur)[b->pos++];
  b->consumed++;
  return 0;
}

static int br_varint(byte_reader *b, uint64_t *v) {
  *v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    unsigned char c;
    if (br_byte(b, &c)) return -1;
    *v |= (uint64_t)(c & 0x7f) << shift;
    if (!(c & 0x80)) return 0;
  }
  return -1;
}

int stk__wire_decode(grpc_byte_buffer *bb, size_t max_bytes, stk__wire_msg *m) {
  return stk__wire_decode_ex(bb, max_bytes, m, NULL, 0);
}

int stk__wire_decode_ex(grpc_byte_buffer *bb, size_t max_bytes, stk__wire_msg *m,
                        char *why, size_t whylen) {
  memset(m, 0, sizeof(*m));
  size_t total = grpc_byte_buffer_length(bb);
  if (total > max_bytes) {
    if (why && whylen)
      snprintf(why, whylen, "BatchResponse of %zu bytes is over its limit of %zu bytes",
               total, max_bytes);
    return -1;
  }
  byte_reader b;
  memset(&b, 0, sizeof(b));
  if (!grpc_byte_buffer_reader_init(&b.r, bb)) return -1;
  uint64_t tag, off = 0, len;
  int fast = 0;
  if (br_varint(&b, &tag) == 0) {
    if (tag == 0x10 && br_varint(&b, &off) == 0 && br_varint(&b, &tag) == 0) {
      /* offset first, then the chunk */
    }
    if (tag == 0x1a && br_varint(&b, &len) == 0 && len <= total &&
        b.consumed + len == total) {
      fast = 1;
    }
  }
  size_t start = b.consumed;
  if (b.have) grpc_slice_unref(b.cur);
  grpc_byte_buffer_reader_destroy(&b.r);
  if (fast) {
    m->is_chunk = 1;
    m->offset = off;
    m->len = len;
    m->data_start = start;
    return 0;
  }
  /* Another encoder's message: through protobuf-c, with the parse memory
   * bounded. Past a header's size it can only be a chunk, whose one bytes
   * field needs its size once; headers get the usual budget. */
  size_t mem = total > STK_MAX_HEADER_MSG ? 2 * total + STK_UNPACK_MEM_SLACK : 0;
  m->msg = (Stoker__V1__BatchResponse *)stk__rpc_unpack_ex(
      &stoker__v1__batch_response__descriptor, bb, max_bytes, mem, NULL, why, whylen);
  if (!m->msg) return -1;
  if (m->msg->header && total > STK_MAX_HEADER_MSG) {
    if (why && whylen)
      snprintf(why, whylen, "batch header of %zu bytes is over its limit of %u bytes",
               total, STK_MAX_HEADER_MSG);
    stk__wire_msg_free(m);
    return -1;
  }
  if (!m->msg->header) {
    m->is_chunk = 1;
    m->offset = m->msg->chunk_offset;
    m->len = m->msg->chunk.len;
  }
  return 0;
}

/* Pieces of at most this size are copied and then checksummed, so the
 * checksum reads them from L1/L2 rather than memory. */
#define CRC_PIECE (64u << 10)

static uint32_t copy_piece(unsigned char *d, const unsigned char *p, size_t n,
                           uint32_t crc, int with_crc) {
  while (n) {
    size_t c = n < CRC_PIECE ? n : CRC_PIECE;
    memcpy(d, p, c);
    if (with_crc) crc = stk_crc32c(crc, d, c);
    d += c, p += c, n -= c;
  }
  return crc;
}

static uint32_t copy_chunk(grpc_byte_buffer *bb, const stk__wire_msg *m, unsigned char *d,
                           uint32_t crc, int with_crc) {
  if (m->msg)
    return m->len ? copy_piece(d, m->msg->chunk.data, m->len, crc, with_crc) : crc;
  grpc_byte_buffer_reader r;
  if (!grpc_byte_buffer_reader_init(&r, bb)) return crc;
  size_t skip = m->data_start, left = m->len;
  grpc_slice s;
  while (left && grpc_byte_buffer_reader_next(&r, &s)) {
    size_t n = GRPC_SLICE_LENGTH(s);
    const unsigned char *p = GRPC_SLICE_START_PTR(s);
    if (skip >= n) {
      skip -= n;
    } else {
      size_t c = n - skip < left ? n - skip : left;
      crc = copy_piece(d, p + skip, c, crc, with_crc);
      d += c, left -= c, skip = 0;
    }
    grpc_slice_unref(s);
  }
  grpc_byte_buffer_reader_destroy(&r);
  return crc;
}

void stk__wire_copy_chunk(grpc_byte_buffer *bb, const stk__wire_msg *m, void *dest) {
  copy_chunk(bb, m, dest, 0, 0);
}

uint32_t stk__wire_copy_chunk_crc(grpc_byte_buffer *bb, const stk__wire_msg *m,
                                  void *dest, uint32_t crc) {
  return copy_chunk(bb, m, dest, crc, 1);
}

void stk__wire_msg_free(stk__wire_msg *m) {
  if (m->msg) protobuf_c_message_free_unpacked(&m->msg->base, NULL);
  m->msg = NULL;
}
