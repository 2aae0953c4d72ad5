/* io.c - batched file reads for one builder thread: an io_uring ring when
 * the kernel lets us have one, pread otherwise (seccomp, gVisor,
 * kernel.io_uring_disabled), or either one forced by stk_limits.io_mode.
 *
 * Owns the ring. Knows nothing about JPEG or datasets: it reads byte
 * ranges of already open descriptors into caller buffers. Not thread-safe:
 * one stk__io per thread, as liburing wants one ring per thread.
 */
#include <errno.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "io.h"
#include "stoker/status.h"

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
/* ThreadSanitizer builds only (scripts/tsan.sh). liburing maps and unmaps
 * a ring with raw system calls, which TSan does not intercept: it never
 * learns that a freed ring's pages are gone, so a ring that another thread
 * maps later at the same address looks like a race with the old ring's
 * last accesses. Order the end of a ring before the start of any ring
 * mapped at the same address: a sync object per mapping address, and one
 * for all rings (a ring's pages may come back at another of the new
 * ring's addresses); only TSan builds are ordered by it. */
static char ring_tsan_any; /* every ring's end before any later ring's start */
static void ring_tsan_sync(struct io_uring *ring, int start) {
  void *at[4] = {ring->sq.ring_ptr, ring->sq.sqes, ring->cq.ring_ptr, &ring_tsan_any};
  for (int i = 0; i < 4; i++) {
    if (!at[i]) continue;
    if (start) __tsan_acquire(at[i]);
    else __tsan_release(at[i]);
  }
}
#else
#define ring_tsan_sync(ring, start) ((void)0)
#endif

int stk__io_init(stk__io *io, int mode, unsigned depth, char *err, size_t errlen) {
  memset(io, 0, sizeof(*io));
  io->depth = depth < 1 ? 1 : depth > 256 ? 256 : depth;
  io->mode = STK__IO_PREAD;
  if (mode == 1) return STK_OK;
  struct io_uring *ring = calloc(1, sizeof(*ring));
  if (!ring) return STK_NO_MEMORY;
  int rc = io_uring_queue_init(io->depth, ring, 0);
  if (rc < 0) {
    free(ring);
    if (mode == 2) {
      return stk__errf(err, errlen, STK_UNSUPPORTED,
                       "io_mode = io_uring but io_uring_queue_init: %s", strerror(-rc));
    }
    io->fallback = 1; /* auto: pread, quietly; stk_builder_io_mode says so */
    return STK_OK;
  }
  ring_tsan_sync(ring, 1);
  io->ring = ring;
  io->mode = STK__IO_URING;
  return STK_OK;
}

void stk__io_free(stk__io *io) {
  if (io->ring) {
    ring_tsan_sync(io->ring, 0);
    io_uring_queue_exit(io->ring);
    free(io->ring);
  }
  io->ring = NULL;
}

/* Finish a request with pread from where it stands (short reads, EINTR). */
static void finish_pread(stk__io_req *r, size_t done) {
  while (done < r->len) {
    ssize_t k =
        pread(r->fd, (char *)r->buf + done, r->len - done, (off_t)(r->off + done));
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) {
      r->res = -errno;
      return;
    }
    if (k == 0) break; /* EOF: the caller sees a short result */
    done += (size_t)k;
  }
  r->res = (ssize_t)done;
}

static void read_uring(stk__io *io, stk__io_req *reqs, size_t n) {
  struct io_uring *ring = io->ring;
  size_t next = 0, inflight = 0;
  while (next < n || inflight) {
    while (next < n && inflight < io->depth) {
      struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
      if (!sqe) break;
      stk__io_req *r = &reqs[next];
      /* io_uring takes at most an unsigned (and the kernel caps a single
       * read at about 2 GiB); the rest is finished with pread. */
      unsigned len = r->len > (1u << 30) ? 1u << 30 : (unsigned)r->len;
      io_uring_prep_read(sqe, r->fd, r->buf, len, r->off);
      io_uring_sqe_set_data(sqe, r);
      next++, inflight++;
    }
    int rc = io_uring_submit_and_wait(ring, 1);
    if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
      /* The ring broke under us: finish everything with pread. Requests
       * already submitted may still complete; drain them first. */
      while (inflight) {
        struct io_uring_cqe *cqe;
        if (io_uring_wait_cqe(ring, &cqe) < 0) break;
        io_uring_cqe_seen(ring, cqe);
        inflight--;
      }
      for (size_t i = 0; i < n; i++) finish_pread(&reqs[i], 0);
      io->errors++;
      return;
    }
    struct io_uring_cqe *cqe;
    while (inflight && io_uring_peek_cqe(ring, &cqe) == 0) {
      stk__io_req *r = io_uring_cqe_get_data(cqe);
      int res = cqe->res;
      io_uring_cqe_seen(ring, cqe);
      inflight--;
      if (res < 0 && res != -EAGAIN && res != -EINTR) r->res = res;
      else finish_pread(r, res < 0 ? 0 : (size_t)res);
    }
  }
}

void stk__io_read(stk__io *io, stk__io_req *reqs, size_t n) {
  for (size_t i = 0; i < n; i++) reqs[i].res = 0;
  if (io->mode == STK__IO_URING && n) {
    read_uring(io, reqs, n);
    io->uring_reads += n;
    return;
  }
  for (size_t i = 0; i < n; i++) finish_pread(&reqs[i], 0);
  io->pread_reads += n;
}
