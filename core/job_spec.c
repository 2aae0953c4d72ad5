/* job_spec.c - the job spec: defaults, the one option table that sets keys,
 * the job text grammar (stk_job_spec_parse, used for files, --set and the
 * canonical text every process receives), the canonical form and its
 * hash, validation.
 *
 * The option table is the single source of truth for job keys: parsing,
 * the canonical text (and so the job hash) and the key list come from it.
 * Each row's `help` is the one-line summary `stoker-coordinator
 * --help-job-keys` prints (stk_job_key); the users' reference is
 * docs/operations.md's job table, written by hand: a key added here gets
 * its row there too (test_docs_job_keys fails until the table names
 * exactly these keys, with their types).
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/chain.h"
#include "common/error.h"
#include "core/core_internal.h"

/* T_PIPE: a pipeline name or an op chain (chain.c); T_OPTSTR: a string
 * left out of the canonical text while empty (keys added later, so that
 * the hash of a job that does not use them stays what it was). */
typedef enum {
  T_STR,
  T_OPTSTR,
  T_U32,
  T_U64,
  T_F32,
  T_F32X3,
  T_BOOL,
  T_ENUM,
  T_TOKEN,
  T_PIPE,
  T_VIEWS,    /* a uint32 left out of the canonical text while 1 */
  T_SHUFFLE,  /* a bool stored inverted (in_order), left out while true */
  T_VIEWCHAIN /* a view's own chain (view_chain[]), left out while it has none */
} opt_type;

typedef struct {
  const char *name;
  int value;
} enum_name;

static const enum_name source_names[] = {{"synthetic", STK_SOURCE_SYNTHETIC},
                                         {"imagefolder", STK_SOURCE_IMAGEFOLDER},
                                         {"tar", STK_SOURCE_TAR},
                                         {"megatron", STK_SOURCE_MEGATRON},
                                         {NULL, 0}};
static const enum_name pipeline_names[] = {{"raw", STK_PIPELINE_RAW},
                                           {"train", STK_PIPELINE_TRAIN},
                                           {"eval", STK_PIPELINE_EVAL},
                                           {NULL, 0}};
/* dtype and token_dtype: the rows of the one dtype table (STK_DTYPE_MAP,
 * stoker/core.h) whose use is IMAGE, and TOKEN. */
#define DTYPE_ROW_IMAGE_IMAGE(text, num) {text, num},
#define DTYPE_ROW_IMAGE_TOKEN(text, num)
#define DTYPE_ROW_TOKEN_TOKEN(text, num) {text, num},
#define DTYPE_ROW_TOKEN_IMAGE(text, num)
#define DTYPE_ROW_IMAGE(name, num, text, size, use) DTYPE_ROW_IMAGE_##use(text, num)
#define DTYPE_ROW_TOKEN(name, num, text, size, use) DTYPE_ROW_TOKEN_##use(text, num)
static const enum_name dtype_names[] = {STK_DTYPE_MAP(DTYPE_ROW_IMAGE){NULL, 0}};
static const enum_name token_dtype_names[] = {STK_DTYPE_MAP(DTYPE_ROW_TOKEN){NULL, 0}};
static const enum_name layout_names[] = {
    {"nhwc", STK_LAYOUT_NHWC}, {"nchw", STK_LAYOUT_NCHW}, {NULL, 0}};

typedef struct {
  const char *name;
  opt_type type;
  size_t offset;
  size_t size; /* T_STR: buffer size */
  const enum_name *enums;
  const char *help;
} job_opt;

#define OFF(f) offsetof(stk_job_spec, f)
#define SZ(f)  sizeof(((stk_job_spec *)0)->f)
static const job_opt job_opts[] = {
    {"name", T_STR, OFF(name), SZ(name), NULL, "job id"},
    {"source", T_ENUM, OFF(source), 0, source_names,
     "synthetic | imagefolder | tar | megatron"},
    {"dataset", T_STR, OFF(dataset), SZ(dataset), NULL,
     "dataset path, relative to the worker's --data-root"},
    {"num_samples", T_U64, OFF(num_samples), 0, NULL,
     "synthetic: sample count; files: 0 = from the index"},
    {"pipeline", T_PIPE, OFF(pipeline), 0, pipeline_names,
     "raw (synthetic) | train | eval | an op chain: decode | op(args) | ..."},
    {"plugin", T_OPTSTR, OFF(plugin), SZ(plugin), NULL,
     "plugin libraries whose ops the chain names: name[,name]"},
    {"views", T_VIEWS, OFF(views), 0, NULL,
     "views per sample (1..4): tensors image0.. from independent random draws"},
    {"view1", T_VIEWCHAIN, OFF(view_chain[0]), 1, NULL,
     "view 1's own op chain (its own size; normalize/to come from pipeline)"},
    {"view2", T_VIEWCHAIN, OFF(view_chain[1]), 2, NULL, "view 2's own op chain"},
    {"view3", T_VIEWCHAIN, OFF(view_chain[2]), 3, NULL, "view 3's own op chain"},
    {"height", T_U32, OFF(height), 0, NULL, "output image height"},
    {"width", T_U32, OFF(width), 0, NULL, "output image width"},
    {"channels", T_U32, OFF(channels), 0, NULL, "output channels (3)"},
    {"dtype", T_ENUM, OFF(dtype), 0, dtype_names, "uint8 | float32 | bfloat16"},
    {"layout", T_ENUM, OFF(layout), 0, layout_names, "nhwc | nchw"},
    {"batch_size", T_U32, OFF(batch_size), 0, NULL, "samples per rank per step"},
    {"world_size", T_U32, OFF(world_size), 0, NULL, "consumer ranks"},
    {"seed", T_U64, OFF(seed), 0, NULL, "job seed"},
    {"epochs", T_U32, OFF(epochs), 0, NULL, "epochs to deliver"},
    {"drop_last", T_BOOL, OFF(drop_last), 0, NULL,
     "true: drop the remainder; false: pad it with mask = 0"},
    {"shuffle", T_SHUFFLE, OFF(in_order), 0, NULL,
     "true: epoch e in the keyed permutation P_e; false: in index order"},
    {"num_classes", T_U32, OFF(num_classes), 0, NULL,
     "label range: synthetic draws labels from it, tar checks .cls labels against it; "
     "imagefolder: the class folder count (0, its default, = take it from the "
     "dataset; any other count must match)"},
    {"synthetic_cost_us", T_U32, OFF(synthetic_cost_us), 0, NULL,
     "synthetic: CPU microseconds per sample"},
    {"resize", T_U32, OFF(resize), 0, NULL, "eval: shorter side before crop"},
    {"scale_min", T_F32, OFF(scale_min), 0, NULL, "RandomResizedCrop scale"},
    {"scale_max", T_F32, OFF(scale_max), 0, NULL, "RandomResizedCrop scale"},
    {"ratio_min", T_F32, OFF(ratio_min), 0, NULL, "RandomResizedCrop ratio"},
    {"ratio_max", T_F32, OFF(ratio_max), 0, NULL, "RandomResizedCrop ratio"},
    {"flip_p", T_F32, OFF(flip_p), 0, NULL, "horizontal flip probability"},
    {"brightness", T_F32, OFF(brightness), 0, NULL, "ColorJitter brightness"},
    {"contrast", T_F32, OFF(contrast), 0, NULL, "ColorJitter contrast"},
    {"saturation", T_F32, OFF(saturation), 0, NULL, "ColorJitter saturation"},
    {"mean", T_F32X3, OFF(mean), 0, NULL, "Normalize mean, r,g,b"},
    {"std", T_F32X3, OFF(std), 0, NULL, "Normalize std, r,g,b"},
    {"seq_len", T_U32, OFF(seq_len), 0, NULL,
     "megatron: tokens per sample (each sample reads seq_len + 1)"},
    {"token_dtype", T_ENUM, OFF(token_dtype), 0, token_dtype_names,
     "megatron: int32 | int64 (tokens, labels, position_ids)"},
    {"eod_token", T_TOKEN, OFF(eod_token), 0, NULL,
     "megatron: end-of-document token id, or none"},
    {"eod_mask_loss", T_BOOL, OFF(eod_mask_loss), 0, NULL,
     "megatron: loss_mask = 0 where the input token is eod_token"},
    {"reset_position_ids", T_BOOL, OFF(reset_position_ids), 0, NULL,
     "megatron: position_ids restart after each eod_token"},
    {"loss_mask", T_BOOL, OFF(loss_mask), 0, NULL,
     "megatron: the batch carries a float32 loss_mask tensor"},
    {"position_ids", T_BOOL, OFF(position_ids), 0, NULL,
     "megatron: the batch carries a position_ids tensor"},
    {"bad_samples", T_OPTSTR, OFF(bad_samples), SZ(bad_samples), NULL,
     "what a bad sample does: fail | substitute | substitute(N) | substitute(P%) "
     "(default: a python or plugin op error fails the job, corrupt files are "
     "substituted)"},
};
#define NOPTS (sizeof(job_opts) / sizeof(job_opts[0]))

/* The word for each type that stk_job_key gives (docs/operations.md's
 * job table uses the same words). */
static const char *const type_words[] = {
    [T_STR] = "str",        [T_OPTSTR] = "str",
    [T_U32] = "uint32",     [T_U64] = "uint64",
    [T_F32] = "float",      [T_F32X3] = "3 floats",
    [T_BOOL] = "bool",      [T_ENUM] = "enum",
    [T_TOKEN] = "token",    [T_PIPE] = "enum or chain",
    [T_VIEWS] = "uint32",   [T_SHUFFLE] = "bool",
    [T_VIEWCHAIN] = "chain"};
_Static_assert(sizeof(type_words) / sizeof(type_words[0]) == T_VIEWCHAIN + 1,
               "a word for every option type");

int stk_job_key(size_t i, const char **name, const char **type, const char **help) {
  if (i >= NOPTS) return STK_NOT_FOUND;
  if (name) *name = job_opts[i].name;
  if (type) *type = type_words[job_opts[i].type];
  if (help) *help = job_opts[i].help;
  return STK_OK;
}

void stk_job_spec_defaults(stk_job_spec *s) {
  memset(s, 0, sizeof(*s));
  snprintf(s->name, sizeof(s->name), "job");
  s->source = STK_SOURCE_SYNTHETIC;
  s->num_samples = 0; /* files: from the index; synthetic must say */
  s->pipeline = STK_PIPELINE_RAW;
  s->height = s->width = 224;
  s->channels = 3;
  s->dtype = STK_DTYPE_UINT8;
  s->layout = STK_LAYOUT_NCHW;
  s->batch_size = 32;
  s->world_size = 1;
  s->epochs = 1;
  s->drop_last = 1;
  s->num_classes = 1000; /* imagefolder: 0, see set_source */
  s->resize = 256;
  s->scale_min = 0.08f;
  s->scale_max = 1.0f;
  s->ratio_min = 3.0f / 4.0f;
  s->ratio_max = 4.0f / 3.0f;
  s->flip_p = 0.5f;
  s->mean[0] = 0.485f, s->mean[1] = 0.456f, s->mean[2] = 0.406f;
  s->std[0] = 0.229f, s->std[1] = 0.224f, s->std[2] = 0.225f;
  s->seq_len = 2048;
  s->token_dtype = STK_DTYPE_INT64;
  s->eod_token = -1;
  s->views = 1;
}

_Static_assert(sizeof(stk_job_spec) == 1992,
               "stk_job_spec changed size: take new "
               "fields out of reserved[]");
_Static_assert(offsetof(stk_job_spec, eod_token) % 8 == 0 &&
                   offsetof(stk_job_spec, plugin) ==
                       offsetof(stk_job_spec, position_ids) + 4,
               "stk_job_spec has padding among the token fields");

static int parse_u64(const char *v, uint64_t max, uint64_t *out) {
  char *end;
  if (!isdigit((unsigned char)*v)) return -1;
  errno = 0;
  unsigned long long x = strtoull(v, &end, 10);
  if (errno || *end || x > max) return -1;
  *out = x;
  return 0;
}

static int parse_f32(const char *v, float *out) {
  char *end;
  errno = 0;
  double x = strtod(v, &end);
  if (errno || end == v || *end || !isfinite(x) || fabs(x) > 2e30) return -1;
  /* The bound applies to the float, so that the canonical text of any
   * float in range (e.g. 1e30f, printed 1.00000002e+30) parses back. */
  float f = (float)x;
  if (fabsf(f) > 1e30f) return -1;
  *out = f;
  return 0;
}

/* The chains' texts of s: texts[0] the pipeline's, texts[v] view v's own
 * ("" when it has none), pointing into copy (a copy of s->chain, so that
 * the texts survive a repack of s->chain). Offsets out of the buffer or
 * texts without a NUL (a spec not set through this file) read as "". */
static void chain_texts(const stk_job_spec *s, char copy[sizeof(s->chain)],
                        const char *texts[4]) {
  memcpy(copy, s->chain, sizeof(s->chain));
  copy[sizeof(s->chain) - 1] = 0;
  texts[0] = copy;
  for (uint32_t v = 1; v <= 3; v++) {
    uint16_t off = s->view_chain[v - 1];
    texts[v] = off && off < sizeof(s->chain) ? copy + off : "";
  }
}

/* Lay texts into s->chain: texts[0] (the pipeline's) first, then each
 * view's own after the NUL of the one before (view_chain[] their
 * offsets, 0 for ""; views with equal texts share one), the rest of the
 * buffer zeroed, so that equal jobs have equal bytes. s is unchanged when
 * they do not fit. */
static int pack_chains(stk_job_spec *s, const char *const texts[4], char *err,
                       size_t errlen) {
  char buf[sizeof(s->chain)] = {0};
  uint16_t offs[3] = {0, 0, 0};
  size_t at = 0;
  for (uint32_t v = 0; v <= 3; v++) {
    size_t l = strlen(texts[v]);
    if (v && !l) continue;
    uint32_t u = 1; /* a view's text equal to an earlier view's is stored once */
    while (u < v && strcmp(texts[u], texts[v])) u++;
    if (v && u < v) {
      offs[v - 1] = offs[u - 1];
      continue;
    }
    if (l >= sizeof(buf) - at)
      return stk__errf(
          err, errlen, STK_INVALID_ARGUMENT,
          "%s: the canonical texts of pipeline and view1..view3 together are "
          "over %zu bytes (a NUL after each)",
          v ? "view chain" : "pipeline", sizeof(buf));
    if (v) offs[v - 1] = (uint16_t)at;
    memcpy(buf + at, texts[v], l + 1);
    at += l + 1;
  }
  memcpy(s->chain, buf, sizeof(buf));
  memcpy(s->view_chain, offs, sizeof(offs));
  return STK_OK;
}

/* pipeline = train | eval | raw, or a chain: its canonical text goes to
 * s->chain (before the views' own chains), its closing normalize/to set
 * mean, std, dtype and layout, and its output size (when fixed) sets
 * height and width. */
static int set_pipeline(stk_job_spec *s, const char *value, char *err, size_t errlen) {
  char copy[sizeof(s->chain)];
  const char *texts[4];
  chain_texts(s, copy, texts);
  for (const enum_name *e = pipeline_names; e->name; e++)
    if (!strcmp(e->name, value)) {
      texts[0] = "";
      int rc = pack_chains(s, texts, err, errlen);
      if (rc == STK_OK) s->pipeline = e->value;
      return rc;
    }
  static _Thread_local stk__chain c; /* 10 KiB: off the caller's stack */
  static _Thread_local char canon[sizeof(s->chain) + 1];
  stk__chain_fields f;
  int rc = stk__chain_parse(value, &c, &f, err, errlen);
  if (rc) return rc;
  size_t n = stk__chain_format(&c, canon, sizeof(canon));
  if (n >= sizeof(s->chain))
    return stk__errf(err, errlen, STK_INVALID_ARGUMENT,
                     "pipeline: the chain's canonical text is over %zu bytes",
                     sizeof(s->chain) - 1);
  texts[0] = canon;
  if ((rc = pack_chains(s, texts, err, errlen))) return rc;
  s->pipeline = STK_PIPELINE_CHAIN;
  if (f.has_norm)
    memcpy(s->mean, f.mean, sizeof(s->mean)), memcpy(s->std, f.std, sizeof(s->std));
  if (f.has_to) s->dtype = f.dtype, s->layout = f.layout;
  uint32_t h, w;
  if (stk__chain_size(&c, &h, &w, NULL, 0) == STK_OK) s->height = h, s->width = w;
  return STK_OK;
}

/* An error of the chain grammar (why, "pipeline op N ...") for the chain
 * of label ("pipeline" or "viewV"): as it is for the pipeline's, "viewV op
 * N ..." for a view's own. Returns rc. */
static int chain_err(char *err, size_t errlen, int rc, const char *label,
                     const char *why) {
  if (strncmp(label, "view", 4)) return stk__errf(err, errlen, rc, "%s", why);
  if (!strncmp(why, "pipeline ", 9))
    return stk__errf(err, errlen, rc, "%s %s", label, why + 9);
  return stk__errf(err, errlen, rc, "%s: %s", label, why);
}

/* viewV = chain: view v's own chain (canonical text packed after the
 * pipeline's) and its output size; "pipeline" (or nothing) takes it back
 * to the pipeline's chain. Its normalize and to would be the job's, shared
 * by every view: they are given once, in pipeline. */
static int set_view_chain(stk_job_spec *s, uint32_t v, const char *value, char *err,
                          size_t errlen) {
  char copy[sizeof(s->chain)];
  const char *texts[4];
  chain_texts(s, copy, texts);
  if (!value[0] || !strcmp(value, "pipeline")) {
    texts[v] = "";
    int rc = pack_chains(s, texts, err, errlen);
    if (rc == STK_OK) s->view_height[v - 1] = s->view_width[v - 1] = 0;
    return rc;
  }
  static _Thread_local stk__chain c;
  static _Thread_local char canon[sizeof(s->chain) + 1];
  stk__chain_fields f;
  char why[1024], label[8];
  snprintf(label, sizeof(label), "view%u", v);
  int rc = stk__chain_parse(value, &c, &f, why, sizeof(why));
  if (rc) return chain_err(err, errlen, rc, label, why);
  if (f.has_norm || f.has_to)
    return stk__errf(err, errlen, STK_INVALID_ARGUMENT,
                     "view%u: normalize and to apply to every view: give them once, in "
                     "pipeline (or with mean, std, dtype and layout)",
                     v);
  uint32_t h, w;
  if ((rc = stk__chain_size(&c, &h, &w, why, sizeof(why))))
    return chain_err(err, errlen, rc, label, why);
  size_t n = stk__chain_format(&c, canon, sizeof(canon));
  if (n >= sizeof(s->chain))
    return stk__errf(err, errlen, STK_INVALID_ARGUMENT,
                     "view%u: the chain's canonical text is over %zu bytes", v,
                     sizeof(s->chain) - 1);
  texts[v] = canon;
  if ((rc = pack_chains(s, texts, err, errlen))) return rc;
  s->view_height[v - 1] = h, s->view_width[v - 1] = w;
  return STK_OK;
}

/* The error for an enum key's unknown value: the nearest allowed value
 * when it looks like a typo of one, and every allowed value. */
static int enum_err(char *err, size_t errlen, const job_opt *o, const char *value) {
  char list[256] = "";
  const char *near = NULL;
  unsigned bd = 99;
  size_t n = 0;
  for (const enum_name *e = o->enums; e->name; e++) {
    unsigned d = stk__edit_distance(value, e->name);
    if (d < bd) bd = d, near = e->name;
    if (n < sizeof(list))
      n += (size_t)snprintf(list + n, sizeof(list) - n, "%s%s", n ? ", " : "", e->name);
  }
  if (!stk__typo_near(bd, strlen(value))) near = NULL;
  return stk__errf(err, errlen, STK_INVALID_ARGUMENT,
                   "'%s': unknown value '%s'%s%s%s (one of: %s)", o->name, value,
                   near ? ": did you mean '" : "", near ? near : "", near ? "'?" : "",
                   list);
}

/* source: an ImageFolder job's num_classes defaults to 0 ("the class
 * folder count", resolved from the dataset) where other sources default to
 * 1000, so changing the source to or from imagefolder moves a num_classes
 * still at the other's default. parse_text sets source before any other
 * key, so a job text may name the two in either order. */
static int set_source(stk_job_spec *s, const job_opt *o, const char *value, char *err,
                      size_t errlen) {
  for (const enum_name *e = o->enums; e->name; e++)
    if (!strcmp(e->name, value)) {
      int was = s->source == STK_SOURCE_IMAGEFOLDER;
      int now = e->value == STK_SOURCE_IMAGEFOLDER;
      if (now && !was && s->num_classes == 1000) s->num_classes = 0;
      if (was && !now && s->num_classes == 0) s->num_classes = 1000;
      s->source = e->value;
      return STK_OK;
    }
  return enum_err(err, errlen, o, value);
}

/* bad_samples: its kinds; a budget of N samples or P percent. */
enum { BAD_DEFAULT, BAD_FAIL, BAD_SUBSTITUTE, BAD_COUNT, BAD_PERCENT };
#define BAD_COUNT_MAX 999999999999999ull /* 15 digits: the text fits its field */

/* Parse a bad_samples value (spaces allowed around the parts): its kind
 * and budget. 0 or -1 (not one of the forms). */
static int parse_bad_samples(const char *v, int *kind, uint64_t *n, double *pct) {
  char t[64];
  size_t k = 0;
  for (; *v && k + 1 < sizeof(t); v++)
    if (!isspace((unsigned char)*v)) t[k++] = *v;
  if (*v) return -1;
  t[k] = 0;
  *n = 0, *pct = 0;
  if (!t[0]) return *kind = BAD_DEFAULT, 0;
  if (!strcmp(t, "fail")) return *kind = BAD_FAIL, 0;
  if (!strcmp(t, "substitute")) return *kind = BAD_SUBSTITUTE, 0;
  if (strncmp(t, "substitute(", 11) || t[k - 1] != ')') return -1;
  t[k - 1] = 0;
  char *arg = t + 11;
  size_t al = strlen(arg);
  if (al && arg[al - 1] == '%') {
    arg[al - 1] = 0;
    char *end;
    errno = 0;
    double p = strtod(arg, &end);
    if (errno || end == arg || *end || !(p > 0) || p > 100) return -1;
    *pct = p;
    return *kind = BAD_PERCENT, 0;
  }
  if (parse_u64(arg, BAD_COUNT_MAX, n)) return -1;
  return *kind = BAD_COUNT, 0;
}

/* Job key bad_samples: checked and kept in its canonical form. */
static int set_bad_samples(stk_job_spec *s, const char *value, char *err, size_t errlen) {
  int kind;
  uint64_t n;
  double pct;
  if (parse_bad_samples(value, &kind, &n, &pct))
    return stk__errf(
        err, errlen, STK_INVALID_ARGUMENT,
        "bad_samples wants fail, substitute, substitute(N) (a count of "
        "samples, at most 15 digits) or substitute(P%%) (0 < P <= 100), got '%s'",
        value);
  switch (kind) {
    case BAD_DEFAULT:
      s->bad_samples[0] = 0;
      break;
    case BAD_FAIL:
      snprintf(s->bad_samples, sizeof(s->bad_samples), "fail");
      break;
    case BAD_SUBSTITUTE:
      snprintf(s->bad_samples, sizeof(s->bad_samples), "substitute");
      break;
    case BAD_COUNT:
      snprintf(s->bad_samples, sizeof(s->bad_samples), "substitute(%" PRIu64 ")",
               n % (uint64_t)(BAD_COUNT_MAX + 1));
      break;
    default:
      snprintf(s->bad_samples, sizeof(s->bad_samples), "substitute(%.6g%%)", pct);
  }
  return STK_OK;
}

uint64_t stk_job_bad_samples_budget(const stk_job_spec *s, int user,
                                    uint64_t num_samples) {
  int kind;
  uint64_t n;
  double pct;
  char v[sizeof(s->bad_samples) + 1];
  snprintf(v, sizeof(v), "%.*s", (int)sizeof(s->bad_samples), s->bad_samples);
  if (parse_bad_samples(v, &kind, &n, &pct)) kind = BAD_DEFAULT;
  switch (kind) {
    case BAD_DEFAULT:
      return user ? 0 : UINT64_MAX;
    case BAD_FAIL:
      return 0;
    case BAD_SUBSTITUTE:
      return UINT64_MAX;
    case BAD_COUNT:
      return n;
    default:
      return (uint64_t)floor(pct / 100.0 * (double)num_samples);
  }
}

int stk_job_bad_samples_over(const stk_job_spec *s, uint64_t user, uint64_t total,
                             uint64_t num_samples) {
  if (!s->bad_samples[0]) return user > 0; /* the default */
  return total > stk_job_bad_samples_budget(s, 0, num_samples);
}

int stk_job_spec_set(stk_job_spec *s, const char *key, const char *value, char *err,
                     size_t errlen) {
  const job_opt *o = NULL;
  for (size_t i = 0; i < NOPTS; i++)
    if (strcmp(job_opts[i].name, key) == 0) o = &job_opts[i];
  if (!o) {
    const char *near = NULL;
    unsigned bd = 99;
    for (size_t i = 0; i < NOPTS; i++) {
      unsigned d = stk__edit_distance(key, job_opts[i].name);
      if (d < bd) bd = d, near = job_opts[i].name;
    }
    if (!stk__typo_near(bd, strlen(key))) near = NULL;
    return stk__errf(err, errlen, STK_INVALID_ARGUMENT,
                     "unknown job key '%s'%s%s%s (docs/operations.md, \"A job\", "
                     "lists every key)",
                     key, near ? ": did you mean '" : "", near ? near : "",
                     near ? "'?" : "");
  }
  char *field = (char *)s + o->offset;
  uint64_t u;
  if (field == (char *)&s->source) return set_source(s, o, value, err, errlen);
  if (field == s->bad_samples) return set_bad_samples(s, value, err, errlen);
  switch (o->type) {
    case T_PIPE:
      return set_pipeline(s, value, err, errlen);
    case T_VIEWCHAIN:
      return set_view_chain(s, (uint32_t)o->size, value, err, errlen);
    case T_STR:
    case T_OPTSTR:
      if (strlen(value) >= o->size)
        return stk__errf(err, errlen, STK_INVALID_ARGUMENT, "value of '%s' is too long",
                         key);
      memcpy(field, value, strlen(value) + 1);
      return STK_OK;
    case T_U32:
    case T_VIEWS:
      if (parse_u64(value, UINT32_MAX, &u))
        return stk__errf(err, errlen, STK_INVALID_ARGUMENT,
                         "'%s' wants an unsigned 32-bit integer, got '%s'", key, value);
      *(uint32_t *)field = (uint32_t)u;
      return STK_OK;
    case T_U64:
      if (parse_u64(value, UINT64_MAX, &u))
        return stk__errf(err, errlen, STK_INVALID_ARGUMENT,
                         "'%s' wants an unsigned integer, got '%s'", key, value);
      *(uint64_t *)field = u;
      return STK_OK;
    case T_F32:
      if (parse_f32(value, (float *)field))
        return stk__errf(err, errlen, STK_INVALID_ARGUMENT,
                         "'%s' wants a number, got '%s'", key, value);
      return STK_OK;
    case T_F32X3: {
      char buf[128];
      float v3[3];
      if (strlen(value) >= sizeof(buf))
        return stk__errf(err, errlen, STK_INVALID_ARGUMENT, "value of '%s' is too long",
                         key);
      strcpy(buf, value);
      char *save = NULL, *tok = strtok_r(buf, ",", &save);
      for (int i = 0; i < 3; i++) {
        while (tok && isspace((unsigned char)*tok)) tok++;
        if (!tok || parse_f32(tok, &v3[i]))
          return stk__errf(err, errlen, STK_INVALID_ARGUMENT,
                           "'%s' wants three numbers a,b,c, got '%s'", key, value);
        tok = strtok_r(NULL, ",", &save);
      }
      if (tok)
        return stk__errf(err, errlen, STK_INVALID_ARGUMENT,
                         "'%s' wants three numbers a,b,c, got '%s'", key, value);
      memcpy(field, v3, sizeof(v3));
      return STK_OK;
    }
    case T_BOOL:
    case T_SHUFFLE: {
      int32_t on = o->type == T_BOOL; /* T_SHUFFLE stores the opposite */
      if (!strcmp(value, "true") || !strcmp(value, "1") || !strcmp(value, "yes"))
        *(int32_t *)field = on;
      else if (!strcmp(value, "false") || !strcmp(value, "0") || !strcmp(value, "no"))
        *(int32_t *)field = !on;
      else
        return stk__errf(err, errlen, STK_INVALID_ARGUMENT,
                         "'%s' wants true or false, got '%s'", key, value);
      return STK_OK;
    }
    case T_TOKEN:
      if (!strcmp(value, "none")) {
        *(int64_t *)field = -1;
        return STK_OK;
      }
      if (parse_u64(value, INT64_MAX, &u))
        return stk__errf(err, errlen, STK_INVALID_ARGUMENT,
                         "'%s' wants a token id (an integer >= 0) or none, got '%s'", key,
                         value);
      *(int64_t *)field = (int64_t)u;
      return STK_OK;
    case T_ENUM:
      for (const enum_name *e = o->enums; e->name; e++)
        if (!strcmp(e->name, value)) {
          *(int32_t *)field = e->value;
          return STK_OK;
        }
      return enum_err(err, errlen, o, value);
  }
  return STK_INTERNAL;
}

/* ---- The job text: one grammar for files, --set and canonical text ----- */

#define JOB_LINE_MAX 1024      /* bytes per line, with its NUL */
#define JOB_FILE_MAX (1 << 20) /* a job file is a few hundred bytes */

/* Walk the lines of text. Each call copies the next line (without its
 * '\n') into line, drops a '#' comment, and splits "key = value" in place:
 * returns 1 with *key and *value trimmed, 0 for a blank or comment-only
 * line, -1 with a message in msg for a line too long or without '='; 2 at
 * the end of the text. */
typedef struct {
  const char *p;
  int lineno;
  char line[JOB_LINE_MAX];
} job_lines;

static int next_line(job_lines *it, char **key, char **value, char *msg, size_t msglen) {
  if (!*it->p) return 2;
  const char *nl = strchr(it->p, '\n');
  size_t n = nl ? (size_t)(nl - it->p) : strlen(it->p);
  const char *start = it->p;
  it->p += n + (nl != NULL);
  it->lineno++;
  if (n >= sizeof(it->line)) {
    snprintf(msg, msglen, "line too long (more than %d bytes)", JOB_LINE_MAX - 1);
    return -1;
  }
  memcpy(it->line, start, n);
  it->line[n] = 0;
  int r = stk__kv_split(it->line, key, value);
  if (r < 0) snprintf(msg, msglen, "expected 'key = value', got '%.64s'", *key);
  return r;
}

/* Parse text onto s; a failing line is named "<where>:<n>" (a file) or
 * "job line <n>" (where NULL). */
static int parse_text(stk_job_spec *s, const char *text, const char *where, char *err,
                      size_t errlen) {
  job_lines it = {text, 0, ""};
  char msg[320], *key, *value;
  int r;
  /* source first (set_source: it decides num_classes' default); a bad
   * value is reported by the pass below, with its line. */
  char src[64];
  if (stk_job_text_get(text, "source", src, sizeof(src)) == STK_OK)
    (void)stk_job_spec_set(s, "source", src, msg, sizeof(msg));
  while ((r = next_line(&it, &key, &value, msg, sizeof(msg))) != 2) {
    if (r == 1 && stk_job_spec_set(s, key, value, msg, sizeof(msg)) != STK_OK) r = -1;
    if (r >= 0) continue;
    if (where)
      return stk__errf(err, errlen, STK_INVALID_ARGUMENT, "%s:%d: %s", where, it.lineno,
                       msg);
    return stk__errf(err, errlen, STK_INVALID_ARGUMENT, "job line %d: %s", it.lineno,
                     msg);
  }
  return STK_OK;
}

int stk_job_spec_parse(stk_job_spec *s, const char *text, char *err, size_t errlen) {
  if (!s || !text) {
    return stk__errf(err, errlen, STK_INVALID_ARGUMENT,
                     "no job spec or no text to parse");
  }
  return parse_text(s, text, NULL, err, errlen);
}

int stk_job_text_get(const char *text, const char *key, char *value, size_t len) {
  if (value && len) value[0] = 0;
  if (!text || !key) return STK_INVALID_ARGUMENT;
  job_lines it = {text, 0, ""};
  char msg[96], *k, *v;
  int r, rc = STK_NOT_FOUND;
  while ((r = next_line(&it, &k, &v, msg, sizeof(msg))) != 2) {
    if (r != 1 || strcmp(k, key) != 0) continue; /* the last line naming key wins */
    rc = value && len && strlen(v) >= len ? STK_LIMIT : STK_OK;
    if (value && len) snprintf(value, len, "%s", v);
  }
  return rc;
}

int stk_job_spec_load(stk_job_spec *s, const char *path, char *err, size_t errlen) {
  FILE *f = fopen(path, "r");
  if (!f) {
    return stk__errf(err, errlen, STK_IO, "cannot read job file %s: %s", path,
                     strerror(errno));
  }
  char *text = malloc(JOB_FILE_MAX + 1);
  size_t n = text ? fread(text, 1, JOB_FILE_MAX + 1, f) : 0;
  const char *why = NULL;
  int rc = STK_INVALID_ARGUMENT;
  if (!text) why = "out of memory", rc = STK_NO_MEMORY;
  else if (ferror(f)) why = "read error", rc = STK_IO;
  else if (n > JOB_FILE_MAX) why = "larger than 1 MiB";
  else if (memchr(text, 0, n)) why = "holds a NUL byte (not a text file)";
  fclose(f);
  if (why) {
    stk__errf(err, errlen, 0, "job file %s: %s", path, why);
  } else {
    text[n] = 0;
    rc = parse_text(s, text, path, err, errlen);
  }
  free(text);
  return rc;
}

static const char *enum_str(const enum_name *e, int v) {
  for (; e->name; e++)
    if (e->value == v) return e->name;
  return "?";
}

size_t stk_job_spec_format(const stk_job_spec *s, char *buf, size_t len) {
  size_t n = 0;
  char tmp[sizeof(s->chain) + 64];
  for (size_t i = 0; i < NOPTS; i++) {
    const job_opt *o = &job_opts[i];
    const char *field = (const char *)s + o->offset;
    switch (o->type) {
      case T_STR:
        snprintf(tmp, sizeof(tmp), "%s = %.*s\n", o->name, (int)o->size, field);
        break;
      case T_OPTSTR:
        if (field[0])
          snprintf(tmp, sizeof(tmp), "%s = %.*s\n", o->name, (int)o->size, field);
        else tmp[0] = 0;
        break;
      case T_PIPE:
        if (*(const int32_t *)field == STK_PIPELINE_CHAIN)
          snprintf(tmp, sizeof(tmp), "%s = %.*s\n", o->name, (int)sizeof(s->chain),
                   s->chain);
        else
          snprintf(tmp, sizeof(tmp), "%s = %s\n", o->name,
                   enum_str(o->enums, *(const int32_t *)field));
        break;
      case T_U32:
        snprintf(tmp, sizeof(tmp), "%s = %" PRIu32 "\n", o->name,
                 *(const uint32_t *)field);
        break;
      case T_VIEWCHAIN: {
        uint16_t off = *(const uint16_t *)field;
        if (off && off < sizeof(s->chain))
          snprintf(tmp, sizeof(tmp), "%s = %.*s\n", o->name,
                   (int)(sizeof(s->chain) - off), s->chain + off);
        else tmp[0] = 0;
        break;
      }
      case T_VIEWS:
        if (*(const uint32_t *)field != 1)
          snprintf(tmp, sizeof(tmp), "%s = %" PRIu32 "\n", o->name,
                   *(const uint32_t *)field);
        else tmp[0] = 0;
        break;
      case T_U64:
        snprintf(tmp, sizeof(tmp), "%s = %" PRIu64 "\n", o->name,
                 *(const uint64_t *)field);
        break;
      case T_F32:
        snprintf(tmp, sizeof(tmp), "%s = %.9g\n", o->name, (double)*(const float *)field);
        break;
      case T_F32X3: {
        const float *v = (const float *)field;
        snprintf(tmp, sizeof(tmp), "%s = %.9g,%.9g,%.9g\n", o->name, (double)v[0],
                 (double)v[1], (double)v[2]);
        break;
      }
      case T_BOOL:
        snprintf(tmp, sizeof(tmp), "%s = %s\n", o->name,
                 *(const int32_t *)field ? "true" : "false");
        break;
      case T_SHUFFLE:
        if (*(const int32_t *)field) snprintf(tmp, sizeof(tmp), "%s = false\n", o->name);
        else tmp[0] = 0;
        break;
      case T_ENUM:
        snprintf(tmp, sizeof(tmp), "%s = %s\n", o->name,
                 enum_str(o->enums, *(const int32_t *)field));
        break;
      case T_TOKEN: {
        int64_t v = *(const int64_t *)field;
        if (v < 0) snprintf(tmp, sizeof(tmp), "%s = none\n", o->name);
        else snprintf(tmp, sizeof(tmp), "%s = %" PRId64 "\n", o->name, v);
        break;
      }
    }
    size_t t = strlen(tmp);
    if (buf && n < len) {
      size_t c = t < len - n ? t : len - n - 1;
      memcpy(buf + n, tmp, c);
      buf[n + c] = 0;
    }
    n += t;
  }
  if (buf && len && n == 0) buf[0] = 0;
  return n;
}

uint64_t stk_job_spec_hash(const stk_job_spec *s) {
  char buf[8192];
  size_t n = stk_job_spec_format(s, buf, sizeof(buf));
  if (n >= sizeof(buf)) n = sizeof(buf) - 1;
  uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a 64 */
  for (size_t i = 0; i < n; i++) {
    h ^= (unsigned char)buf[i];
    h *= 0x100000001b3ull;
  }
  return stk__mix64(h);
}

#define VFAIL(...) return stk__errf(err, errlen, STK_INVALID_ARGUMENT, __VA_ARGS__)

/* The token keys: checked for source = megatron; any other job must leave
 * them at their defaults (a value there would silently do nothing). */
static int validate_tokens(const stk_job_spec *s, char *err, size_t errlen) {
  if (s->source != STK_SOURCE_MEGATRON) {
    stk_job_spec d;
    stk_job_spec_defaults(&d);
    if (s->seq_len != d.seq_len || s->token_dtype != d.token_dtype ||
        s->eod_token != d.eod_token || s->eod_mask_loss || s->reset_position_ids ||
        s->loss_mask || s->position_ids)
      VFAIL(
          "seq_len, token_dtype, eod_token, eod_mask_loss, reset_position_ids, "
          "loss_mask and position_ids are for source = megatron");
    return STK_OK;
  }
  if (s->seq_len < 1 || s->seq_len > (1u << 20)) VFAIL("seq_len must be in 1..1048576");
  if (s->token_dtype != STK_DTYPE_INT32 && s->token_dtype != STK_DTYPE_INT64)
    VFAIL("token_dtype must be int32 or int64");
  if (s->eod_token < -1) VFAIL("eod_token must be a token id >= 0 or none");
  if (s->eod_token > INT32_MAX && s->token_dtype == STK_DTYPE_INT32)
    VFAIL("eod_token does not fit token_dtype = int32");
  if (s->eod_mask_loss && !s->loss_mask)
    VFAIL("eod_mask_loss needs loss_mask = true (the tensor it writes)");
  if (s->reset_position_ids && !s->position_ids)
    VFAIL("reset_position_ids needs position_ids = true (the tensor it writes)");
  if ((s->eod_mask_loss || s->reset_position_ids) && s->eod_token < 0)
    VFAIL("eod_mask_loss and reset_position_ids need eod_token");
  if (!s->drop_last && !s->loss_mask)
    VFAIL(
        "drop_last = false pads the last step: a token job then needs loss_mask = true "
        "(padded samples get loss_mask 0)");
  /* tokens + labels + loss_mask + position_ids at 8 bytes a token at most */
  if ((uint64_t)s->batch_size * s->seq_len * 8 * 4 > (2ull << 30))
    VFAIL("a token batch may hold at most 2 GiB (batch_size * seq_len too large)");
  return STK_OK;
}

/* One chain of a job (the pipeline's, label "pipeline", or view v's own,
 * "viewV"): in canonical form without normalize/to, every plugin op's
 * library named, its output size h x w, a batch op (mixup, cutmix) only
 * in the pipeline of a one-view job, random_erasing's value one a uint8
 * image can hold. */
static int validate_one_chain(const stk_job_spec *s, const char *text, const char *label,
                              uint32_t want_h, uint32_t want_w, char *err,
                              size_t errlen) {
  static _Thread_local stk__chain c; /* 10 KiB: off the caller's stack */
  static _Thread_local char canon[sizeof(s->chain) + 1];
  stk__chain_fields f;
  char why[1024];
  int rc = stk__chain_parse(text, &c, &f, why, sizeof(why));
  if (rc) return chain_err(err, errlen, rc, label, why);
  if (f.has_norm || f.has_to)
    VFAIL(
        "%s: the stored chain may not hold normalize or to (they set mean/std and "
        "dtype/layout)",
        label);
  stk__chain_format(&c, canon, sizeof(canon));
  if (strcmp(canon, text))
    VFAIL(
        "%s: chain is not in canonical form (set it with stk_job_spec_set(spec, "
        "\"%s\", ...))",
        label, label);
  if ((rc = stk__chain_check_plugins(&c, s->plugin, why, sizeof(why))))
    return chain_err(err, errlen, rc, label, why);
  uint32_t h, w;
  if ((rc = stk__chain_size(&c, &h, &w, why, sizeof(why))))
    return chain_err(err, errlen, rc, label, why);
  if (h != want_h || w != want_w)
    VFAIL("%s%s makes %ux%u images, but %s is %ux%u", label[0] == 'p' ? "the " : "",
          label, h, w, label[0] == 'p' ? "height x width" : "its stored size", want_h,
          want_w);
  for (uint32_t i = 0; i < c.n; i++) {
    const stk__op *o = &c.ops[i];
    if (stk__op_is_batch(o->kind)) {
      /* the soft targets are B x num_classes: the count must be known
       * from the job alone (imagefolder's 0 is resolved from the data) */
      if (!s->num_classes)
        VFAIL(
            "%s op %u '%s': soft targets need num_classes (the dataset's class "
            "count)",
            label, i + 1,
            o->kind == STK__OP_MIXUP    ? "mixup"
            : o->kind == STK__OP_CUTMIX ? "cutmix"
                                        : "mixup_cutmix");
      if (s->views > 1) VFAIL("%s op %u: a batch op needs views = 1", label, i + 1);
      if ((uint64_t)s->batch_size * s->num_classes * 4 > (1ull << 30))
        VFAIL(
            "the soft targets (batch_size x num_classes float32) may hold at most 1 GiB");
    }
    if (o->kind != STK__OP_RANDOM_ERASING || s->dtype != STK_DTYPE_UINT8) continue;
    if (o->kh || o->lo[2] != floorf(o->lo[2]) || o->lo[2] < 0 || o->lo[2] > 255)
      VFAIL(
          "%s op %u 'random_erasing': a uint8 image takes a value in 0..255, not "
          "random or a fraction",
          label, i + 1);
  }
  return STK_OK;
}

/* The views' own chains: each one a view of the job has (v < views), of
 * a job whose pipeline is a chain, packed after the pipeline's text;
 * views without one leave their size at 0. */
static int validate_view_chains(const stk_job_spec *s, char *err, size_t errlen) {
  if (s->pad0) VFAIL("job spec padding is not zero");
  size_t end0 = strlen(s->chain) + 1;
  for (uint32_t v = 1; v <= 3; v++) {
    uint16_t off = s->view_chain[v - 1];
    char label[8];
    snprintf(label, sizeof(label), "view%u", v);
    if (!off) {
      if (s->view_height[v - 1] || s->view_width[v - 1])
        VFAIL("%s has a size but no chain of its own", label);
      continue;
    }
    if (s->pipeline != STK_PIPELINE_CHAIN)
      VFAIL("%s: a view's own chain needs the pipeline given as an op chain", label);
    if (v >= s->views)
      VFAIL("%s has a chain of its own, but views = %u (views 0..%u)", label, s->views,
            s->views ? s->views - 1 : 0);
    if (off < end0 || off >= sizeof(s->chain) ||
        !memchr(s->chain + off, 0, sizeof(s->chain) - off))
      VFAIL(
          "%s: its chain text is not where the pipeline's ends (set it with "
          "stk_job_spec_set(spec, \"%s\", ...))",
          label, label);
    int rc = validate_one_chain(s, s->chain + off, label, s->view_height[v - 1],
                                s->view_width[v - 1], err, errlen);
    if (rc) return rc;
  }
  return STK_OK;
}

/* pipeline = chain: an image source, the chain in canonical form, its
 * output size equal to height x width, every plugin op's library named,
 * the views' own chains likewise, and the named pipelines' own keys left
 * at their defaults (a value there would silently do nothing). Other
 * pipelines leave chain and plugin empty. */
static int validate_chain(const stk_job_spec *s, char *err, size_t errlen) {
  if (!memchr(s->chain, 0, sizeof(s->chain)) || !memchr(s->plugin, 0, sizeof(s->plugin)))
    VFAIL("job spec strings are not terminated");
  int rc = validate_view_chains(s, err, errlen);
  if (rc) return rc;
  if (s->pipeline != STK_PIPELINE_CHAIN) {
    if (s->chain[0] || s->plugin[0])
      VFAIL("chain and plugin belong to a pipeline given as an op chain");
    return STK_OK;
  }
  if (s->source != STK_SOURCE_IMAGEFOLDER && s->source != STK_SOURCE_TAR)
    VFAIL("an op chain needs an image source (imagefolder or tar)");
  /* Unknown ops first: a typo is named as such, not as a geometry error. */
  for (const char *p = s->plugin; *p;) {
    const char *e = strchr(p, ',');
    size_t l = e ? (size_t)(e - p) : strlen(p);
    if (!stk__plugin_name_ok(p, l) || (e && !e[1]))
      VFAIL("plugin wants name[,name...], each [a-z][a-z0-9_]*, no spaces");
    p += l + (e ? 1 : 0);
  }
  if ((rc =
           validate_one_chain(s, s->chain, "pipeline", s->height, s->width, err, errlen)))
    return rc;
  stk_job_spec d;
  stk_job_spec_defaults(&d);
  if (s->resize != d.resize || s->scale_min != d.scale_min ||
      s->scale_max != d.scale_max || s->ratio_min != d.ratio_min ||
      s->ratio_max != d.ratio_max || s->flip_p != d.flip_p ||
      s->brightness != d.brightness || s->contrast != d.contrast ||
      s->saturation != d.saturation)
    VFAIL(
        "resize, scale_*, ratio_*, flip_p, brightness, contrast and saturation are for "
        "pipeline = train/eval; a chain gives them as op arguments");
  return STK_OK;
}

int stk_job_spec_validate(const stk_job_spec *s, char *err, size_t errlen) {
  if (!memchr(s->name, 0, sizeof(s->name)) || !memchr(s->dataset, 0, sizeof(s->dataset)))
    VFAIL("job spec strings are not terminated");
  {
    int bk;
    uint64_t bn;
    double bp;
    if (!memchr(s->bad_samples, 0, sizeof(s->bad_samples)) ||
        parse_bad_samples(s->bad_samples, &bk, &bn, &bp))
      VFAIL("bad_samples must be fail, substitute, substitute(N) or substitute(P%%)");
  }
  for (const char *p = s->name; *p; p++)
    if (!isalnum((unsigned char)*p) && !strchr("._-", *p))
      VFAIL("job name may hold only letters, digits, '.', '_' and '-'");
  if (!s->name[0]) VFAIL("job name is empty");
  if (s->source < STK_SOURCE_SYNTHETIC || s->source > STK_SOURCE_MEGATRON)
    VFAIL("unknown source %d", (int)s->source);
  int rc = validate_tokens(s, err, errlen);
  if (rc) return rc;
  if (s->pipeline < STK_PIPELINE_RAW || s->pipeline > STK_PIPELINE_CHAIN)
    VFAIL("unknown pipeline %d", (int)s->pipeline);
  if ((rc = validate_chain(s, err, errlen))) return rc;
  if (s->views < 1 || s->views > 4) VFAIL("views must be in 1..4");
  if (s->views > 1 &&
      !((s->source == STK_SOURCE_IMAGEFOLDER || s->source == STK_SOURCE_TAR) &&
        (s->pipeline == STK_PIPELINE_TRAIN || s->pipeline == STK_PIPELINE_CHAIN)))
    VFAIL("views > 1 needs an image source and a random pipeline (train or an op chain)");
  if (!stk__dtype_size(s->dtype) || s->dtype == STK_DTYPE_INT64)
    VFAIL("image dtype must be uint8, float32 or bfloat16");
  if (s->layout != STK_LAYOUT_NHWC && s->layout != STK_LAYOUT_NCHW)
    VFAIL("layout must be nhwc or nchw");
  /* The canonical text must parse back to this spec: no line breaks, no
   * comment sign, nothing the parser would trim. */
  size_t dl = strlen(s->dataset);
  for (const char *p = s->dataset; *p; p++)
    if (iscntrl((unsigned char)*p) || *p == '#')
      VFAIL("dataset may not hold '#' or control characters");
  if (dl && (isspace((unsigned char)s->dataset[0]) ||
             isspace((unsigned char)s->dataset[dl - 1])))
    VFAIL("dataset may not begin or end with a space");
  if (s->source == STK_SOURCE_SYNTHETIC) {
    if (s->pipeline != STK_PIPELINE_RAW)
      VFAIL("the synthetic source supports pipeline = raw only");
    if (s->dtype != STK_DTYPE_UINT8)
      VFAIL("pipeline = raw produces uint8 images (convert on the client)");
    if (s->num_samples == 0)
      VFAIL("the synthetic source needs num_samples (how many samples to make)");
    if (s->num_classes == 0) VFAIL("num_classes must be > 0");
    if (s->synthetic_cost_us > 10000000) VFAIL("synthetic_cost_us above 10 s per sample");
  } else if (s->source != STK_SOURCE_MEGATRON) {
    if (s->pipeline == STK_PIPELINE_RAW)
      VFAIL("pipeline = raw is for the synthetic source; use train or eval");
  }
  if (s->num_classes == 0 && s->source != STK_SOURCE_IMAGEFOLDER &&
      s->source != STK_SOURCE_MEGATRON)
    VFAIL("num_classes must be > 0 (0, the dataset's class count, is for imagefolder)");
  if (s->source != STK_SOURCE_SYNTHETIC) {
    if (!s->dataset[0]) VFAIL("source needs a dataset path");
    if (s->dataset[0] == '/' || strstr(s->dataset, ".."))
      VFAIL("dataset must be a path relative to the data root, without '..'");
  }
  if (s->channels != 3) VFAIL("channels must be 3");
  if (s->height < 1 || s->height > 8192 || s->width < 1 || s->width > 8192)
    VFAIL("height and width must be in 1..8192");
  if (s->batch_size < 1 || s->batch_size > 65536) VFAIL("batch_size must be in 1..65536");
  if (s->world_size < 1 || s->world_size > 65536) VFAIL("world_size must be in 1..65536");
  if (s->epochs < 1 || s->epochs > 1000000) VFAIL("epochs must be in 1..1000000");
  uint64_t img = 0;
  for (uint32_t v = 0; v < s->views; v++) {
    uint32_t h, w;
    stk__view_hw(s, v, &h, &w);
    img += (uint64_t)h * w * s->channels * stk__dtype_size(s->dtype) * s->batch_size;
  }
  if (img > (2ull << 30) && s->source != STK_SOURCE_MEGATRON)
    VFAIL("a batch may hold at most 2 GiB of image data");
  if (s->pipeline == STK_PIPELINE_EVAL && (s->resize < 1 || s->resize > 16384))
    VFAIL("resize must be in 1..16384");
  if (!(s->scale_min > 0 && s->scale_min <= s->scale_max && s->scale_max <= 1))
    VFAIL("need 0 < scale_min <= scale_max <= 1");
  if (!(s->ratio_min > 0 && s->ratio_min <= s->ratio_max && s->ratio_max < 100))
    VFAIL("need 0 < ratio_min <= ratio_max < 100");
  if (!(s->flip_p >= 0 && s->flip_p <= 1)) VFAIL("flip_p must be in [0, 1]");
  if (!(s->brightness >= 0 && s->contrast >= 0 && s->saturation >= 0 &&
        s->brightness <= 1 && s->contrast <= 1 && s->saturation <= 1))
    VFAIL("brightness, contrast, saturation must be in [0, 1]");
  for (int c = 0; c < 3; c++)
    if (!(s->std[c] > 1e-6f && s->std[c] < 1e6f) || !isfinite(s->mean[c]))
      VFAIL("std must be positive and mean finite");
  return STK_OK;
}
