/* wire_limits.h - sizes every peer of the wire (the coordinator, the
 * worker, libstoker, the stoker CLI) agrees on, so that no side accepts
 * what another truncates, and no peer can make another allocate more than
 * a small multiple of what it sent. A string over its limit is refused
 * with a clear error, never truncated; a message over its limit is refused
 * with RESOURCE_EXHAUSTED. Plain macros, no code.
 */
#ifndef STOKER_WIRE_LIMITS_H
#define STOKER_WIRE_LIMITS_H

/* Worker ids, worker addresses and client ids: bytes including the
 * terminating NUL, so at most STK_MAX_ID_BYTES - 1 = 255 bytes of text.
 * The coordinator refuses a longer one at registration (INVALID_ARGUMENT)
 * and at Join; libstoker skips a longer one in a worker list. */
#define STK_MAX_ID_BYTES 256

/* A stream ticket (RegisterAck.stream_ticket, WorkerInfo.stream_ticket):
 * bytes including the terminating NUL. The coordinator mints 64 hex
 * digits; a worker or client refuses a longer or non-printable one (a
 * list entry with one is skipped, never used cut). */
#define STK_MAX_TICKET_BYTES 128

/* ImageFolder class names travel (worker hello, Join) while there are at
 * most STK_MAX_CLASS_NAMES of them holding at most STK_MAX_CLASS_BYTES
 * bytes together (ImageNet-21k's 21841 names take about 200 KiB); a larger
 * dataset sends its class count only. */
#define STK_MAX_CLASS_NAMES 32768u
#define STK_MAX_CLASS_BYTES (256u << 10)
/* What the names add to a message: each name's bytes plus its tag and
 * length (3 bytes at most). */
#define STK_MAX_CLASS_MSG (STK_MAX_CLASS_BYTES + 3u * STK_MAX_CLASS_NAMES)

/* ---- Receive limits, per message (docs/operations.md, "Receive limits").
 * Each is the largest encoding of its message today with room for fields a
 * newer peer may add. A server's gRPC receive limit is the largest of its
 * methods' (stk__rpc_method.max_recv_bytes); each method's own limit is checked
 * again when its message is unpacked. A client channel's limit is the
 * largest message that channel may carry. */

/* BatchRequest: four scalars, 30 bytes. */
#define STK_MAX_REQUEST_MSG (1u << 10)
/* The coordinator's requests: WorkerMessage (hello: two ids of at most
 * 255 bytes; heartbeat: stats), JoinRequest (a client id), WatchRequest,
 * FinishRequest (a reason of at most 256 bytes), StatusRequest. */
#define STK_MAX_CONTROL_MSG (4u << 10)
/* WorkerMessage: a hello may carry the class names. */
#define STK_MAX_SESSION_MSG (STK_MAX_CONTROL_MSG + STK_MAX_CLASS_MSG)
/* CoordinatorCommand, to a worker: the job spec's canonical text (a few
 * KiB at most) or a shutdown reason. */
#define STK_MAX_COMMAND_MSG (64u << 10)
/* JoinResponse, WorkerList, FinishResponse, to a client: the job spec and
 * the worker list (about 130 bytes per worker with usual ids and a stream
 * ticket, 600 at the id limit: about 1700 workers at the worst). */
#define STK_MAX_LIST_MSG (1u << 20)
/* JoinResponse, to a client: the list and the class names. libstoker's
 * channel to the coordinator receives at most this. */
#define STK_MAX_JOIN_MSG (STK_MAX_LIST_MSG + STK_MAX_CLASS_MSG)
/* StatusResponse, to the stoker CLI: the list, every worker's stats and
 * the joined and finished ranks (world_size is at most 65536). */
#define STK_MAX_STATUS_MSG (4u << 20)
/* A BatchResponse with a header: tensor descriptors and batch_size
 * (at most 65536) sample indices of at most 10 bytes each. */
#define STK_MAX_HEADER_MSG (1u << 20)
/* A payload chunk: the worker's --chunk-bytes is at most STK_MAX_CHUNK_BYTES;
 * the message adds its field prefixes. libstoker's channels to workers
 * receive at most STK_MAX_CHUNK_MSG. */
#define STK_MAX_CHUNK_BYTES (8u << 20)
#define STK_MAX_CHUNK_MSG   (STK_MAX_CHUNK_BYTES + (64u << 10))

/* ---- What one unpack may allocate (rpc_common.c, stk__rpc_unpack).
 * protobuf-c makes an allocation per unknown field and per repeated
 * sub-message, so a few MiB of tiny fields could cost a hundred times
 * their size. Every unpack gets an allocator that fails past
 * STK_UNPACK_MEM_FACTOR times the message size plus STK_UNPACK_MEM_SLACK
 * (each allocation counted with malloc's overhead), and a message that
 * parses is still refused when it holds more unknown fields or repeated
 * sub-messages than below: a newer peer's extra field on each worker of a
 * list fits; a flood does not. */
#define STK_UNPACK_MEM_FACTOR  8u
#define STK_UNPACK_MEM_SLACK   (64u << 10)
#define STK_MAX_UNKNOWN_FIELDS 1024u
#define STK_MAX_UNKNOWN_BYTES  (16u << 10)
#define STK_MAX_REPEATED_MSGS  4096u

#endif
