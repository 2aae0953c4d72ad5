/* tokens.c - `stoker-dataset tokens`: writes Megatron-LM/NeMo indexed
 * datasets (PREFIX.bin + PREFIX.idx, format in augment/megatron.h) from a
 * text file of pre-tokenized documents or as a synthetic corpus, checks a
 * pair with the same parser the worker uses, and dumps the samples of a
 * token job as the worker builds them (for the Python reader test and for
 * people comparing against Megatron). Tooling only: never in a library.
 */
#include "tokens.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "augment/megatron.h"

typedef struct writer {
  FILE *bin;
  int code;
  size_t isz;
  int64_t lo, hi; /* token range of the dtype */
  uint32_t *lens;
  uint64_t n, cap, bytes;
  int64_t *doc; /* tokens of the document being written */
  uint64_t dn, dcap;
} writer;

int stk__tokens_code(const char *name) {
  static const struct {
    const char *name;
    int code;
  } t[] = {{"uint8", STK__MG_U8},  {"int8", STK__MG_I8},   {"int16", STK__MG_I16},
           {"int32", STK__MG_I32}, {"int64", STK__MG_I64}, {"uint16", STK__MG_U16}};
  for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
    if (!strcmp(name, t[i].name)) return t[i].code;
  return 0;
}

static void range_of(int code, int64_t *lo, int64_t *hi) {
  switch (code) {
    case STK__MG_U8:
      *lo = 0, *hi = 255;
      return;
    case STK__MG_I8:
      *lo = -128, *hi = 127;
      return;
    case STK__MG_I16:
      *lo = -32768, *hi = 32767;
      return;
    case STK__MG_U16:
      *lo = 0, *hi = 65535;
      return;
    case STK__MG_I32:
      *lo = INT32_MIN, *hi = INT32_MAX;
      return;
  }
  *lo = INT64_MIN, *hi = INT64_MAX;
}

static int doc_push(writer *w, int64_t v) {
  if (w->dn == w->dcap) {
    uint64_t c = w->dcap ? w->dcap * 2 : 4096;
    int64_t *d = realloc(w->doc, c * sizeof(*d));
    if (!d) return -1;
    w->doc = d, w->dcap = c;
  }
  w->doc[w->dn++] = v;
  return 0;
}

/* Append the document in w->doc to the .bin, little-endian. */
static int doc_end(writer *w, char *err, size_t errlen) {
  if (w->dn > INT32_MAX) {
    snprintf(err, errlen, "document %llu has more than 2^31-1 tokens",
             (unsigned long long)w->n);
    return -1;
  }
  if (w->n == w->cap) {
    uint64_t c = w->cap ? w->cap * 2 : 1024;
    uint32_t *l = realloc(w->lens, c * sizeof(*l));
    if (!l) return stk__errf(err, errlen, -1, "out of memory");
    w->lens = l, w->cap = c;
  }
  unsigned char buf[8];
  for (uint64_t i = 0; i < w->dn; i++) {
    uint64_t u = (uint64_t)w->doc[i];
    for (size_t k = 0; k < w->isz; k++) buf[k] = (unsigned char)(u >> (8 * k));
    if (fwrite(buf, w->isz, 1, w->bin) != 1) {
      snprintf(err, errlen, "writing the .bin: %s", strerror(errno));
      return -1;
    }
  }
  w->lens[w->n++] = (uint32_t)w->dn;
  w->bytes += w->dn * w->isz;
  w->dn = 0;
  return 0;
}

static void put_u64(unsigned char *p, uint64_t v) {
  for (int k = 0; k < 8; k++) p[k] = (unsigned char)(v >> (8 * k));
}

/* The .idx of what was written: one document per sequence. */
static int write_idx(writer *w, const char *path, char *err, size_t errlen) {
  FILE *f = fopen(path, "wb");
  if (!f) return stk__errf(err, errlen, -1, "%s: %s", path, strerror(errno));
  unsigned char h[STK__MG_HEADER_BYTES], b[8];
  memcpy(h, "MMIDIDX\0\0", 9);
  put_u64(h + 9, 1);
  h[17] = (unsigned char)w->code;
  put_u64(h + 18, w->n);
  put_u64(h + 26, w->n + 1);
  int ok = fwrite(h, sizeof(h), 1, f) == 1;
  for (uint64_t i = 0; ok && i < w->n; i++) {
    for (int k = 0; k < 4; k++) b[k] = (unsigned char)(w->lens[i] >> (8 * k));
    ok = fwrite(b, 4, 1, f) == 1;
  }
  uint64_t ptr = 0;
  for (uint64_t i = 0; ok && i < w->n; i++) {
    put_u64(b, ptr);
    ptr += (uint64_t)w->lens[i] * w->isz;
    ok = fwrite(b, 8, 1, f) == 1;
  }
  for (uint64_t i = 0; ok && i <= w->n; i++) {
    put_u64(b, i);
    ok = fwrite(b, 8, 1, f) == 1;
  }
  if (fclose(f) || !ok) return stk__errf(err, errlen, -1, "writing %s failed", path);
  return 0;
}

/* Documents from text: one a line, integers separated by blanks or commas
 * (an empty line is an empty document). */
static int read_docs(writer *w, FILE *in, char *err, size_t errlen) {
  char *line = NULL;
  size_t cap = 0;
  ssize_t n;
  uint64_t lineno = 0;
  int rc = 0;
  while (!rc && (n = getline(&line, &cap, in)) >= 0) {
    lineno++;
    char *p = line;
    for (;;) {
      while (*p == ' ' || *p == '\t' || *p == ',' || *p == '\r' || *p == '\n') p++;
      if (!*p) break;
      char *end;
      errno = 0;
      long long v = strtoll(p, &end, 10);
      if (end == p || errno || (*end && !strchr(" \t,\r\n", *end))) {
        snprintf(err, errlen, "line %llu: '%.20s' is not an integer token",
                 (unsigned long long)lineno, p);
        rc = -1;
        break;
      }
      if (v < w->lo || v > w->hi) {
        snprintf(err, errlen, "line %llu: token %lld does not fit the dtype",
                 (unsigned long long)lineno, v);
        rc = -1;
        break;
      }
      if (doc_push(w, v)) {
        snprintf(err, errlen, "out of memory");
        rc = -1;
        break;
      }
      p = end;
    }
    if (!rc) rc = doc_end(w, err, errlen);
  }
  free(line);
  if (!rc && ferror(in)) rc = stk__errf(err, errlen, -1, "read error");
  return rc;
}

/* Synthetic: document i has a length in [min_len, max_len] and tokens in
 * [0, vocab) (eod excluded) drawn from stk_rng(seed, 0, i), then eod. */
static int synth_docs(writer *w, const stk__tokens_opts *o, char *err, size_t errlen) {
  for (uint64_t i = 0; i < o->synthetic; i++) {
    stk_rng r;
    stk_rng_init(&r, o->seed, 0, i);
    uint64_t span = o->max_len - o->min_len + 1;
    uint64_t len = o->min_len + stk_rng_u32(&r) % span;
    for (uint64_t t = 0; t < len; t++) {
      int64_t v = (int64_t)(stk_rng_u32(&r) % o->vocab);
      if (o->eod >= 0 && v == o->eod) v = (v + 1) % (int64_t)o->vocab;
      if (doc_push(w, v)) return stk__errf(err, errlen, -1, "out of memory");
    }
    if (o->eod >= 0 && doc_push(w, o->eod))
      return stk__errf(err, errlen, -1, "out of memory");
    if (doc_end(w, err, errlen)) return -1;
  }
  return 0;
}

int stk__tokens_write(const stk__tokens_opts *o, uint64_t *docs, uint64_t *tokens,
                      char *err, size_t errlen) {
  writer w = {0};
  w.code = o->code;
  w.isz = stk__mg_itemsize(o->code);
  range_of(o->code, &w.lo, &w.hi);
  if (!w.isz || o->code == STK__MG_F32 || o->code == STK__MG_F64)
    return stk__errf(err, errlen, -1, "unknown token dtype");
  if (o->synthetic &&
      (!o->vocab || o->vocab - 1 > (uint64_t)w.hi || o->eod > w.hi || !o->max_len ||
       o->min_len > o->max_len || o->max_len > INT32_MAX - 1))
    return snprintf(err, errlen, "synthetic: bad vocab, eod or lengths for the dtype"),
           -1;
  char path[4200];
  snprintf(path, sizeof(path), "%s.bin", o->out);
  w.bin = fopen(path, "wb");
  if (!w.bin) return stk__errf(err, errlen, -1, "%s: %s", path, strerror(errno));
  int rc = 0;
  if (o->synthetic) {
    rc = synth_docs(&w, o, err, errlen);
  } else {
    FILE *in = strcmp(o->in, "-") ? fopen(o->in, "r") : stdin;
    if (!in) rc = stk__errf(err, errlen, -1, "%s: %s", o->in, strerror(errno));
    else {
      rc = read_docs(&w, in, err, errlen);
      if (in != stdin) fclose(in);
    }
  }
  if (fclose(w.bin) && !rc) rc = stk__errf(err, errlen, -1, "writing the .bin failed");
  snprintf(path, sizeof(path), "%s.idx", o->out);
  if (!rc) rc = write_idx(&w, path, err, errlen);
  uint64_t total = 0;
  for (uint64_t i = 0; i < w.n; i++) total += w.lens[i];
  if (docs) *docs = w.n;
  if (tokens) *tokens = total;
  free(w.lens);
  free(w.doc);
  return rc;
}

int stk__tokens_check(const char *prefix, FILE *out, char *err, size_t errlen) {
  char path[4200];
  int rc = -1;
  void *m[2] = {NULL, NULL};
  size_t len[2] = {0, 0};
  for (int k = 0; k < 2; k++) {
    snprintf(path, sizeof(path), "%s.%s", prefix, k ? "bin" : "idx");
    FILE *f = fopen(path, "rb");
    struct stat st;
    if (!f || fstat(fileno(f), &st)) {
      snprintf(err, errlen, "%s: %s", path, strerror(errno));
      if (f) fclose(f);
      goto done;
    }
    len[k] = (size_t)st.st_size;
    if (len[k]) m[k] = mmap(NULL, len[k], PROT_READ, MAP_SHARED, fileno(f), 0);
    fclose(f);
    if (m[k] == MAP_FAILED) {
      m[k] = NULL;
      snprintf(err, errlen, "mmap %s: %s", path, strerror(errno));
      goto done;
    }
  }
  stk__mg_index x;
  char msg[384];
  if (stk__mg_parse(m[0], len[0], len[1], &x, msg, sizeof(msg))) {
    snprintf(err, errlen, "%s.idx: %s", prefix, msg);
    goto done;
  }
  if (out)
    fprintf(out,
            "%s: dtype code %d, %llu sequences, %llu document entries, %llu tokens\n",
            prefix, x.code, (unsigned long long)x.nseq, (unsigned long long)x.ndoc,
            (unsigned long long)x.tokens);
  rc = 0;
done:
  for (int k = 0; k < 2; k++)
    if (m[k]) munmap(m[k], len[k]);
  return rc;
}

/* One row of a token tensor as text. */
static void print_row(FILE *out, const unsigned char *p, int dtype, uint64_t n) {
  for (uint64_t i = 0; i < n; i++) {
    int64_t v;
    if (dtype == STK_DTYPE_INT32) {
      int32_t x;
      memcpy(&x, p + 4 * i, 4);
      v = x;
    } else {
      memcpy(&v, p + 8 * i, 8);
    }
    fprintf(out, i ? " %lld" : "%lld", (long long)v);
  }
  fputc('\n', out);
}

int stk__tokens_dump(const stk_job_spec *spec, const char *root, uint64_t epoch,
                     FILE *out, char *err, size_t errlen) {
  stk_dataset *ds = NULL;
  stk_builder *b = NULL;
  unsigned char *buf = NULL;
  uint64_t *order = NULL, *pos = NULL;
  int rc = stk_dataset_open(spec, root, NULL, &ds, err, errlen);
  if (rc) return rc;
  stk_job_spec s = *spec;
  s.num_samples = stk_dataset_size(ds);
  stk_batch_layout L;
  if ((rc = stk_batch_layout_of(&s, &L)) ||
      (rc = stk_builder_create(ds, &s, &b, err, errlen)))
    goto done;
  fprintf(out, "samples %llu seq_len %u\n", (unsigned long long)s.num_samples, s.seq_len);
  uint64_t start, count, nseq;
  for (uint32_t d = 0;
       stk__megatron_describe(ds, epoch, d, &start, &count, NULL, &nseq) == STK_OK; d++) {
    free(order);
    order = malloc((nseq ? nseq : 1) * sizeof(uint64_t));
    if (!order) {
      rc = STK_NO_MEMORY;
      goto done;
    }
    stk__megatron_describe(ds, epoch, d, &start, &count, order, &nseq);
    fprintf(out, "prefix %u start %llu count %llu order", d, (unsigned long long)start,
            (unsigned long long)count);
    for (uint64_t j = 0; j < nseq; j++)
      fprintf(out, " %llu", (unsigned long long)order[j]);
    fputc('\n', out);
  }
  buf = malloc(L.total_bytes);
  pos = malloc(s.batch_size * sizeof(uint64_t));
  if (!buf || !pos) {
    rc = STK_NO_MEMORY;
    goto done;
  }
  int ti = stk_batch_layout_find(&L, "index");
  uint64_t steps = stk_steps_per_epoch(&s, s.num_samples);
  size_t esz = s.token_dtype == STK_DTYPE_INT32 ? 4 : 8;
  for (uint64_t st = 0; st < steps; st++)
    for (uint32_t r = 0; r < s.world_size; r++) {
      if ((rc = stk_builder_build(b, epoch, r, st, buf, L.total_bytes, NULL))) {
        snprintf(err, errlen, "%s", stk_builder_error(b));
        goto done;
      }
      stk_batch_samples(&s, s.num_samples, epoch, r, st, pos, NULL);
      for (uint32_t j = 0; j < s.batch_size; j++) {
        fprintf(out, "sample %llu rank %u step %llu\n", (unsigned long long)pos[j], r,
                (unsigned long long)st);
        if (ti >= 0) {
          int64_t idx;
          memcpy(&idx, buf + L.tensors[ti].offset + 8 * j, 8);
          fprintf(out, "index %lld\n", (long long)idx);
        }
        for (uint32_t t = 0; t < L.ntensors; t++) {
          const stk_tensor_desc *d = &L.tensors[t];
          if (d->ndim != 2) continue;
          fprintf(out, "%s ", d->name);
          if (d->dtype == STK_DTYPE_FLOAT32) {
            const float *f =
                (const float *)(const void *)(buf + d->offset) + (size_t)s.seq_len * j;
            for (uint32_t i = 0; i < s.seq_len; i++) fprintf(out, i ? " %g" : "%g", f[i]);
            fputc('\n', out);
          } else {
            print_row(out, buf + d->offset + esz * s.seq_len * j, d->dtype, s.seq_len);
          }
        }
      }
    }
done:
  free(order);
  free(pos);
  free(buf);
  stk_builder_destroy(b);
  stk_dataset_close(ds);
  return rc;
}
