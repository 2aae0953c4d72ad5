/* io.h - what io.c offers the JPEG sources: batched file reads through
 * io_uring, or pread where io_uring is missing or refused. Private to
 * augment/ (and its tests).
 */
#ifndef STOKER_AUGMENT_IO_H
#define STOKER_AUGMENT_IO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

enum { STK__IO_PREAD = 1, STK__IO_URING = 2 };

typedef struct stk__io {
  int mode;     /* STK__IO_PREAD or STK__IO_URING, as in use */
  int fallback; /* 1: auto mode wanted io_uring and could not */
  unsigned depth;
  struct io_uring *ring; /* NULL in pread mode */
  uint64_t uring_reads, pread_reads, errors;
} stk__io;

typedef struct stk__io_req {
  int fd;
  uint64_t off;
  size_t len;
  void *buf;
  ssize_t res; /* out: bytes read (short at EOF) or -errno */
} stk__io_req;

/* Set up *io for batches of up to depth reads. mode: 0 auto (io_uring,
 * else pread with io->fallback set), 1 pread, 2 io_uring
 * (STK_UNSUPPORTED with err if unavailable). STK_OK or an error; one io
 * per thread. */
int stk__io_init(stk__io *io, int mode, unsigned depth, char *err, size_t errlen);
/* Release what stk__io_init set up (a zeroed io is fine). */
void stk__io_free(stk__io *io);
/* Read every request; never fails as a whole, each request has its res. */
void stk__io_read(stk__io *io, stk__io_req *reqs, size_t n);

#endif
