/* flood.h - a hostile load on one stoker-worker, for the serving-bounds
 * test and its full-scale benchmark: plain TCP connections that never say
 * a word, Worker.Stream calls that never send a request ("silent"),
 * streams that ask for batches and never read them ("stalled"), and
 * health watches that stay open. Driven by
 * the gRPC C core directly (one completion queue, one thread), so it can
 * hold thousands of calls cheaply. Test code only.
 */
#ifndef STOKER_TEST_FLOOD_H
#define STOKER_TEST_FLOOD_H

#include <stddef.h>
#include <stdint.h>

typedef struct flood_config {
  const char *target;      /* the worker, "127.0.0.1:port" */
  int idle_conns;          /* TCP connections that never send a byte... */
  int idle_http2;          /* ...except these (of idle_conns), which send the
                              HTTP/2 preface and settings, then nothing: an
                              idle gRPC connection without calls */
  int silent_streams;      /* Worker.Stream calls without a request */
  int streams_per_channel; /* silent streams per connection; 0 = 50 */
  int stalled_streams;     /* streams that ask and never read */
  int stalled_requests;    /* requests each stalled stream sends; 0 = 8 */
  int reopen_stalled_ms;   /* 0, or: each stalled stream is cancelled this
                              long after its start and replaced by a new
                              one, so stalled_streams of them are there for
                              the whole run (a stalled call never sees the
                              worker end it: it never reads) */
  int health_watches;      /* grpc.health.v1.Health/Watch calls (no token
                              needed) that take the first answer and then
                              stay, streams_per_channel per connection */
  uint64_t job_hash;       /* for the stalled streams' requests */
  uint32_t world_size;
  uint64_t steps; /* per epoch: requests are for steps 0.. of epoch 0 */
} flood_config;

typedef struct flood_stats {
  int conns_open;       /* idle TCP connections established */
  int calls_started;    /* silent + stalled calls started */
  int calls_ended;      /* of those, ended (status received) */
  int ended_deadline;   /* DEADLINE_EXCEEDED (first-message deadline) */
  int ended_exhausted;  /* RESOURCE_EXHAUSTED (too many calls) */
  int stalled_ended;    /* stalled streams whose status came: only once
                           they are cancelled (they never read) */
  int requests_sent;    /* stalled streams' requests that went out */
  int stalled_reopened; /* stalled streams replaced (reopen_stalled) */
  int ended_other;      /* any other status */
  int health_started;   /* health watches started (not in calls_started) */
  int health_ended;     /* of those, ended (status received) */
  int health_exhausted; /* of those, RESOURCE_EXHAUSTED (their table is full) */
} flood_stats;

typedef struct flood flood;

/* Start the load (connections and calls are opened at once; calls on a
 * thread of the flood). 0, or -1 with err. */
int flood_start(const flood_config *cfg, flood **out, char *err, size_t errlen);
/* A snapshot of the counters. Thread-safe. */
void flood_stats_get(flood *f, flood_stats *out);
/* Cancel every call, close every connection, join the thread, free.
 * Accepts NULL. */
void flood_stop(flood *f);

#endif
