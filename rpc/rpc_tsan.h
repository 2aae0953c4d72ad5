/* rpc_tsan.h - ThreadSanitizer annotations for gRPC's completion queues,
 * shared by the client (rpc_client.c) and the server (rpc_server.c).
 *
 * A tag given to gRPC (grpc_call_start_batch, grpc_server_request_call)
 * comes back from grpc_completion_queue_next, maybe on another thread,
 * and gRPC's completion queue orders everything before the start of the
 * operation before the event. gRPC is built without TSan (Debian's), so
 * TSan cannot see that order and reports the call's object, written
 * before the start and read after the event, as a race. Say it: handing a
 * tag to gRPC releases, the event for it acquires, on one address chosen
 * by the caller (the tag, or the object that owns several tags). No-ops
 * outside ThreadSanitizer builds (scripts/tsan.sh).
 */
#ifndef STOKER_PROTO_RPC_TSAN_H
#define STOKER_PROTO_RPC_TSAN_H

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#define TAG_HANDOVER(t) __tsan_release((void *)(t))
#define TAG_TAKEOVER(t) __tsan_acquire((void *)(t))
#else
#define TAG_HANDOVER(t) ((void)0)
#define TAG_TAKEOVER(t) ((void)0)
#endif

#endif
