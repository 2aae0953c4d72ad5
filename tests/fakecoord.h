/* fakecoord.h - a coordinator played by the test process, for libstoker
 * tests that need a coordinator to say what no real one would (ids over
 * the limit, an old worker, hundreds of workers coming and going): Join,
 * WatchWorkers and Finish on the rpc layer, serving one job and the worker
 * list the test publishes. One per process (its state is static); every
 * function is thread-safe. Test code only.
 */
#ifndef STOKER_TEST_FAKECOORD_H
#define STOKER_TEST_FAKECOORD_H

#include <stddef.h>
#include <stdint.h>

#include "rpc/rpc.h"

#define FAKECOORD_MAX_WORKERS 16
#define FAKECOORD_MAX_TEXT    512 /* an id or address, with its NUL */

/* The job every Join gets: its canonical text (copied; at most 4095
 * bytes) and hash. Set before the first fakecoord_publish. */
void fakecoord_set_job(const char *canonical, uint64_t hash);

/* Publish a list of n workers (ids[i] at addrs[i], one core each; n <=
 * FAKECOORD_MAX_WORKERS, strings copied, each shorter than
 * FAKECOORD_MAX_TEXT) under the next list version; every watch that has
 * sent its request gets it. Until the first publish, Join answers
 * UNAVAILABLE "not ready" and watches get nothing. */
void fakecoord_publish(int n, const char *const *ids, const char *const *addrs);

/* A delta under the next list version: the workers ids[0..nadd) at
 * addrs[] are added (or changed), the ids removed[0..nremove) leave. A
 * watch that said takes_deltas and has the previous version gets it as a
 * WorkerList delta whose base_version is that version plus base_skew (a
 * skew != 0 plays a coordinator whose delta does not fit the client's
 * list); every other started watch gets the whole list. */
void fakecoord_delta(int nadd, const char *const *ids, const char *const *addrs,
                     int nremove, const char *const *removed, int base_skew);

/* How many watch requests said takes_deltas, and how many of those asked
 * for a whole list (known_version 0). */
void fakecoord_watch_counts(int *deltas_asked, int *whole_asked);

/* 0 (default): a watch is sent a list only when its version is newer than
 * the one the client's request names, as the real coordinator does.
 * 1: a watch's request is answered with the current list even at the
 * version the client has (the client then reads the same list twice). */
void fakecoord_resend_known(int on);

/* Start a server on 127.0.0.1 (a free port) with the coordinator's
 * methods, then the nextra methods of extra (may be NULL). 0 with *srv and
 * *port set, or -1 with the reason in err. Stop it with
 * stk__rpc_server_stop. */
int fakecoord_start(const stk__rpc_method *extra, size_t nextra, stk__rpc_server **srv,
                    int *port, char *err, size_t errlen);

#endif
