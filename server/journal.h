/* journal.h - the coordinator's state journal (--state-dir): what a
 * restarted stoker-coordinator must not forget about its job, as one small
 * versioned, checksummed text file, and the directory that holds it.
 *
 * Two parts: the state itself (stk__journal: format to text, parse text
 * back, free), pure and testable without a disk; and the state directory
 * (stk__state_dir: create, lock against a second coordinator, read the
 * file, replace it atomically). Nothing here logs or exits.
 */
#ifndef STOKER_SERVER_JOURNAL_H
#define STOKER_SERVER_JOURNAL_H

#include <stddef.h>
#include <stdint.h>

/* The format version written; files of another version are refused. */
#define STK_JOURNAL_VERSION 1
/* Largest state file read (a world_size of 65536 with every rank finished
 * and thousands of worker ids is a few MiB at most). */
#define STK_JOURNAL_MAX_BYTES (16u << 20)
/* Most worker ids kept in one file. */
#define STK_JOURNAL_MAX_WORKERS 100000

typedef struct stk__journal {
  uint64_t job_hash;    /* the job as configured (before num_samples is learnt) */
  char *job_name;       /* for messages only; owned, may be "" */
  uint32_t world_size;  /* 1..65536 */
  uint64_t num_samples; /* dataset size, 0 = not known yet */
  int have_fp;          /* fingerprint below is known */
  uint64_t fingerprint; /* dataset fingerprint of the first worker */
  uint8_t *joined;      /* world_size flags (0/1); owned */
  uint8_t *finished;    /* world_size flags (0/1); owned */
  int ended;            /* the job's end was decided ... */
  int exit_code;        /* ... with this exit code ... */
  int failed;           /* ... as failed (aborted) */
  char *reason;         /* ... for this reason (printable); owned, may be "" */
  char **worker_ids;    /* workers registered whose session had not ended (a
                           restart waits, bounded, for them to come back); owned */
  size_t nworkers;
} stk__journal;

/* Text of j: a first line naming the format and its version, one
 * "key value" line per field (strings hex-encoded, so any byte of an id is
 * safe), and a last line with the CRC-32C of everything before it. 0 with
 * *out (caller frees, NUL-terminated) and *len, or -1 (out of memory).
 * Thread-safe (reads only j). */
int stk__journal_format(const stk__journal *j, char **out, size_t *len);

/* Parse text[len] into *j (zeroed first; free with stk__journal_free even
 * on failure). Strict: every line must be as stk__journal_format writes it,
 * in order, the checksum must match, and ranks must be below world_size.
 * 0, or -1 with a message in err naming the line and what is wrong.
 * Never reads past len. Thread-safe. */
int stk__journal_parse(const char *text, size_t len, stk__journal *j, char *err,
                       size_t errlen);

/* Free what j owns and zero it. Accepts NULL and a zeroed journal. */
void stk__journal_free(stk__journal *j);

/* ---- The state directory ---------------------------------------------- */

typedef struct stk__state_dir stk__state_dir;

/* Open (creating it, mode 0700, when missing; parents must exist) the
 * directory path and take an exclusive lock on its "lock" file, held until
 * stk__state_dir_close (or the process dies, kill -9 included), so two
 * coordinators never share one state dir. 0 with *out, or -1 with err
 * (not a directory, permission, another process holds the lock). */
int stk__state_dir_open(const char *path, stk__state_dir **out, char *err, size_t errlen);

/* Read the state file: 1 with *text (caller frees, NUL-terminated) and
 * *len, 0 when there is none yet, -1 with err (unreadable, not a regular
 * file - a symbolic link is refused -, larger than STK_JOURNAL_MAX_BYTES). */
int stk__state_dir_read(stk__state_dir *d, char **text, size_t *len, char *err,
                        size_t errlen);

/* Replace the state file with text[len], atomically: write a temp file
 * (created O_EXCL|O_NOFOLLOW, so a planted symbolic link is refused),
 * fsync it, rename it over the state file, fsync the directory. A reader
 * (or a restart after a crash at any point) sees the old file or the new
 * one, never a mix. 0 or -1 with err. Not thread-safe: one writer at a
 * time (the coordinator serialises its writes). */
int stk__state_dir_write(stk__state_dir *d, const char *text, size_t len, char *err,
                         size_t errlen);

/* The path given to stk__state_dir_open (for messages). */
const char *stk__state_dir_path(const stk__state_dir *d);

/* Release the lock and free. Accepts NULL. */
void stk__state_dir_close(stk__state_dir *d);

#endif
