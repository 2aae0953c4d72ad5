/* common/thread.h - names for the threads stoker starts, so `top -H`,
 * `ps -L`, perf and /proc/PID/task/TID/comm tell them apart (a builder
 * from a gRPC completion-queue thread, a client's stream thread from its
 * copy thread) instead of all showing the program's name.
 */
#ifndef STOKER_COMMON_THREAD_H
#define STOKER_COMMON_THREAD_H

/* Name the calling thread: name, cut to the kernel's 15 characters.
 * Best effort (a failure changes nothing else). Thread-safe. Every name
 * starts with "stk-"; docs/operations.md lists them. */
void stk__thread_name(const char *name);

#endif
