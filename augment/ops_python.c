/* ops_python.c - the `python(module:function, args...)` op: a user's
 * NumPy function run on each sample in a Python process that belongs to
 * one builder (docs/pipelines.md, "Python ops").
 *
 * Each builder that runs a python op gets one process, started on the
 * first sample that needs it: $STOKER_PYTHON (default /usr/bin/python3)
 * running RUNNER below with `-c`, so nothing has to be installed beside
 * the library. The process imports every python op's module from the
 * Python path (stk_limits.python_path, else $STOKER_PYTHON_PATH; only
 * modules found in those directories) and then answers one request at a
 * time: the image goes through a memfd both sides map (grown, never
 * shrunk, so there is no allocation per image after warm-up; sealed so
 * that the runner cannot shrink it under us either), and a
 * fixed 48-byte header goes over a socketpair (send with MSG_NOSIGNAL: a
 * dead runner never raises SIGPIPE in the host). The reply is a 16-byte
 * header and at most REPLY_MSG_MAX bytes of message.
 *
 * Failures: an exception in the function (or a result of the wrong shape
 * or dtype) is the user's code failing on the sample (STK_USER_CODE; in
 * why: the exception's last line, a line break, then the traceback's last
 * 2 KiB as Python formats it). The caller decides whether that fails the
 * job (the default) or makes the sample bad (job key bad_samples). A runner that exits,
 * is killed, or does not answer within the timeout ($STOKER_PYTHON_TIMEOUT seconds,
 * default 30; at least 30 s for the start, which imports numpy and the modules) is killed
 * with SIGKILL and reaped at once, and the call returns STK_UNAVAILABLE (the batch is
 * retried, nothing is substituted); the next call starts a new runner.
 *
 * The host may be a multi-threaded worker or a training process (the
 * client library's reference builds), so the child is made with fork and
 * only async-signal-safe calls before execve; every descriptor we open is
 * close-on-exec, the child closes all but its two, asks for SIGKILL when
 * the thread that started it dies (PR_SET_PDEATHSIG), and leaves the
 * terminal's process group. stk__pyop_free kills and reaps; no zombie is
 * left behind. Never aborts, never prints (the runner's own stderr is the
 * host's: a user's print goes there).
 *
 * Owns its process, socket, memfd and mapping; one per builder, used by
 * one thread at a time, so no locks.
 */
#define _GNU_SOURCE
#include "ops_python.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/error.h"
#include "plugin.h"
#include "stoker/status.h"

extern char **environ;

#define REQ_MAGIC     0x504b5453u /* "STKP" */
#define REPLY_MSG_MAX 2560
#define SHM_ALIGN     ((size_t)1 << 20)
#define START_MIN_MS  30000

enum { ST_OK = 0, ST_SAMPLE = 1, ST_SETUP = 2 };

/* The runner: argv[1] the Python path, argv[2..] one entry per chain op
 * (the op's canonical arguments, "" for ops that are not python ops).
 * Descriptor 3 is the socket, 4 the memfd. */
static const char RUNNER[] =
    "import sys, os, mmap, struct, traceback, importlib, importlib.machinery\n"
    "def reply(st, msg=''):\n"
    "    b = msg.encode('utf-8', 'replace')[-2560:]\n"
    "    os.write(3, struct.pack('<4I', 0x504b5453, st, len(b), 0) + b)\n"
    "def last_line(e):\n"
    "    return traceback.format_exception_only(type(e), e)[-1].strip()\n"
    "def with_tb(e):\n"
    "    tb = ''.join(traceback.format_exception(type(e), e, e.__traceback__))\n"
    "    tb = tb[-2048:] if len(tb) > 2048 else tb\n"
    "    return last_line(e) + '\\n' + tb.rstrip()\n"
    "def value(v):\n"
    "    for t in (int, float):\n"
    "        try:\n"
    "            return t(v)\n"
    "        except ValueError:\n"
    "            pass\n"
    "    if len(v) >= 2 and v[0] == v[-1] and v[0] in '\\'\"':\n"
    "        return v[1:-1]\n"
    "    return v\n"
    "def setup(path, specs):\n"
    "    dirs = [d for d in path.split(':') if d]\n"
    "    sys.path[:] = dirs + [p for p in sys.path if p and p not in dirs]\n"
    "    ops = []\n"
    "    for s in specs:\n"
    "        if not s:\n"
    "            ops.append(None)\n"
    "            continue\n"
    "        parts = [p.strip() for p in s.split(',')]\n"
    "        mod, _, fn = parts[0].partition(':')\n"
    "        if importlib.machinery.PathFinder.find_spec(mod, dirs) is None:\n"
    "            raise ImportError('python op %s: no module %s in the python path %s'\n"
    "                              % (parts[0], mod, path))\n"
    "        f = getattr(importlib.import_module(mod), fn, None)\n"
    "        if not callable(f):\n"
    "            raise ImportError('python op %s: module %s has no function %s'\n"
    "                              % (parts[0], mod, fn))\n"
    "        args, kw = [], {}\n"
    "        for p in parts[1:]:\n"
    "            k, eq, v = p.partition('=')\n"
    "            if eq:\n"
    "                kw[k.strip()] = value(v.strip())\n"
    "            else:\n"
    "                args.append(value(p))\n"
    "        ops.append((f, args, kw))\n"
    "    return ops\n"
    "def main():\n"
    "    try:\n"
    "        import numpy as np\n"
    "        ops = setup(sys.argv[1], sys.argv[2:])\n"
    "    except BaseException as e:\n"
    "        reply(2, last_line(e))\n"
    "        return\n"
    "    reply(0)\n"
    "    mm, size = None, 0\n"
    "    while True:\n"
    "        hdr = b''\n"
    "        while len(hdr) < 48:\n"
    "            b = os.read(3, 48 - len(hdr))\n"
    "            if not b:\n"
    "                return\n"
    "            hdr += b\n"
    "        (magic, op, h, w, c, oh, ow, oc, seed, shm) = struct.unpack('<8I2Q', hdr)\n"
    "        if magic != 0x504b5453:\n"
    "            return\n"
    "        if shm != size:\n"
    "            mm, size = mmap.mmap(4, shm), shm\n"
    "        try:\n"
    "            f, args, kw = ops[op]\n"
    "            img = np.frombuffer(mm, np.uint8, h * w * c).reshape(h, w, c)\n"
    "            out = f(img, np.random.default_rng(seed), *args, **kw)\n"
    "            del img\n"
    "            if not isinstance(out, np.ndarray):\n"
    "                raise TypeError('returned %s, not a numpy array' % "
    "type(out).__name__)\n"
    "            if out.dtype != np.uint8 or out.shape != (oh, ow, oc):\n"
    "                raise ValueError('returned %s %s, the op wants uint8 %s'\n"
    "                                 % (out.dtype, out.shape, (oh, ow, oc)))\n"
    "            np.copyto(np.frombuffer(mm, np.uint8, oh * ow * oc).reshape(oh, ow, "
    "oc),\n"
    "                      out)\n"
    "            del out\n"
    "        except Exception as e:\n"
    "            reply(1, with_tb(e))\n"
    "            continue\n"
    "        reply(0)\n"
    "main()\n";

/* The request header (both sides little-endian: Linux on x86-64/arm64). */
typedef struct {
  uint32_t magic, op, h, w, c, oh, ow, oc;
  uint64_t seed, shm;
} req_t;
_Static_assert(sizeof(req_t) == 48, "the runner unpacks 48 bytes");

typedef struct {
  uint32_t magic, status, len, pad;
} reply_t;

struct stk__pyop {
  const char *argv[STK__CHAIN_MAX_OPS + 6]; /* built once: no allocation in the child */
  char path[4096];
  char python[512];
  char args[STK__CHAIN_MAX_OPS][STK__OP_ARGS_MAX];
  int64_t timeout_ms;
  pid_t pid; /* 0: no runner */
  int sock;  /* -1 with no runner */
  int memfd;
  uint8_t *map;
  size_t mapsz; /* bytes mapped (the memfd's size) */
  uint64_t starts;
  char msg[REPLY_MSG_MAX + 1];
};

const char *stk__pyop_path(const char *limits_path) {
  if (limits_path && *limits_path) return limits_path;
  const char *e = getenv("STOKER_PYTHON_PATH");
  return e && *e ? e : NULL;
}

static int has_python(const stk__chain *c) {
  for (uint32_t i = 0; i < c->n; i++)
    if (c->ops[i].kind == STK__OP_PYTHON) return 1;
  return 0;
}

/* Kill and reap the runner, if any; the socket is closed. */
static void stop(stk__pyop *p) {
  if (p->sock >= 0) close(p->sock);
  p->sock = -1;
  if (p->pid > 0) {
    kill(p->pid, SIGKILL);
    while (waitpid(p->pid, NULL, 0) < 0 && errno == EINTR) {}
  }
  p->pid = 0;
}

/* Exactly n bytes from the runner within deadline (stk__now_ms). 0, or -1
 * with why (EOF: the runner exited; timeout). */
static int recv_all(stk__pyop *p, void *buf, size_t n, int64_t deadline, int64_t bound_ms,
                    char *why, size_t whylen) {
  size_t got = 0;
  while (got < n) {
    int64_t left = deadline - stk__now_ms();
    if (left <= 0) {
      snprintf(why, whylen, "python op: no answer within %.3g s (runner killed)",
               (double)bound_ms / 1000);
      return -1;
    }
    struct pollfd pf = {p->sock, POLLIN, 0};
    int r = poll(&pf, 1, left > 1000000 ? 1000000 : (int)left);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      snprintf(why, whylen, "python op: poll: %s", strerror(errno));
      return -1;
    }
    if (r == 0) continue;
    ssize_t k = recv(p->sock, (char *)buf + got, n - got, 0);
    if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (k <= 0) {
      /* the runner closed its end: it is exiting; its status, when it
       * comes within 200 ms (else stop() kills and reaps it) */
      int st = 0;
      pid_t w = 0;
      for (int t = 0; p->pid > 0 && t < 200 && !w; t++) {
        w = waitpid(p->pid, &st, WNOHANG);
        if (w < 0 && errno == EINTR) w = 0;
        if (!w) stk__sleep_ms(1);
      }
      if (w == p->pid) {
        p->pid = 0; /* reaped here */
        if (WIFSIGNALED(st))
          snprintf(why, whylen, "python op: the runner was killed by signal %d",
                   WTERMSIG(st));
        else
          snprintf(why, whylen, "python op: the runner exited with status %d",
                   WIFEXITED(st) ? WEXITSTATUS(st) : -1);
      } else {
        snprintf(why, whylen, "python op: the runner closed its socket%s%s",
                 k < 0 ? ": " : "", k < 0 ? strerror(errno) : "");
      }
      return -1;
    }
    got += (size_t)k;
  }
  return 0;
}

/* One reply: 0 with *status and p->msg, or -1 (the runner is gone or
 * hung: stopped). */
static int read_reply(stk__pyop *p, uint32_t *status, int64_t timeout_ms, char *why,
                      size_t whylen) {
  int64_t deadline = stk__now_ms() + timeout_ms;
  reply_t r;
  if (recv_all(p, &r, sizeof(r), deadline, timeout_ms, why, whylen)) return stop(p), -1;
  if (r.magic != REQ_MAGIC || r.len > REPLY_MSG_MAX) {
    snprintf(why, whylen, "python op: the runner's reply is garbled (runner killed)");
    return stop(p), -1;
  }
  if (recv_all(p, p->msg, r.len, deadline, timeout_ms, why, whylen)) return stop(p), -1;
  p->msg[r.len] = 0;
  *status = r.status;
  return 0;
}

/* Start the runner and wait for its import report. STK_OK;
 * STK_INVALID_ARGUMENT (a module or function is missing or failed to
 * import: why says which); STK_UNAVAILABLE (no process, or it died or
 * hung starting). */
static int start(stk__pyop *p, char *why, size_t whylen) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    return snprintf(why, whylen, "python op: socketpair: %s", strerror(errno)),
           STK_UNAVAILABLE;
  pid_t parent = getpid();
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old); /* no handler of ours in the child */
  pid_t pid = fork();
  if (pid == 0) {
    /* the child: async-signal-safe calls only, then execve */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    setpgid(0, 0);
    int s = fcntl(sv[1], F_DUPFD, 10), m = fcntl(p->memfd, F_DUPFD, 10);
    if (s < 0 || m < 0 || dup2(s, 3) != 3 || dup2(m, 4) != 4) _exit(127);
#ifdef SYS_close_range
    syscall(SYS_close_range, 5u, ~0u, 0u);
#endif
    struct sigaction dfl;
    memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < 32; sig++)
      if (sig != SIGKILL && sig != SIGSTOP) sigaction(sig, &dfl, NULL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    execve(p->python, (char *const *)p->argv, environ);
    _exit(127);
  }
  int e = errno;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  close(sv[1]);
  if (pid < 0) {
    close(sv[0]);
    return snprintf(why, whylen, "python op: fork: %s", strerror(e)), STK_UNAVAILABLE;
  }
  p->pid = pid, p->sock = sv[0];
  p->starts++;
  uint32_t st;
  /* starting (the interpreter, numpy, the modules) may take longer than
   * a call on a loaded host: at least START_MIN_MS */
  int64_t t = p->timeout_ms > START_MIN_MS ? p->timeout_ms : START_MIN_MS;
  if (read_reply(p, &st, t, why, whylen)) {
    if (strstr(why, "status 127"))
      snprintf(why, whylen, "python op: cannot run %s (exit status 127)", p->python);
    return STK_UNAVAILABLE;
  }
  if (st != ST_OK) {
    snprintf(why, whylen, "%s", p->msg);
    stop(p);
    return STK_INVALID_ARGUMENT;
  }
  return STK_OK;
}

int stk__pyop_create(stk__pyop **out, const stk__chain *c, const char *path, char *err,
                     size_t errlen) {
  *out = NULL;
  if (!has_python(c)) return STK_OK;
  if (!path || !*path)
    return stk__errf(err, errlen, STK_INVALID_ARGUMENT,
                     "the chain has a python op, but this process has no Python path "
                     "(stoker-worker --python-path DIR, or STOKER_PYTHON_PATH)");
  if (strlen(path) >= sizeof(((stk__pyop *)0)->path))
    return stk__errf(err, errlen, STK_INVALID_ARGUMENT, "Python path too long");
  stk__pyop *p = calloc(1, sizeof(*p));
  if (!p) return STK_NO_MEMORY;
  p->sock = -1;
  /* Sealed against shrinking (and against more seals): the runner maps
   * the memfd too, and one that truncated it would make our next access
   * to the mapping SIGBUS the whole worker. It may still grow it, which
   * costs it memory and us nothing. */
  p->memfd = memfd_create("stoker-pyop", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (p->memfd < 0 || fcntl(p->memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_SEAL) != 0) {
    int rc = stk__errf(err, errlen, STK_UNAVAILABLE, "python op: memfd_create: %s",
                       strerror(errno));
    if (p->memfd >= 0) close(p->memfd);
    free(p);
    return rc;
  }
  snprintf(p->path, sizeof(p->path), "%s", path);
  const char *py = getenv("STOKER_PYTHON");
  snprintf(p->python, sizeof(p->python), "%s", py && *py ? py : "/usr/bin/python3");
  const char *t = getenv("STOKER_PYTHON_TIMEOUT");
  double secs = t && *t ? strtod(t, NULL) : 30;
  p->timeout_ms = secs > 0 && secs < 86400 ? (int64_t)(secs * 1000) : 30000;
  size_t a = 0;
  p->argv[a++] = p->python;
  p->argv[a++] = "-c";
  p->argv[a++] = RUNNER;
  p->argv[a++] = p->path;
  for (uint32_t i = 0; i < c->n; i++) {
    if (c->ops[i].kind == STK__OP_PYTHON)
      memcpy(p->args[i], c->ops[i].args, sizeof(p->args[i]));
    p->argv[a++] = p->args[i];
  }
  p->argv[a] = NULL;
  *out = p;
  return STK_OK;
}

void stk__pyop_free(stk__pyop *p) {
  if (!p) return;
  stop(p);
  if (p->map) munmap(p->map, p->mapsz);
  close(p->memfd);
  free(p);
}

uint64_t stk__pyop_starts(const stk__pyop *p) { return p ? p->starts : 0; }

/* The memfd and our mapping at least need bytes. 0 or -1. */
static int shm_grow(stk__pyop *p, size_t need) {
  if (need <= p->mapsz) return 0;
  size_t sz = (need + SHM_ALIGN - 1) & ~(SHM_ALIGN - 1);
  if (ftruncate(p->memfd, (off_t)sz) != 0) return -1;
  void *m = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_SHARED, p->memfd, 0);
  if (m == MAP_FAILED) return -1;
  if (p->map) munmap(p->map, p->mapsz);
  p->map = m, p->mapsz = sz;
  return 0;
}

int stk__pyop_apply(stk__pyop *p, uint32_t op, const uint8_t *in, uint32_t w, uint32_t h,
                    uint8_t *out, uint32_t ow, uint32_t oh, uint64_t seed, char *why,
                    size_t whylen) {
  size_t ib = (size_t)w * h * 3, ob = (size_t)ow * oh * 3;
  if (shm_grow(p, ib > ob ? ib : ob))
    return snprintf(why, whylen, "python op: shared memory: %s", strerror(errno)),
           STK_NO_MEMORY;
  if (!p->pid) {
    int rc = start(p, why, whylen);
    /* an import that fails now (the module changed since the job was
     * opened) fails each sample, as a plugin op's failure does */
    if (rc) return rc == STK_INVALID_ARGUMENT ? STK_USER_CODE : rc;
  }
  memcpy(p->map, in, ib);
  req_t q = {REQ_MAGIC, op, h, w, 3, oh, ow, 3, seed, p->mapsz};
  size_t sent = 0;
  while (sent < sizeof(q)) {
    ssize_t k = send(p->sock, (const char *)&q + sent, sizeof(q) - sent, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) {
      snprintf(why, whylen, "python op: the runner is gone (%s); restarting",
               strerror(errno));
      stop(p);
      return STK_UNAVAILABLE;
    }
    sent += (size_t)k;
  }
  uint32_t st;
  if (read_reply(p, &st, p->timeout_ms, why, whylen)) return STK_UNAVAILABLE;
  if (st == ST_OK) {
    memcpy(out, p->map, ob);
    return STK_OK;
  }
  snprintf(why, whylen, "python op %s raised %s", p->args[op], p->msg);
  return STK_USER_CODE;
}

/* In directory dir: what Python may load for module mod (mod.py,
 * mod.*.so, the package directory mod and its __init__.py, and the
 * bytecode caches beside them) must pass stk__code_trusted. STK_OK or
 * STK_INVALID_ARGUMENT with err. */
static int module_trusted(const char *who, const char *dir, const char *mod, char *err,
                          size_t errlen) {
  char path[4096 + 600];
  snprintf(path, sizeof(path), "%s/__pycache__", dir);
  int rc = stk__code_trusted(who, path, err, errlen);
  DIR *d = rc ? NULL : opendir(dir);
  if (!d) return rc;
  size_t ml = strlen(mod);
  for (struct dirent *e; !rc && (e = readdir(d));) {
    if (strncmp(e->d_name, mod, ml) || (e->d_name[ml] && e->d_name[ml] != '.')) continue;
    snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
    rc = stk__code_trusted(who, path, err, errlen);
    if (!rc && !e->d_name[ml]) { /* a package: its own init and cache */
      snprintf(path, sizeof(path), "%s/%s/__init__.py", dir, e->d_name);
      rc = stk__code_trusted(who, path, err, errlen);
      snprintf(path, sizeof(path), "%s/%s/__pycache__", dir, e->d_name);
      if (!rc) rc = stk__code_trusted(who, path, err, errlen);
    }
  }
  closedir(d);
  return rc;
}

/* The code a python op runs is the operator's, as a plugin is: every
 * directory of the Python path, and each op's module in it, must be
 * writable only by root or the worker's own user (stk__code_trusted), or
 * another local user could run code as the worker. Checked at open; the
 * modules Python finds outside the path (numpy, the standard library)
 * are the system's. STK_OK or STK_INVALID_ARGUMENT with err. */
static int path_trusted(const stk__chain *c, const char *path, char *err, size_t errlen) {
  char dirs[4096];
  snprintf(dirs, sizeof(dirs), "%s", path);
  int rc = STK_OK;
  for (char *save = NULL, *dir = strtok_r(dirs, ":", &save); dir && !rc;
       dir = strtok_r(NULL, ":", &save)) {
    rc = stk__code_trusted("the Python path (--python-path)", dir, err, errlen);
    for (uint32_t i = 0; i < c->n && !rc; i++) {
      if (c->ops[i].kind != STK__OP_PYTHON) continue;
      char mod[STK__OP_ARGS_MAX], who[STK__OP_ARGS_MAX + 32];
      snprintf(mod, sizeof(mod), "%s", c->ops[i].args);
      mod[strcspn(mod, ":,")] = 0; /* validated: [A-Za-z_][A-Za-z0-9_]* */
      snprintf(who, sizeof(who), "python op module '%s'", mod);
      rc = module_trusted(who, dir, mod, err, errlen);
    }
  }
  return rc;
}

int stk__pyop_check(const stk__chain *c, const char *path, char *err, size_t errlen) {
  stk__pyop *p;
  int rc = stk__pyop_create(&p, c, path, err, errlen);
  if (rc || !p) return rc;
  if ((rc = path_trusted(c, p->path, err, errlen))) {
    stk__pyop_free(p);
    return rc;
  }
  char why[REPLY_MSG_MAX + 64] = "";
  rc = start(p, why, sizeof(why));
  stk__pyop_free(p);
  if (rc) rc = stk__errf(err, errlen, rc, "%s", why);
  return rc;
}
