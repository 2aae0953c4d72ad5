/* source_megatron.c - the megatron source: language-model token samples
 * from Megatron-LM/NeMo indexed datasets (PREFIX.idx + PREFIX.bin, format
 * in megatron.h): the .idx read into memory of our own and checked field
 * by field at open (stk__mg_parse), so what was checked is what every
 * build reads, whatever happens to the file later; the .bin mapped
 * read-only with mmap, each read checked against its size, so no build
 * reads outside it.
 *
 * What sample p of epoch e is (docs/tokens.md says the same):
 *   - The job's dataset names one or more prefixes, "a/x" or
 *     "a/x:0.7, b/y:0.3". Prefix d has S_d sequences ("documents" here, as
 *     in Megatron's GPT dataset) and T_d tokens; it offers
 *     W_d = floor((T_d - 1) / seq_len) windows per epoch.
 *   - Blend: the epoch has N samples. Without num_samples and without
 *     weights N = sum W_d and prefix d gets n_d = W_d; with weights w_d
 *     (normalized), N = num_samples or else min_d floor(W_d / w_d), n_d =
 *     floor(w_d * N), and the N - sum n_d left over go one each to the
 *     prefixes with the largest fractional part w_d*N - n_d (ties: first
 *     named). Prefix d owns the positions [start_d, start_d + n_d) of
 *     [0, N), start_d = n_0 + ... + n_(d-1).
 *   - Order: the generic addressing (core/plan.c) maps (epoch, rank, step,
 *     slot) to a position p = P_e[...] in [0, N) as for images; p lies in
 *     prefix d's range, and k = p - start_d is its window.
 *   - Documents of prefix d in epoch e are taken in the order
 *     Q_(e,d)(0), Q_(e,d)(1), ... where Q_(e,d) is stk_perm over S_d with
 *     seed mix64(seed ^ mix64(0x746f6b656e73 + d)) and epoch e; window k
 *     is the tokens [k*seq_len, k*seq_len + seq_len] (seq_len + 1 tokens)
 *     of that concatenation: tokens = the first seq_len, labels = the last.
 *   - Each worker computes, once per (epoch, prefix), the prefix sums C
 *     of the shuffled lengths (C[j] = tokens of the first j documents);
 *     window k starts in document j with C[j] <= k*seq_len < C[j+1],
 *     found by binary search: O(log S_d) per sample.
 *   - loss_mask (if asked) is 1, or 0 where the input token is eod_token
 *     (eod_mask_loss), and 0 on a whole padded sample (drop_last = false);
 *     position_ids count 0, 1, ... and, with reset_position_ids, restart
 *     at 0 after each input token equal to eod_token; index is p.
 *
 * Owns the mappings and a small cache of prefix-sum arrays shared by the
 * dataset's builders (a mutex guards it; an array in use is never freed;
 * memory: 8 bytes per sequence per cached epoch, about two epochs).
 * Token ids must be >= 0 (and fit int32 for token_dtype = int32): a build
 * that meets another fails with STK_CORRUPT naming the sequence.
 * Truncating a mapped file under a running worker is not supported (the
 * kernel would signal SIGBUS); files are checked once, at open.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "augment/megatron.h"
#include "core/core_internal.h"
#include "augment_internal.h"

#define MG_MAX_PREFIXES 16

/* ---- The .idx parser ----------------------------------------------------- */

size_t stk__mg_itemsize(int code) {
  switch (code) {
    case STK__MG_U8:
    case STK__MG_I8:
      return 1;
    case STK__MG_I16:
    case STK__MG_U16:
      return 2;
    case STK__MG_I32:
    case STK__MG_F32:
      return 4;
    case STK__MG_I64:
    case STK__MG_F64:
      return 8;
  }
  return 0;
}

#define PFAIL(...) return stk__errf(err, errlen, -1, __VA_ARGS__)

int stk__mg_parse(const unsigned char *idx, size_t idx_len, uint64_t bin_len,
                  stk__mg_index *out, char *err, size_t errlen) {
  memset(out, 0, sizeof(*out));
  if (!idx || idx_len < STK__MG_HEADER_BYTES)
    PFAIL(".idx of %zu bytes is shorter than its %d-byte header", idx_len,
          STK__MG_HEADER_BYTES);
  if (memcmp(idx, "MMIDIDX\0\0", 9) != 0)
    PFAIL(".idx does not start with the magic MMIDIDX\\0\\0 (not a Megatron index)");
  uint64_t version = stk__mg_u64(idx + 9);
  if (version != 1)
    PFAIL(".idx version %llu, only version 1 is known", (unsigned long long)version);
  int code = idx[17];
  size_t isz = stk__mg_itemsize(code);
  if (!isz) PFAIL(".idx dtype code %d is unknown (1..8)", code);
  if (code == STK__MG_F32 || code == STK__MG_F64)
    PFAIL(".idx dtype code %d is a float type: token ids must be integers", code);
  uint64_t S = stk__mg_u64(idx + 18), D = stk__mg_u64(idx + 26);
  if (S > STK__MG_MAX_SEQUENCES)
    PFAIL(".idx claims %llu sequences (at most %llu)", (unsigned long long)S,
          (unsigned long long)STK__MG_MAX_SEQUENCES);
  /* S <= 2^32 and D is checked before it is multiplied */
  uint64_t body = (uint64_t)idx_len - STK__MG_HEADER_BYTES;
  if (S * 12 > body || (body - S * 12) % 8 != 0 || (body - S * 12) / 8 != D)
    PFAIL(
        ".idx is %zu bytes but its header says %llu sequences and %llu document "
        "entries (%llu bytes of arrays after the header, %llu present): truncated or "
        "corrupt",
        idx_len, (unsigned long long)S, (unsigned long long)D,
        (unsigned long long)(D <= UINT64_MAX / 8 - S * 12 ? S * 12 + D * 8 : 0),
        (unsigned long long)body);
  out->code = code;
  out->itemsize = isz;
  out->nseq = S;
  out->ndoc = D;
  out->lens = idx + STK__MG_HEADER_BYTES;
  out->ptrs = out->lens + 4 * S;
  out->docs = out->ptrs + 8 * S;
  uint64_t total = 0;
  for (uint64_t i = 0; i < S; i++) {
    uint32_t len = stk__mg_len(out, i);
    uint64_t ptr = stk__mg_ptr(out, i);
    if (len > INT32_MAX)
      PFAIL("sequence %llu has a negative length (%d)", (unsigned long long)i,
            (int32_t)len);
    if (ptr > INT64_MAX)
      PFAIL("sequence %llu has a negative byte pointer", (unsigned long long)i);
    if (ptr % isz)
      PFAIL("sequence %llu starts at byte %llu, not a multiple of the token size %zu",
            (unsigned long long)i, (unsigned long long)ptr, isz);
    if (ptr > bin_len || (uint64_t)len > (bin_len - ptr) / isz)
      PFAIL(
          "sequence %llu (%u tokens at byte %llu) reaches past the end of the "
          ".bin (%llu bytes)",
          (unsigned long long)i, len, (unsigned long long)ptr,
          (unsigned long long)bin_len);
    total += len; /* < 2^32 sequences of < 2^31 tokens: no overflow */
  }
  out->tokens = total;
  if (D < 1) PFAIL(".idx has no document index (it holds at least the entry 0)");
  if (stk__mg_doc(out, 0) != 0) PFAIL("document index does not start at sequence 0");
  for (uint64_t i = 1; i < D; i++)
    if (stk__mg_doc(out, i) < stk__mg_doc(out, i - 1))
      PFAIL("document index out of order at entry %llu (%llu after %llu)",
            (unsigned long long)i, (unsigned long long)stk__mg_doc(out, i),
            (unsigned long long)stk__mg_doc(out, i - 1));
  if (stk__mg_doc(out, D - 1) != S)
    PFAIL("document index ends at %llu, not at the sequence count %llu",
          (unsigned long long)stk__mg_doc(out, D - 1), (unsigned long long)S);
  return 0;
}

/* ---- Opening: prefixes, mappings, blend -------------------------------- */

typedef struct mg_prefix {
  char name[STK_PATH_MAX]; /* as named in the job */
  double weight;           /* normalized; 0 when the job names none */
  void *idx_map, *bin_map;
  size_t idx_len, bin_len;
  stk__mg_index x;
  uint64_t windows;      /* W_d */
  uint64_t start, count; /* the blend range of positions */
  uint64_t doc_seed;
} mg_prefix;

/* A prefix-sum array C[0..S] of one (epoch, prefix), shared by builders. */
typedef struct mg_cum {
  struct mg_cum *next;
  uint64_t epoch;
  uint32_t prefix;
  int refs;
  stk_perm perm; /* Q_(e,d) */
  uint64_t *c;
} mg_cum;

typedef struct mg_ds {
  uint32_t nprefix;
  mg_prefix p[MG_MAX_PREFIXES];
  pthread_mutex_t mu;
  mg_cum *cache; /* guarded by mu */
  uint32_t ncache;
} mg_ds;

static void unmap_prefix(mg_prefix *p) {
  free(p->idx_map);
  if (p->bin_map) munmap(p->bin_map, p->bin_len);
  p->idx_map = p->bin_map = NULL;
}

/* Map root/rel read-only after checking it resolves under root, or with
 * copy, read it into memory of our own (malloc: free it): a mapping
 * shows what the file holds now, even a private one for pages not yet
 * written, so what is validated once must be a copy. An empty file gives
 * NULL with *len 0. */
static int map_file(const char *root, const char *rel, int copy, void **map, size_t *len,
                    char *err, size_t errlen) {
  char joined[PATH_MAX + STK_PATH_MAX + 8], real[PATH_MAX];
  snprintf(joined, sizeof(joined), "%s/%s", root, rel);
  if (!realpath(joined, real))
    return stk__errf(err, errlen, errno == ENOENT ? STK_NOT_FOUND : STK_IO, "%s: %s", rel,
                     strerror(errno));
  size_t rl = strlen(root);
  if (strncmp(real, root, rl) != 0 || (real[rl] != '/' && strcmp(root, "/") != 0))
    return stk__errf(err, errlen, STK_INVALID_ARGUMENT,
                     "%s resolves outside the data root", rel);
  int fd = open(real, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return stk__errf(err, errlen, STK_IO, "%s: %s", rel, strerror(errno));
  struct stat st;
  int rc = STK_OK;
  if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
    rc = stk__errf(err, errlen, STK_INVALID_ARGUMENT, "%s is not a regular file", rel);
  } else if ((uint64_t)st.st_size > SIZE_MAX / 2) {
    rc = stk__errf(err, errlen, STK_LIMIT, "%s is too large to map", rel);
  } else if (st.st_size > 0 && copy) {
    size_t n = (size_t)st.st_size, got = 0;
    unsigned char *m = malloc(n);
    if (!m)
      rc = stk__errf(err, errlen, STK_NO_MEMORY, "%s: no memory for %zu bytes", rel, n);
    while (m && got < n) {
      ssize_t k = pread(fd, m + got, n - got, (off_t)got);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) {
        rc = stk__errf(
            err, errlen, STK_IO, "%s: %s", rel,
            k < 0 ? strerror(errno) : "shorter than its size (changed while read)");
        break;
      }
      got += (size_t)k;
    }
    if (rc) free(m);
    else *map = m, *len = n;
  } else if (st.st_size > 0) {
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED)
      rc = stk__errf(err, errlen, STK_IO, "mmap %s: %s", rel, strerror(errno));
    else *map = m, *len = (size_t)st.st_size;
  }
  close(fd);
  return rc;
}

/* Split the job's dataset into prefixes and weights. */
static int parse_blend(const char *spec, mg_ds *m, int *weighted, char *err,
                       size_t errlen) {
  char buf[STK_PATH_MAX];
  snprintf(buf, sizeof(buf), "%s", spec);
  int nw = 0;
  char *save = NULL;
  for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    while (*tok == ' ' || *tok == '\t') tok++;
    char *e = tok + strlen(tok);
    while (e > tok && (e[-1] == ' ' || e[-1] == '\t')) *--e = 0;
    if (!*tok)
      return stk__errf(err, errlen, STK_INVALID_ARGUMENT, "dataset: an empty entry");
    if (m->nprefix == MG_MAX_PREFIXES)
      return stk__errf(err, errlen, STK_INVALID_ARGUMENT,
                       "dataset: at most %d prefixes in a blend", MG_MAX_PREFIXES);
    mg_prefix *p = &m->p[m->nprefix++];
    char *colon = strrchr(tok, ':');
    p->weight = 0;
    if (colon) {
      char *end;
      errno = 0;
      double w = strtod(colon + 1, &end);
      if (errno || end == colon + 1 || *end || !(w > 0) || !isfinite(w) || w > 1e9)
        return stk__errf(err, errlen, STK_INVALID_ARGUMENT,
                         "dataset: '%s' wants PREFIX:WEIGHT with a weight > 0", tok);
      *colon = 0;
      p->weight = w;
      nw++;
    }
    if (tok[0] == '/')
      return stk__errf(err, errlen, STK_INVALID_ARGUMENT,
                       "dataset: '%s' must be relative to the data root", tok);
    snprintf(p->name, sizeof(p->name), "%s", tok);
  }
  if (!m->nprefix)
    return stk__errf(err, errlen, STK_INVALID_ARGUMENT, "dataset names no prefix");
  if (nw && nw != (int)m->nprefix)
    return stk__errf(err, errlen, STK_INVALID_ARGUMENT,
                     "dataset: give every prefix a weight, or none");
  *weighted = nw > 0;
  return STK_OK;
}

/* Fill start/count of each prefix and ds->n (the blend, see the top). */
static int blend(stk_dataset *ds, mg_ds *m, int weighted, char *err, size_t errlen) {
  uint64_t want = ds->spec.num_samples, N = 0;
  if (!weighted) {
    for (uint32_t d = 0; d < m->nprefix; d++) m->p[d].count = m->p[d].windows;
    for (uint32_t d = 0; d < m->nprefix; d++) N += m->p[d].count;
    if (want && want != N)
      return stk__errf(err, errlen, STK_MISMATCH,
                       "job says num_samples = %llu but the dataset has %llu samples "
                       "(give weights to take a subset)",
                       (unsigned long long)want, (unsigned long long)N);
  } else {
    double sum = 0;
    for (uint32_t d = 0; d < m->nprefix; d++) sum += m->p[d].weight;
    uint64_t nat = UINT64_MAX;
    for (uint32_t d = 0; d < m->nprefix; d++) {
      m->p[d].weight /= sum;
      double cap = floor((double)m->p[d].windows / m->p[d].weight);
      uint64_t c = cap >= 1.8e19 ? UINT64_MAX : (uint64_t)cap;
      if (c < nat) nat = c;
    }
    N = want ? want : nat;
    if (N > nat)
      return stk__errf(err, errlen, STK_INVALID_ARGUMENT,
                       "num_samples = %llu needs more windows than some prefix has "
                       "(at most %llu at these weights; stoker does not repeat data "
                       "within an epoch)",
                       (unsigned long long)N, (unsigned long long)nat);
    uint64_t given = 0;
    double frac[MG_MAX_PREFIXES];
    for (uint32_t d = 0; d < m->nprefix; d++) {
      double x = m->p[d].weight * (double)N;
      uint64_t c = (uint64_t)floor(x);
      if (c > m->p[d].windows) c = m->p[d].windows;
      m->p[d].count = c;
      frac[d] = x - (double)c;
      given += c;
    }
    while (given < N) {
      int best = -1;
      for (uint32_t d = 0; d < m->nprefix; d++)
        if (m->p[d].count < m->p[d].windows && (best < 0 || frac[d] > frac[best]))
          best = (int)d;
      if (best < 0)
        return stk__errf(err, errlen, STK_INTERNAL, "blend: no room for %llu samples",
                         (unsigned long long)N);
      m->p[best].count++;
      frac[best] = -1;
      given++;
    }
  }
  uint64_t start = 0;
  for (uint32_t d = 0; d < m->nprefix; d++) {
    m->p[d].start = start;
    start += m->p[d].count;
  }
  ds->n = N;
  return STK_OK;
}

static void mg_close(stk_dataset *ds) {
  mg_ds *m = ds->impl;
  if (!m) return;
  for (uint32_t d = 0; d < m->nprefix; d++) unmap_prefix(&m->p[d]);
  for (mg_cum *c = m->cache, *n; c; c = n) {
    n = c->next;
    free(c->c);
    free(c);
  }
  pthread_mutex_destroy(&m->mu);
  free(m);
  ds->impl = NULL;
}

static int mg_open(stk_dataset *ds, char *err, size_t errlen) {
  char root[PATH_MAX], msg[384];
  if (!realpath(ds->root, root))
    return stk__errf(err, errlen, errno == ENOENT ? STK_NOT_FOUND : STK_IO,
                     "data root %s: %s", ds->root, strerror(errno));
  mg_ds *m = calloc(1, sizeof(*m));
  if (!m) return STK_NO_MEMORY;
  pthread_mutex_init(&m->mu, NULL);
  ds->impl = m;
  int weighted = 0, rc = parse_blend(ds->spec.dataset, m, &weighted, err, errlen);
  if (rc) goto fail;
  uint64_t h = 0x6d65676174726f6eull, S = ds->spec.seq_len;
  for (uint32_t d = 0; d < m->nprefix; d++) {
    mg_prefix *p = &m->p[d];
    char rel[STK_PATH_MAX + 8];
    snprintf(rel, sizeof(rel), "%s.idx", p->name);
    rc = map_file(root, rel, 1, &p->idx_map, &p->idx_len, err, errlen);
    if (rc) goto fail;
    snprintf(rel, sizeof(rel), "%s.bin", p->name);
    rc = map_file(root, rel, 0, &p->bin_map, &p->bin_len, err, errlen);
    if (rc) goto fail;
    if (stk__mg_parse(p->idx_map, p->idx_len, p->bin_len, &p->x, msg, sizeof(msg))) {
      rc = stk__errf(err, errlen, STK_CORRUPT, "%s.idx: %s", p->name, msg);
      goto fail;
    }
    p->windows = p->x.tokens > S ? (p->x.tokens - 1) / S : 0;
    if (!p->windows) {
      rc = stk__errf(err, errlen, STK_INVALID_ARGUMENT,
                     "%s holds %llu tokens, fewer than one sample of seq_len + 1 = %llu",
                     p->name, (unsigned long long)p->x.tokens, (unsigned long long)S + 1);
      goto fail;
    }
    p->doc_seed = stk__mix64(ds->spec.seed ^ stk__mix64(0x746f6b656e73ull + d));
    /* fingerprint: the index bytes and the .bin size of every prefix */
    h = stk__mix64(h ^ stk_crc32c(0, p->idx_map, p->idx_len)) ^ p->idx_len;
    h = stk__mix64(h ^ p->bin_len ^ ((uint64_t)d << 56));
  }
  rc = blend(ds, m, weighted, err, errlen);
  if (rc) goto fail;
  for (uint32_t d = 0; d < m->nprefix; d++) h = stk__mix64(h ^ m->p[d].count);
  ds->fingerprint = h;
  return STK_OK;
fail:
  mg_close(ds);
  return rc;
}

/* ---- Per-epoch prefix sums --------------------------------------------- */

/* The prefix sums of (epoch, d), computed on first use; the caller holds
 * a reference until mg_release. NULL when out of memory. */
static mg_cum *mg_acquire(mg_ds *m, uint64_t epoch, uint32_t d) {
  pthread_mutex_lock(&m->mu);
  mg_cum *c;
  for (c = m->cache; c; c = c->next)
    if (c->epoch == epoch && c->prefix == d) break;
  if (!c) {
    /* Arrays of epochs before the previous one that nobody holds go
     * first: a worker keeps at most two epochs per prefix (a boundary)
     * besides what straggling builders still hold. */
    for (mg_cum **pp = &m->cache; *pp;) {
      mg_cum *o = *pp;
      if (!o->refs && o->epoch + 1 < epoch) {
        *pp = o->next;
        m->ncache--;
        free(o->c);
        free(o);
      } else {
        pp = &o->next;
      }
    }
    c = calloc(1, sizeof(*c));
    const mg_prefix *p = &m->p[d];
    if (c) c->c = malloc((p->x.nseq + 1) * sizeof(uint64_t));
    if (!c || !c->c) {
      if (c) free(c);
      pthread_mutex_unlock(&m->mu);
      return NULL;
    }
    c->epoch = epoch, c->prefix = d;
    stk_perm_init(&c->perm, p->x.nseq, p->doc_seed, epoch);
    /* Computed under the lock: builders of the same epoch need it anyway,
     * and it happens once per (epoch, prefix) per worker. */
    uint64_t acc = 0;
    for (uint64_t j = 0; j < p->x.nseq; j++) {
      c->c[j] = acc;
      acc += stk__mg_len(&p->x, stk_perm_apply(&c->perm, j));
    }
    c->c[p->x.nseq] = acc;
    c->next = m->cache;
    m->cache = c;
    m->ncache++;
  }
  c->refs++;
  pthread_mutex_unlock(&m->mu);
  return c;
}

/* Drop a reference (the array stays cached for the other builders; see
 * mg_acquire for when it goes). */
static void mg_release(mg_ds *m, mg_cum *c) {
  if (!c) return;
  pthread_mutex_lock(&m->mu);
  c->refs--;
  pthread_mutex_unlock(&m->mu);
}

/* ---- Building ----------------------------------------------------------- */

typedef struct mg_builder {
  uint64_t epoch; /* of the arrays held */
  mg_cum *held[MG_MAX_PREFIXES];
  int64_t *w; /* seq_len + 1 tokens of the window */
} mg_builder;

static int mg_binit(stk_builder *b, char *err, size_t errlen) {
  mg_builder *g = calloc(1, sizeof(*g));
  if (g) g->w = malloc(((size_t)b->spec.seq_len + 1) * sizeof(int64_t));
  if (!g || !g->w) {
    if (g) free(g);
    return stk__errf(err, errlen, STK_NO_MEMORY, "out of memory for a token builder");
  }
  b->impl = g;
  return STK_OK;
}

static void release_all(mg_ds *m, mg_builder *g) {
  for (uint32_t d = 0; d < MG_MAX_PREFIXES; d++) {
    mg_release(m, g->held[d]);
    g->held[d] = NULL;
  }
}

static void mg_bfree(stk_builder *b) {
  mg_builder *g = b->impl;
  if (!g) return;
  release_all(b->ds->impl, g);
  free(g->w);
  free(g);
  b->impl = NULL;
}

/* Read n tokens of sequence `seq` from token `off` into out. */
static void read_tokens(const mg_prefix *p, uint64_t seq, uint64_t off, uint64_t n,
                        int64_t *out) {
  const unsigned char *src =
      (const unsigned char *)p->bin_map + stk__mg_ptr(&p->x, seq) + off * p->x.itemsize;
  switch (p->x.code) { /* the switch outside the loops: they vectorize */
    case STK__MG_U16:
      for (uint64_t t = 0; t < n; t++) out[t] = stk__mg_token(src, STK__MG_U16, t);
      break;
    case STK__MG_I32:
      for (uint64_t t = 0; t < n; t++) out[t] = stk__mg_token(src, STK__MG_I32, t);
      break;
    default:
      for (uint64_t t = 0; t < n; t++) out[t] = stk__mg_token(src, p->x.code, t);
  }
}

/* The seq_len + 1 tokens of window k of prefix d (cum: its epoch's sums). */
static int window(stk_builder *b, const mg_prefix *p, const mg_cum *c, uint64_t k) {
  mg_builder *g = b->impl;
  uint64_t need = (uint64_t)b->spec.seq_len + 1, t0 = k * b->spec.seq_len;
  /* the last j with C[j] <= t0; C[S] = T > t0 + seq_len, so j < S */
  uint64_t lo = 0, hi = p->x.nseq;
  while (hi - lo > 1) {
    uint64_t mid = lo + (hi - lo) / 2;
    if (c->c[mid] <= t0) lo = mid;
    else hi = mid;
  }
  uint64_t j = lo, off = t0 - c->c[j], got = 0;
  while (got < need) {
    if (j >= p->x.nseq) return -1; /* cannot happen: k < W_d */
    uint64_t seq = stk_perm_apply(&c->perm, j);
    uint64_t len = stk__mg_len(&p->x, seq);
    uint64_t n = len > off ? len - off : 0;
    if (n > need - got) n = need - got;
    /* The index (our copy) was checked against the .bin's size at open;
     * kept as a second line should the two ever disagree. */
    uint64_t ptr = stk__mg_ptr(&p->x, seq), isz = p->x.itemsize;
    if (ptr > p->bin_len || off + n > (p->bin_len - ptr) / isz) {
      snprintf(b->err, sizeof(b->err),
               "%.96s: sequence %llu now points outside the .bin (%llu bytes): the index "
               "or data file changed since this worker opened them; restart the worker",
               p->name, (unsigned long long)seq, (unsigned long long)p->bin_len);
      return STK_CORRUPT;
    }
    read_tokens(p, seq, off, n, g->w + got);
    for (uint64_t t = 0; t < n; t++) {
      int64_t v = g->w[got + t];
      if (v < 0 || (b->spec.token_dtype == STK_DTYPE_INT32 && v > INT32_MAX)) {
        snprintf(b->err, sizeof(b->err),
                 "%.96s: token %lld at position %llu of sequence %llu is not a token id "
                 "for token_dtype %s",
                 p->name, (long long)v, (unsigned long long)(off + t),
                 (unsigned long long)seq, stk_dtype_name(b->spec.token_dtype));
        return STK_CORRUPT;
      }
    }
    got += n;
    off = 0;
    j++;
  }
  return STK_OK;
}

static void put(unsigned char *dst, int dtype, uint64_t i, int64_t v) {
  if (dtype == STK_DTYPE_INT32) {
    int32_t x = (int32_t)v;
    memcpy(dst + 4 * i, &x, 4);
  } else {
    memcpy(dst + 8 * i, &v, 8);
  }
}

/* Write row j of every token tensor from the window in g->w. */
static void store_row(stk_builder *b, unsigned char *buf, uint32_t j, int valid) {
  const stk_job_spec *s = &b->spec;
  const stk_batch_layout *L = &b->layout;
  const int64_t *w = ((mg_builder *)b->impl)->w;
  uint64_t S = s->seq_len;
  int dt = s->token_dtype;
  size_t esz = dt == STK_DTYPE_INT32 ? 4 : 8;
  unsigned char *tok = buf + L->tensors[0].offset + esz * S * j;
  unsigned char *lab = buf + L->tensors[1].offset + esz * S * j;
  if (dt == STK_DTYPE_INT64) {
    memcpy(tok, w, 8 * S);
    memcpy(lab, w + 1, 8 * S);
  } else {
    for (uint64_t i = 0; i < S; i++) put(tok, dt, i, w[i]), put(lab, dt, i, w[i + 1]);
  }
  int tm = stk_batch_layout_find(L, "loss_mask");
  if (tm >= 0) {
    float *lm = (float *)(void *)(buf + L->tensors[tm].offset) + S * j;
    for (uint64_t i = 0; i < S; i++)
      lm[i] = !valid || (s->eod_mask_loss && w[i] == s->eod_token) ? 0.f : 1.f;
  }
  int tp = stk_batch_layout_find(L, "position_ids");
  if (tp >= 0) {
    unsigned char *pos = buf + L->tensors[tp].offset + esz * S * j;
    int64_t p = 0;
    for (uint64_t i = 0; i < S; i++) {
      if (i && s->reset_position_ids && w[i - 1] == s->eod_token) p = 0;
      put(pos, dt, i, p++);
    }
  }
}

static int mg_build(stk_builder *b, uint64_t epoch, unsigned char *buf,
                    stk_build_info *info) {
  mg_ds *m = b->ds->impl;
  mg_builder *g = b->impl;
  if (g->epoch != epoch) {
    release_all(m, g);
    g->epoch = epoch;
  }
  for (uint32_t j = 0; j < b->spec.batch_size; j++) {
    uint64_t pos = b->indices[j];
    uint32_t d = 0;
    while (d + 1 < m->nprefix && pos >= m->p[d].start + m->p[d].count) d++;
    const mg_prefix *p = &m->p[d];
    if (!g->held[d] && !(g->held[d] = mg_acquire(m, epoch, d))) {
      snprintf(b->err, sizeof(b->err), "out of memory for the prefix sums of %.160s",
               p->name);
      return STK_UNAVAILABLE;
    }
    int rc = window(b, p, g->held[d], pos - p->start);
    if (rc) return rc;
    info->bytes_read += ((uint64_t)b->spec.seq_len + 1) * p->x.itemsize;
    store_row(b, buf, j, b->mask[j]);
  }
  return STK_OK;
}

const stk__source_ops stk__megatron_source = {"megatron", mg_open,  mg_close, mg_binit,
                                              mg_bfree,   mg_build, NULL};

/* ---- For tools and tests ------------------------------------------------ */

int stk__megatron_describe(const stk_dataset *ds, uint64_t epoch, uint32_t d,
                           uint64_t *start, uint64_t *count, uint64_t *order,
                           uint64_t *nseq) {
  if (!ds || ds->spec.source != STK_SOURCE_MEGATRON) return STK_INVALID_ARGUMENT;
  const mg_ds *m = ds->impl;
  if (d >= m->nprefix) return STK_NOT_FOUND;
  const mg_prefix *p = &m->p[d];
  *start = p->start, *count = p->count, *nseq = p->x.nseq;
  if (order) {
    stk_perm q;
    stk_perm_init(&q, p->x.nseq, p->doc_seed, epoch);
    for (uint64_t j = 0; j < p->x.nseq; j++) order[j] = stk_perm_apply(&q, j);
  }
  return STK_OK;
}
