/* chain.c - the op chain grammar: parsing `decode | op(args) | ...` into a
 * stk__chain with every default resolved, the canonical text the job hash
 * covers, the output size a chain makes, and the plugin-name checks.
 *
 * Grammar: chain := op ('|' op)*; op := name ['(' [arg (',' arg)*] ')'];
 * arg := [key '='] value; a range value is `a:b`. Spaces anywhere between
 * tokens. The closing `normalize(...)` and `to(...)` set job fields and are
 * returned apart (stk__chain_fields).
 *
 * Each op kind is one row of the op table OPS[]: its name, its argument
 * parser, its canonical text and the output size it makes, each a
 * function defined above the table. Nothing else lists the ops: the
 * "unknown op" message names the table's.
 *
 * Pure functions; no allocation (the text is copied into a stack buffer of
 * the job line's size); thread-safe.
 */
#include "core/chain.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "core/core_internal.h"

#define MAX_ARGS 12
#define TEXT_MAX 1024

typedef struct {
  int n;
  char *key[MAX_ARGS]; /* NULL: positional */
  char *val[MAX_ARGS];
  int used[MAX_ARGS];
} args_t;

typedef struct op_row op_row;

/* The op being parsed, for messages. */
typedef struct {
  unsigned index;
  const char *name;
  char *err;
  size_t errlen;
  const op_row *row; /* its row of OPS[], once its name is known */
} ctx_t;

/* What core knows of an op kind: one row per kind, indexed by it. Adding
 * an op: its row at the end of OPS[] (its kind is the row's index: no
 * constant in core/chain.h unless code must name it) and the functions
 * it names, and its row of augment/ops_kernels.c's KERNELS[], by the
 * same name. A NULL function means nothing to do: no arguments, none
 * written, the size kept. */
struct op_row {
  const char *name; /* as written in a chain; NULL: not a name (plugin ops) */
  /* its arguments into *op */
  int (*parse)(args_t *a, const ctx_t *cx, stk__op *op);
  /* a policy sub-op's magnitude check (policy_sub_op) */
  int (*magnitude)(const ctx_t *cx, double x, const char *v);
  /* its canonical arguments, after its name */
  void (*format)(const stk__op *o, char *buf, size_t len, size_t *n);
  /* the output size it makes */
  int (*size)(const stk__op *o, uint32_t i, int *fixed, uint32_t *ch, uint32_t *cw,
              char *err, size_t errlen);
};

#define OPFAIL(cx, ...) op_fail(cx, __VA_ARGS__)
__attribute__((format(printf, 2, 3))) static int op_fail(const ctx_t *cx, const char *fmt,
                                                         ...) {
  char why[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof(why), fmt, ap);
  va_end(ap);
  return stk__errf(cx->err, cx->errlen, STK_INVALID_ARGUMENT, "pipeline op %u '%s': %s",
                   cx->index, cx->name, why);
}

/* The i-th positional argument, or the one called key; NULL if absent. */
static const char *arg(args_t *a, int pos, const char *key) {
  int seen = 0;
  for (int i = 0; i < a->n; i++) {
    if (a->key[i] ? (key && !strcmp(a->key[i], key)) : seen++ == pos) {
      a->used[i] = 1;
      return a->val[i];
    }
  }
  return NULL;
}

/* STK_OK when every argument was taken by arg(). */
static int all_used(const args_t *a, const ctx_t *cx) {
  for (int i = 0; i < a->n; i++)
    if (!a->used[i]) {
      if (a->key[i]) return OPFAIL(cx, "unknown parameter '%s'", a->key[i]);
      return OPFAIL(cx, "too many arguments ('%s' is one too many)", a->val[i]);
    }
  return STK_OK;
}

static int num(const char *v, double *out) {
  if (!v || !*v) return -1;
  char *end;
  double x = strtod(v, &end);
  if (*end || !isfinite(x) || fabs(x) > 1e30) return -1;
  *out = x;
  return 0;
}

static int whole(const char *v, uint32_t lo, uint32_t hi, uint32_t *out) {
  double x;
  if (num(v, &x) || x != floor(x) || x < lo || x > hi) return -1;
  *out = (uint32_t)x;
  return 0;
}

/* "a:b" into [lo, hi] (lo <= hi), or a single number v through single(). */
static int range(const char *v, float *lo, float *hi) {
  const char *colon = v ? strchr(v, ':') : NULL;
  if (!colon) return -1;
  char a[64];
  size_t n = (size_t)(colon - v);
  if (n >= sizeof(a)) return -1;
  memcpy(a, v, n), a[n] = 0;
  double x, y;
  if (num(stk__trim(a), &x) || num(colon + 1, &y) || x > y) return -1;
  *lo = (float)x, *hi = (float)y;
  return 0;
}

/* A size: (h) or (h, w) from positional arguments 0 and 1. */
static int size_args(args_t *a, const ctx_t *cx, stk__op *op, int w_optional) {
  const char *h = arg(a, 0, "size"), *w = arg(a, 1, NULL);
  if (!h) return OPFAIL(cx, "needs a size: (s) or (height, width)");
  if (whole(h, 1, STK__CHAIN_MAX_DIM, &op->h) ||
      (w && whole(w, 1, STK__CHAIN_MAX_DIM, &op->w)))
    return OPFAIL(cx, "sizes are whole numbers in 1..%d", STK__CHAIN_MAX_DIM);
  if (!w) op->w = w_optional ? 0 : op->h;
  return STK_OK;
}

static int prob(args_t *a, const ctx_t *cx, stk__op *op, float dflt) {
  const char *v = arg(a, 0, "p");
  double x = dflt;
  if (v && (num(v, &x) || x < 0 || x > 1))
    return OPFAIL(cx, "p is a probability in [0, 1], got '%s'", v);
  op->p = (float)x;
  return STK_OK;
}

/* color_jitter's factor i: v -> [max(0, 1 - v), 1 + v] (hue: [-v, v]), or
 * an explicit a:b. */
static int jitter_arg(args_t *a, const ctx_t *cx, stk__op *op, int i, const char *key) {
  const char *v = arg(a, i, key);
  int hue = i == 3;
  if (!v) {
    op->lo[i] = op->hi[i] = hue ? 0.f : 1.f;
    return STK_OK;
  }
  if (strchr(v, ':')) {
    if (range(v, &op->lo[i], &op->hi[i]))
      return OPFAIL(cx, "%s wants v or a:b with a <= b, got '%s'", key, v);
  } else {
    double x;
    if (num(v, &x) || x < 0)
      return OPFAIL(cx, "%s must be a number >= 0, got '%s'", key, v);
    op->lo[i] = hue ? (float)-x : (float)fmax(0, 1 - x);
    op->hi[i] = hue ? (float)x : (float)(1 + x);
  }
  if (hue ? (op->lo[i] < -0.5f || op->hi[i] > 0.5f) : (op->lo[i] < 0 || op->hi[i] > 100))
    return OPFAIL(
        cx,
        hue ? "hue must stay within [-0.5, 0.5]" : "%s factors must stay within [0, 100]",
        key);
  return STK_OK;
}

/* The magnitude checks of the policies' sub-ops (op_row.magnitude): x
 * is the magnitude v reads as. STK_OK, or the error. */
static int mag_shear(const ctx_t *cx, double x, const char *v) {
  if (fabs(x) > 10) return OPFAIL(cx, "the shear factor must be within [-10, 10]");
  return STK_OK;
}

static int mag_shift(const ctx_t *cx, double x, const char *v) {
  if (fabs(x) > STK__CHAIN_MAX_DIM)
    return OPFAIL(cx, "the shift must be within [-%d, %d] pixels", STK__CHAIN_MAX_DIM,
                  STK__CHAIN_MAX_DIM);
  return STK_OK;
}

static int mag_angle(const ctx_t *cx, double x, const char *v) {
  if (fabs(x) > 360) return OPFAIL(cx, "the angle must be within [-360, 360] degrees");
  return STK_OK;
}

static int mag_bits(const ctx_t *cx, double x, const char *v) {
  if (x != floor(x) || x < 0 || x > 8)
    return OPFAIL(cx, "bits is a whole number in 0..8, got '%s'", v);
  return STK_OK;
}

static int mag_threshold(const ctx_t *cx, double x, const char *v) {
  if (x < 0 || x > 256) return OPFAIL(cx, "the threshold must be within [0, 256]");
  return STK_OK;
}

/* the enhance factors */
static int mag_factor(const ctx_t *cx, double x, const char *v) {
  if (x < 0 || x > 100) return OPFAIL(cx, "the factor must be within [0, 100]");
  return STK_OK;
}

/* A sub-op of the augmentation policies: (magnitude[, p]) with the
 * magnitude's range checked per op; lo[0] = magnitude, p = probability. */
static int policy_sub_op(args_t *a, const ctx_t *cx, stk__op *op) {
  const char *v = arg(a, 0, NULL), *pv = arg(a, 1, "p");
  double x, p = 1;
  if (!v || num(v, &x)) return OPFAIL(cx, "wants a magnitude: %s(value[, p])", cx->name);
  int rc = cx->row->magnitude(cx, x, v);
  if (rc) return rc;
  if (pv && (num(pv, &p) || p < 0 || p > 1))
    return OPFAIL(cx, "p is a probability in [0, 1], got '%s'", pv);
  op->lo[0] = op->hi[0] = (float)x;
  op->p = (float)p;
  return STK_OK;
}

/* random_erasing(p=0.5, scale=0.02:0.33, ratio=0.3:3.3, value=0|random). */
static int erasing_args(args_t *a, const ctx_t *cx, stk__op *op) {
  const char *p = arg(a, 0, "p"), *sc = arg(a, 1, "scale"), *ra = arg(a, 2, "ratio"),
             *v = arg(a, 3, "value");
  double x = 0.5;
  if (p && (num(p, &x) || x < 0 || x > 1))
    return OPFAIL(cx, "p is a probability in [0, 1], got '%s'", p);
  op->p = (float)x;
  op->lo[0] = 0.02f, op->hi[0] = 0.33f, op->lo[1] = 0.3f, op->hi[1] = 3.3f;
  if (sc && (range(sc, &op->lo[0], &op->hi[0]) || !(op->lo[0] > 0) || op->hi[0] > 1))
    return OPFAIL(cx, "scale wants a:b with 0 < a <= b <= 1, got '%s'", sc);
  if (ra && (range(ra, &op->lo[1], &op->hi[1]) || !(op->lo[1] > 0) || op->hi[1] >= 100))
    return OPFAIL(cx, "ratio wants a:b with 0 < a <= b < 100, got '%s'", ra);
  if (v && !strcmp(v, "random")) {
    op->kh = 1;
  } else if (v) {
    if (num(v, &x) || fabs(x) > 1e6)
      return OPFAIL(cx, "value is a number within [-1e6, 1e6] or random, got '%s'", v);
    op->lo[2] = (float)x;
  }
  return STK_OK;
}

/* A batch op's arguments: mixup(alpha=1, p=1, smoothing=0.1, mode=batch),
 * cutmix(alpha=1, p=1, smoothing=0.1, mode=batch, minmax=none),
 * mixup_cutmix(mixup=0.8, cutmix=1, p=1, switch=0.5, smoothing=0.1,
 * mode=batch, minmax=none) (timm's Mixup defaults and recipe). kh: the mode
 * (0 batch, 1 pair, 2 elem); hi[0], hi[1]: cutmix_minmax (hi[1] 0: none),
 * which sets cutmix's alpha to 1 as timm does. */
static int mix_args(args_t *a, const ctx_t *cx, stk__op *op) {
  int both = op->kind == STK__OP_MIXUP_CUTMIX, cut = op->kind == STK__OP_CUTMIX;
  const char *ma = both ? arg(a, 0, "mixup") : NULL,
             *ca = both ? arg(a, 1, "cutmix") : NULL,
             *al = both ? NULL : arg(a, 0, "alpha"), *p = arg(a, both ? 2 : 1, "p"),
             *sw = both ? arg(a, 3, "switch") : NULL,
             *sm = arg(a, both ? 4 : 2, "smoothing"), *md = arg(a, both ? 5 : 3, "mode"),
             *mm = both || cut ? arg(a, both ? 6 : 4, "minmax") : NULL;
  double m = both ? 0.8 : op->kind == STK__OP_MIXUP ? 1 : 0;
  double c = both ? 1 : cut ? 1 : 0, x;
  if (al && (num(al, &x) || !(x > 0) || x > 1000))
    return OPFAIL(cx, "alpha must be in (0, 1000], got '%s'", al);
  if (al && op->kind == STK__OP_MIXUP) m = x;
  if (al && cut) c = x;
  if (ma && (num(ma, &m) || m < 0 || m > 1000))
    return OPFAIL(cx, "mixup is an alpha in [0, 1000] (0: off), got '%s'", ma);
  if (ca && (num(ca, &c) || c < 0 || c > 1000))
    return OPFAIL(cx, "cutmix is an alpha in [0, 1000] (0: off), got '%s'", ca);
  if (mm && (range(mm, &op->hi[0], &op->hi[1]) || op->hi[0] < 0 ||
             !(op->hi[1] > op->hi[0]) || op->hi[1] > 1))
    return OPFAIL(cx, "minmax wants a:b with 0 <= a < b <= 1, got '%s'", mm);
  if (mm) c = 1; /* timm: cutmix_minmax forces cutmix_alpha = 1 */
  if (!(m > 0) && !(c > 0)) return OPFAIL(cx, "mixup or cutmix needs an alpha > 0");
  op->lo[0] = (float)m, op->lo[1] = (float)c;
  op->p = 1, op->lo[2] = 0.5f, op->lo[3] = 0.1f;
  if (p && (num(p, &x) || x < 0 || x > 1))
    return OPFAIL(cx, "p is a probability in [0, 1], got '%s'", p);
  if (p) op->p = (float)x;
  if (sw && (num(sw, &x) || x < 0 || x > 1))
    return OPFAIL(cx, "switch is a probability in [0, 1], got '%s'", sw);
  if (sw) op->lo[2] = (float)x;
  if (sm && (num(sm, &x) || x < 0 || x >= 1))
    return OPFAIL(cx, "smoothing must be in [0, 1), got '%s'", sm);
  if (sm) op->lo[3] = (float)x;
  if (md && strcmp(md, "batch") && strcmp(md, "pair") && strcmp(md, "elem"))
    return OPFAIL(cx, "mode is batch, pair or elem, got '%s'", md);
  op->kh = !md || !strcmp(md, "batch") ? 0 : !strcmp(md, "pair") ? 1 : 2;
  return STK_OK;
}

/* rand_augment(num_ops=2, magnitude=9, num_magnitude_bins=31) and
 * trivial_augment_wide(num_magnitude_bins=31): kh, kw, pad. */
static int policy_args(args_t *a, const ctx_t *cx, stk__op *op) {
  int ra = op->kind == STK__OP_RAND_AUGMENT;
  const char *n = ra ? arg(a, 0, "num_ops") : NULL,
             *m = ra ? arg(a, 1, "magnitude") : NULL,
             *b = arg(a, ra ? 2 : 0, "num_magnitude_bins");
  op->kh = 2, op->kw = 9, op->pad = 31;
  if (b && whole(b, 2, 1000, &op->pad))
    return OPFAIL(cx, "num_magnitude_bins is a whole number in 2..1000, got '%s'", b);
  if (n && whole(n, 0, 16, &op->kh))
    return OPFAIL(cx, "num_ops is a whole number in 0..16, got '%s'", n);
  if (m && whole(m, 0, 999, &op->kw))
    return OPFAIL(
        cx, "magnitude is a whole number in 0..num_magnitude_bins - 1, got '%s'", m);
  if (ra && op->kw >= op->pad)
    return OPFAIL(cx, "magnitude %u is not below num_magnitude_bins %u", op->kw, op->pad);
  if (!ra) op->kh = 1, op->kw = 0;
  return STK_OK;
}

/* aug_mix(severity=3, width=3, depth=-1, alpha=1, all_ops=1): kh, kw,
 * pad (depth; 0 for -1), lo[0], lo[1]. */
static int augmix_args(args_t *a, const ctx_t *cx, stk__op *op) {
  const char *sv = arg(a, 0, "severity"), *wd = arg(a, 1, "width"),
             *dp = arg(a, 2, "depth"), *al = arg(a, 3, "alpha"),
             *ao = arg(a, 4, "all_ops");
  op->kh = 3, op->kw = 3, op->pad = 0, op->lo[0] = 1, op->lo[1] = 1;
  double x;
  if (sv && whole(sv, 1, 10, &op->kh))
    return OPFAIL(cx, "severity is a whole number in 1..10, got '%s'", sv);
  if (wd && whole(wd, 1, 16, &op->kw))
    return OPFAIL(cx, "width is a whole number in 1..16, got '%s'", wd);
  if (dp && (num(dp, &x) || x != -1) && whole(dp, 1, 16, &op->pad))
    return OPFAIL(cx, "depth is -1 (1..3 drawn) or a whole number in 1..16, got '%s'",
                  dp);
  if (al && (num(al, &x) || !(x > 0) || x > 1000))
    return OPFAIL(cx, "alpha must be in (0, 1000], got '%s'", al);
  if (al) op->lo[0] = (float)x;
  if (ao && strcmp(ao, "0") && strcmp(ao, "1"))
    return OPFAIL(cx, "all_ops is 0 or 1, got '%s'", ao);
  if (ao) op->lo[1] = ao[0] == '1';
  op->p = 1;
  return STK_OK;
}

int stk__plugin_name_ok(const char *name, size_t len) {
  if (len < 1 || len >= STK__OP_NAME_MAX || !islower((unsigned char)name[0])) return 0;
  for (size_t i = 0; i < len; i++)
    if (!islower((unsigned char)name[i]) && !isdigit((unsigned char)name[i]) &&
        name[i] != '_')
      return 0;
  return 1;
}

/* The argument list of one op: inner is the text between the parentheses
 * (modified in place). */
static int split_args(char *inner, args_t *a, const ctx_t *cx) {
  memset(a, 0, sizeof(*a));
  if (!*stk__trim(inner)) return STK_OK;
  char *p = inner;
  for (;;) {
    char *comma = strchr(p, ',');
    if (comma) *comma = 0;
    if (a->n == MAX_ARGS) return OPFAIL(cx, "more than %d arguments", MAX_ARGS);
    char *eq = strchr(p, '=');
    if (eq) {
      *eq = 0;
      a->key[a->n] = stk__trim(p);
      p = eq + 1;
      if (!*a->key[a->n]) return OPFAIL(cx, "a parameter name is missing before '='");
    }
    a->val[a->n] = stk__trim(p);
    if (!*a->val[a->n]) return OPFAIL(cx, "an argument is empty");
    a->n++;
    if (!comma) break;
    p = comma + 1;
  }
  return STK_OK;
}

static int parse_normalize(args_t *a, const ctx_t *cx, stk__chain_fields *f) {
  const char *v = arg(a, 0, NULL);
  if (v && a->n == 1 && !a->key[0] && (!strcmp(v, "imagenet") || !strcmp(v, "none"))) {
    int in = !strcmp(v, "imagenet");
    static const float m[3] = {0.485f, 0.456f, 0.406f}, s[3] = {0.229f, 0.224f, 0.225f};
    for (int c = 0; c < 3; c++) f->mean[c] = in ? m[c] : 0, f->std[c] = in ? s[c] : 1;
  } else {
    /* normalize(m0, m1, m2, s0, s1, s2) */
    for (int i = 0; i < 6; i++) {
      const char *x = i ? arg(a, i, NULL) : v;
      double d;
      if (num(x, &d) || (i >= 3 && !(d > 1e-6 && d < 1e6)))
        return OPFAIL(cx,
                      "wants imagenet, none, or six numbers mean_r, mean_g, mean_b, "
                      "std_r, std_g, std_b (std > 0)");
      (i < 3 ? f->mean : f->std)[i % 3] = (float)d;
    }
  }
  f->has_norm = 1;
  return all_used(a, cx);
}

static int parse_to(args_t *a, const ctx_t *cx, stk__chain_fields *f) {
  const char *d = arg(a, 0, "dtype"), *l = arg(a, 1, "layout");
  if (!d) return OPFAIL(cx, "wants a dtype: to(float32[, nchw])");
  int dt = stk_dtype_from_name(d); /* the one table: stoker/core.h */
  if (!stk__dtype_is_image(dt))
    return OPFAIL(cx, "dtype must be uint8, float32 or bfloat16, got '%s'", d);
  f->dtype = dt;
  f->layout = STK_LAYOUT_NCHW;
  if (l && !strcmp(l, "nhwc")) f->layout = STK_LAYOUT_NHWC;
  else if (l && strcmp(l, "nchw")) return OPFAIL(cx, "layout must be nchw or nhwc");
  f->has_to = 1;
  return all_used(a, cx);
}

/* The arguments of a plugin or python op not yet taken, canonical: each
 * trimmed, joined by ", " into out (STK__OP_ARGS_MAX bytes); all taken. */
static int canon_args(args_t *a, const ctx_t *cx, char *out) {
  size_t n = 0;
  out[0] = 0;
  for (int i = 0; i < a->n; i++) {
    if (a->used[i]) continue;
    int w = snprintf(out + n, STK__OP_ARGS_MAX - n, "%s%s%s%s", n ? ", " : "",
                     a->key[i] ? a->key[i] : "", a->key[i] ? "=" : "", a->val[i]);
    if (w < 0 || (size_t)w >= STK__OP_ARGS_MAX - n)
      return OPFAIL(cx, "arguments longer than %d bytes", STK__OP_ARGS_MAX - 1);
    n += (size_t)w;
    a->used[i] = 1;
  }
  for (const char *p = out; *p; p++)
    if (strchr("|()#", *p) || iscntrl((unsigned char)*p))
      return OPFAIL(cx,
                    "arguments may not hold '|', '(', ')', '#' or control characters");
  return STK_OK;
}

/* "h:w", both whole numbers in 1..STK__CHAIN_MAX_DIM. 0 or -1. */
static int size_pair(const char *v, uint32_t *h, uint32_t *w) {
  const char *colon = strchr(v, ':');
  char a[32];
  size_t n = colon ? (size_t)(colon - v) : 0;
  if (!colon || n >= sizeof(a)) return -1;
  memcpy(a, v, n), a[n] = 0;
  return whole(stk__trim(a), 1, STK__CHAIN_MAX_DIM, h) ||
                 whole(colon + 1, 1, STK__CHAIN_MAX_DIM, w)
             ? -1
             : 0;
}

/* module:function, each a Python identifier ([A-Za-z_][A-Za-z0-9_]*), the
 * function not private ('_' first). */
static int python_target_ok(const char *v) {
  const char *colon = strchr(v, ':');
  if (!colon || colon == v || !colon[1] || colon[1] == '_') return 0;
  for (const char *p = v; *p; p++) {
    if (p == colon) continue;
    int first = p == v || p == colon + 1;
    if (!(isalpha((unsigned char)*p) || *p == '_' ||
          (!first && isdigit((unsigned char)*p))))
      return 0;
  }
  return 1;
}

/* ---- each op's arguments (op_row.parse): a, the op's arguments, into
 * *op (zeroed, kind set); STK_OK or the error. Arguments left untaken are
 * refused after (all_used). ---- */

static int parse_rrc(args_t *a, const ctx_t *cx, stk__op *op) {
  int rc;
  if ((rc = size_args(a, cx, op, 0))) return rc;
  const char *sc = arg(a, 2, "scale"), *ra = arg(a, 3, "ratio");
  op->lo[0] = 0.08f, op->hi[0] = 1.f;
  op->lo[1] = 3.f / 4.f, op->hi[1] = 4.f / 3.f;
  if (sc && (range(sc, &op->lo[0], &op->hi[0]) || !(op->lo[0] > 0) || op->hi[0] > 1))
    return OPFAIL(cx, "scale wants a:b with 0 < a <= b <= 1, got '%s'", sc);
  if (ra && (range(ra, &op->lo[1], &op->hi[1]) || !(op->lo[1] > 0) || op->hi[1] >= 100))
    return OPFAIL(cx, "ratio wants a:b with 0 < a <= b < 100, got '%s'", ra);
  return STK_OK;
}

/* resize(s) (w = 0: the shorter side) or resize(h, w) */
static int parse_resize(args_t *a, const ctx_t *cx, stk__op *op) {
  return size_args(a, cx, op, 1);
}

static int parse_center_crop(args_t *a, const ctx_t *cx, stk__op *op) {
  return size_args(a, cx, op, 0);
}

static int parse_random_crop(args_t *a, const ctx_t *cx, stk__op *op) {
  int rc;
  if ((rc = size_args(a, cx, op, 0))) return rc;
  const char *pd = arg(a, 2, "padding");
  if (pd && whole(pd, 0, 4096, &op->pad))
    return OPFAIL(cx, "padding is a whole number in 0..4096, got '%s'", pd);
  return STK_OK;
}

/* (p), p 0.5 when left out: hflip, vflip */
static int parse_p_half(args_t *a, const ctx_t *cx, stk__op *op) {
  return prob(a, cx, op, 0.5f);
}

/* (p), p 1 when left out: grayscale, autocontrast, equalize, invert */
static int parse_p_one(args_t *a, const ctx_t *cx, stk__op *op) {
  return prob(a, cx, op, 1.f);
}

static int parse_rotate(args_t *a, const ctx_t *cx, stk__op *op) {
  for (int i = 0;; i++) {
    const char *v = arg(a, i, NULL);
    if (!v) {
      if (!i)
        return OPFAIL(cx,
                      "wants one or more angles: rotate(90) or rotate(0, 90, 180, 270)");
      break;
    }
    double d;
    if (num(v, &d) || d != floor(d) || fmod(d, 90) != 0 || d < 0 || d >= 360)
      return OPFAIL(cx, "angles are 0, 90, 180 or 270 (counter-clockwise), got '%s'", v);
    op->angles |= 1u << (int)(d / 90);
  }
  return STK_OK;
}

static int parse_color_jitter(args_t *a, const ctx_t *cx, stk__op *op) {
  static const char *const keys[4] = {"brightness", "contrast", "saturation", "hue"};
  int rc;
  for (int i = 0; i < 4; i++)
    if ((rc = jitter_arg(a, cx, op, i, keys[i]))) return rc;
  return STK_OK;
}

static int parse_gaussian_blur(args_t *a, const ctx_t *cx, stk__op *op) {
  const char *k = arg(a, 0, "kernel"), *kw = arg(a, 1, NULL), *sg = arg(a, 2, "sigma");
  if (!k || whole(k, 1, 255, &op->kh) || !(op->kh & 1) ||
      (kw && (whole(kw, 1, 255, &op->kw) || !(op->kw & 1))))
    return OPFAIL(cx, "kernel sizes are odd whole numbers in 1..255");
  if (!kw) op->kw = op->kh;
  op->lo[0] = 0.1f, op->hi[0] = 2.f;
  if (sg) {
    double x = 0;
    if (strchr(sg, ':') ? range(sg, &op->lo[0], &op->hi[0]) : num(sg, &x))
      return OPFAIL(cx, "sigma wants s or a:b, got '%s'", sg);
    if (!strchr(sg, ':')) op->lo[0] = op->hi[0] = (float)x;
    if (!(op->lo[0] > 0) || op->hi[0] > 1000)
      return OPFAIL(cx, "sigma must be in (0, 1000]");
  }
  return STK_OK;
}

static int parse_identity(args_t *a, const ctx_t *cx, stk__op *op) {
  op->p = 1;
  return STK_OK;
}

static int parse_auto_augment(args_t *a, const ctx_t *cx, stk__op *op) {
  const char *v = arg(a, 0, "policy");
  op->pad = 10;
  if (!v || !strcmp(v, "imagenet")) op->kw = 0;
  else if (!strcmp(v, "cifar10")) op->kw = 1;
  else if (!strcmp(v, "svhn")) op->kw = 2;
  else return OPFAIL(cx, "policy is imagenet, cifar10 or svhn, got '%s'", v);
  return STK_OK;
}

static int parse_plugin(args_t *a, const ctx_t *cx, stk__op *op) {
  const char *name = cx->name;
  if (!stk__plugin_name_ok(name, strlen(name)))
    return OPFAIL(cx,
                  "unknown op (a plugin op's name is [a-z][a-z0-9_]*, at most %d bytes)",
                  STK__OP_NAME_MAX - 1);
  memcpy(op->name, name, strlen(name) + 1); /* checked: < STK__OP_NAME_MAX */
  return canon_args(a, cx, op->args);
}

/* python(module:function, args..., size=h:w): the size is the op's own,
 * the rest goes to the function as written */
static int parse_python(args_t *a, const ctx_t *cx, stk__op *op) {
  const char *sz = arg(a, -1, "size");
  if (sz && size_pair(sz, &op->h, &op->w))
    return OPFAIL(cx, "size wants height:width (whole numbers in 1..%d), got '%s'",
                  STK__CHAIN_MAX_DIM, sz);
  const char *fn = a->n && !a->key[0] ? a->val[0] : NULL;
  if (!fn || !python_target_ok(fn))
    return OPFAIL(cx,
                  "wants module:function first (Python names; the function's "
                  "not starting with '_'), e.g. python(my_ops:jitter, 0.5)");
  return canon_args(a, cx, op->args);
}

/* ---- each op's canonical arguments (op_row.format): appended to buf
 * after its name, as put() does ---- */

/* Append to buf like snprintf at offset *n. */
__attribute__((format(printf, 4, 5))) static void put(char *buf, size_t len, size_t *n,
                                                      const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int w = vsnprintf(buf && *n < len ? buf + *n : NULL, buf && *n < len ? len - *n : 0,
                    fmt, ap);
  va_end(ap);
  if (w > 0) *n += (size_t)w;
}

static void format_rrc(const stk__op *o, char *buf, size_t len, size_t *n) {
  put(buf, len, n, "(%u, %u, scale=%.9g:%.9g, ratio=%.9g:%.9g)", o->h, o->w,
      (double)o->lo[0], (double)o->hi[0], (double)o->lo[1], (double)o->hi[1]);
}

static void format_resize(const stk__op *o, char *buf, size_t len, size_t *n) {
  if (o->w) put(buf, len, n, "(%u, %u)", o->h, o->w);
  else put(buf, len, n, "(%u)", o->h);
}

static void format_size(const stk__op *o, char *buf, size_t len, size_t *n) {
  put(buf, len, n, "(%u, %u)", o->h, o->w);
}

static void format_random_crop(const stk__op *o, char *buf, size_t len, size_t *n) {
  put(buf, len, n, "(%u, %u, padding=%u)", o->h, o->w, o->pad);
}

/* (p): the flips, grayscale, autocontrast, equalize, invert */
static void format_p(const stk__op *o, char *buf, size_t len, size_t *n) {
  put(buf, len, n, "(%.9g)", (double)o->p);
}

static void format_rotate(const stk__op *o, char *buf, size_t len, size_t *n) {
  const char *sep = "(";
  for (int k = 0; k < 4; k++)
    if (o->angles & (1u << k)) put(buf, len, n, "%s%d", sep, 90 * k), sep = ", ";
  put(buf, len, n, ")");
}

static void format_color_jitter(const stk__op *o, char *buf, size_t len, size_t *n) {
  put(buf, len, n,
      "(brightness=%.9g:%.9g, contrast=%.9g:%.9g, saturation=%.9g:%.9g, "
      "hue=%.9g:%.9g)",
      (double)o->lo[0], (double)o->hi[0], (double)o->lo[1], (double)o->hi[1],
      (double)o->lo[2], (double)o->hi[2], (double)o->lo[3], (double)o->hi[3]);
}

static void format_gaussian_blur(const stk__op *o, char *buf, size_t len, size_t *n) {
  put(buf, len, n, "(%u, %u, sigma=%.9g:%.9g)", o->kh, o->kw, (double)o->lo[0],
      (double)o->hi[0]);
}

/* the policies' sub-ops: (magnitude, p=p) */
static void format_sub_op(const stk__op *o, char *buf, size_t len, size_t *n) {
  put(buf, len, n, "(%.9g, p=%.9g)", (double)o->lo[0], (double)o->p);
}

static void format_rand_augment(const stk__op *o, char *buf, size_t len, size_t *n) {
  put(buf, len, n, "(%u, %u, %u)", o->kh, o->kw, o->pad);
}

static void format_trivial_augment_wide(const stk__op *o, char *buf, size_t len,
                                        size_t *n) {
  put(buf, len, n, "(%u)", o->pad);
}

static void format_auto_augment(const stk__op *o, char *buf, size_t len, size_t *n) {
  put(buf, len, n, "(%s)", o->kw == 0 ? "imagenet" : o->kw == 1 ? "cifar10" : "svhn");
}

static void format_aug_mix(const stk__op *o, char *buf, size_t len, size_t *n) {
  put(buf, len, n, "(severity=%u, width=%u, depth=%d, alpha=%.9g, all_ops=%d)", o->kh,
      o->kw, o->pad ? (int)o->pad : -1, (double)o->lo[0], o->lo[1] != 0);
}

static void format_random_erasing(const stk__op *o, char *buf, size_t len, size_t *n) {
  put(buf, len, n, "(p=%.9g, scale=%.9g:%.9g, ratio=%.9g:%.9g, value=", (double)o->p,
      (double)o->lo[0], (double)o->hi[0], (double)o->lo[1], (double)o->hi[1]);
  if (o->kh) put(buf, len, n, "random)");
  else put(buf, len, n, "%.9g)", (double)o->lo[2]);
}

/* mixup, cutmix, mixup_cutmix */
static void format_mix(const stk__op *o, char *buf, size_t len, size_t *n) {
  if (o->kind == STK__OP_MIXUP_CUTMIX)
    put(buf, len, n, "(mixup=%.9g, cutmix=%.9g, p=%.9g, switch=%.9g, smoothing=%.9g",
        (double)o->lo[0], (double)o->lo[1], (double)o->p, (double)o->lo[2],
        (double)o->lo[3]);
  else
    put(buf, len, n, "(%.9g, p=%.9g, smoothing=%.9g",
        (double)o->lo[o->kind == STK__OP_CUTMIX], (double)o->p, (double)o->lo[3]);
  /* timm's defaults (batch mode, no minmax) are left unwritten */
  if (o->kh) put(buf, len, n, ", mode=%s", o->kh == 1 ? "pair" : "elem");
  if (o->hi[1] > 0)
    put(buf, len, n, ", minmax=%.9g:%.9g", (double)o->hi[0], (double)o->hi[1]);
  put(buf, len, n, ")");
}

/* a plugin op: its arguments as written (its name is o->name) */
static void format_plugin(const stk__op *o, char *buf, size_t len, size_t *n) {
  put(buf, len, n, "(%s)", o->args);
}

static void format_python(const stk__op *o, char *buf, size_t len, size_t *n) {
  put(buf, len, n, "(%s", o->args);
  if (o->h) put(buf, len, n, ", size=%u:%u", o->h, o->w);
  put(buf, len, n, ")");
}

/* ---- each op's output size (op_row.size): op i (0-based) of the chain
 * turns the size so far (*fixed 0: the decoded image's own, unknown here;
 * else *ch x *cw) into its own. STK_OK, or the error. Ops without one keep
 * the size. ---- */

/* the crops: their size */
static int size_fixed(const stk__op *o, uint32_t i, int *fixed, uint32_t *ch,
                      uint32_t *cw, char *err, size_t errlen) {
  *fixed = 1, *ch = o->h, *cw = o->w;
  return STK_OK;
}

static int size_resize(const stk__op *o, uint32_t i, int *fixed, uint32_t *ch,
                       uint32_t *cw, char *err, size_t errlen) {
  if (o->w) {
    *fixed = 1, *ch = o->h, *cw = o->w;
  } else if (*fixed) { /* the shorter side of a known size */
    stk__resize_short(*cw, *ch, o->h, cw, ch);
  }
  return STK_OK;
}

static int size_python(const stk__op *o, uint32_t i, int *fixed, uint32_t *ch,
                       uint32_t *cw, char *err, size_t errlen) {
  if (o->h) *fixed = 1, *ch = o->h, *cw = o->w;
  return STK_OK;
}

static int size_rotate(const stk__op *o, uint32_t i, int *fixed, uint32_t *ch,
                       uint32_t *cw, char *err, size_t errlen) {
  int odd = (o->angles & 0xa) != 0, even = (o->angles & 0x5) != 0;
  if (*fixed && *ch != *cw && odd && even)
    return stk__errf(err, errlen, STK_INVALID_ARGUMENT,
                     "pipeline op %u 'rotate': on a %ux%u image, mixing 0/180 with "
                     "90/270 makes two output sizes",
                     i + 1, *ch, *cw);
  if (odd && !even) {
    uint32_t t = *ch;
    *ch = *cw, *cw = t;
  }
  return STK_OK;
}

/* pad(p) | pad(left_right, top_bottom) | pad(left, top, right, bottom),
 * fill=v, mode=m: torchvision's Pad(padding, fill, padding_mode) with its
 * padding written the same three ways. lo[0..3]: left, top, right,
 * bottom (whole numbers, exact in a float); kh: fill (0..255, every
 * channel); kw: the mode, an index of PAD_MODES. */
static const char *const PAD_MODES[] = {"constant", "edge", "reflect", "symmetric"};

static int parse_pad(args_t *a, const ctx_t *cx, stk__op *op) {
  const char *v[4];
  uint32_t s[4] = {0};
  int n = 0;
  while (n < 4 && (v[n] = arg(a, n, NULL))) n++;
  if (n == 0 || n == 3)
    return OPFAIL(cx,
                  "wants pad(p), pad(left_right, top_bottom) or pad(left, top, "
                  "right, bottom)");
  for (int i = 0; i < n; i++)
    if (whole(v[i], 0, 4096, &s[i]))
      return OPFAIL(cx, "padding is a whole number in 0..4096, got '%s'", v[i]);
  op->lo[0] = (float)s[0];                        /* left */
  op->lo[1] = (float)(n == 1 ? s[0] : s[1]);      /* top */
  op->lo[2] = (float)(n == 4 ? s[2] : s[0]);      /* right */
  op->lo[3] = (float)(n == 4 ? s[3] : s[n == 2]); /* bottom */
  const char *f = arg(a, -1, "fill"), *m = arg(a, -1, "mode");
  if (f && whole(f, 0, 255, &op->kh))
    return OPFAIL(cx, "fill is a whole number in 0..255, got '%s'", f);
  op->kw = m ? 4 : 0;
  for (uint32_t k = 0; m && k < 4; k++)
    if (!strcmp(m, PAD_MODES[k])) op->kw = k;
  if (op->kw == 4)
    return OPFAIL(cx, "mode is constant, edge, reflect or symmetric, got '%s'", m);
  return STK_OK;
}

static void format_pad(const stk__op *o, char *buf, size_t len, size_t *n) {
  put(buf, len, n, "(%u, %u, %u, %u, fill=%u, mode=%s)", (uint32_t)o->lo[0],
      (uint32_t)o->lo[1], (uint32_t)o->lo[2], (uint32_t)o->lo[3], o->kh,
      PAD_MODES[o->kw]);
}

static int size_pad(const stk__op *o, uint32_t i, int *fixed, uint32_t *ch, uint32_t *cw,
                    char *err, size_t errlen) {
  if (*fixed)
    *ch += (uint32_t)(o->lo[1] + o->lo[3]), *cw += (uint32_t)(o->lo[0] + o->lo[2]);
  return STK_OK;
}

/* ---- the op table ------------------------------------------------------ */

/* clang-format off */
static const op_row OPS[] = {
  /* kind                          name                    parse                magnitude      format                       size */
  [STK__OP_DECODE]               = {"decode",               NULL,                NULL,          NULL,                        NULL},
  [STK__OP_RRC]                  = {"random_resized_crop",  parse_rrc,           NULL,          format_rrc,                  size_fixed},
  [STK__OP_RESIZE]               = {"resize",               parse_resize,        NULL,          format_resize,               size_resize},
  [STK__OP_CENTER_CROP]          = {"center_crop",          parse_center_crop,   NULL,          format_size,                 size_fixed},
  [STK__OP_RANDOM_CROP]          = {"random_crop",          parse_random_crop,   NULL,          format_random_crop,          size_fixed},
  [STK__OP_HFLIP]                = {"hflip",                parse_p_half,        NULL,          format_p,                    NULL},
  [STK__OP_VFLIP]                = {"vflip",                parse_p_half,        NULL,          format_p,                    NULL},
  [STK__OP_ROTATE]               = {"rotate",               parse_rotate,        NULL,          format_rotate,               size_rotate},
  [STK__OP_COLOR_JITTER]         = {"color_jitter",         parse_color_jitter,  NULL,          format_color_jitter,         NULL},
  [STK__OP_GRAYSCALE]            = {"grayscale",            parse_p_one,         NULL,          format_p,                    NULL},
  [STK__OP_GAUSSIAN_BLUR]        = {"gaussian_blur",        parse_gaussian_blur, NULL,          format_gaussian_blur,        NULL},
  [STK__OP_PLUGIN]               = {NULL,                   parse_plugin,        NULL,          format_plugin,               NULL},
  [STK__OP_SHEAR_X]              = {"shear_x",              policy_sub_op,       mag_shear,     format_sub_op,               NULL},
  [STK__OP_SHEAR_Y]              = {"shear_y",              policy_sub_op,       mag_shear,     format_sub_op,               NULL},
  [STK__OP_TRANSLATE_X]          = {"translate_x",          policy_sub_op,       mag_shift,     format_sub_op,               NULL},
  [STK__OP_TRANSLATE_Y]          = {"translate_y",          policy_sub_op,       mag_shift,     format_sub_op,               NULL},
  [STK__OP_ROTATE_BY]            = {"rotate_by",            policy_sub_op,       mag_angle,     format_sub_op,               NULL},
  [STK__OP_BRIGHTNESS]           = {"brightness",           policy_sub_op,       mag_factor,    format_sub_op,               NULL},
  [STK__OP_COLOR]                = {"color",                policy_sub_op,       mag_factor,    format_sub_op,               NULL},
  [STK__OP_CONTRAST]             = {"contrast",             policy_sub_op,       mag_factor,    format_sub_op,               NULL},
  [STK__OP_SHARPNESS]            = {"sharpness",            policy_sub_op,       mag_factor,    format_sub_op,               NULL},
  [STK__OP_POSTERIZE]            = {"posterize",            policy_sub_op,       mag_bits,      format_sub_op,               NULL},
  [STK__OP_SOLARIZE]             = {"solarize",             policy_sub_op,       mag_threshold, format_sub_op,               NULL},
  [STK__OP_AUTOCONTRAST]         = {"autocontrast",         parse_p_one,         NULL,          format_p,                    NULL},
  [STK__OP_EQUALIZE]             = {"equalize",             parse_p_one,         NULL,          format_p,                    NULL},
  [STK__OP_INVERT]               = {"invert",               parse_p_one,         NULL,          format_p,                    NULL},
  [STK__OP_IDENTITY]             = {"identity",             parse_identity,      NULL,          NULL,                        NULL},
  [STK__OP_RAND_AUGMENT]         = {"rand_augment",         policy_args,         NULL,          format_rand_augment,         NULL},
  [STK__OP_TRIVIAL_AUGMENT_WIDE] = {"trivial_augment_wide", policy_args,         NULL,          format_trivial_augment_wide, NULL},
  [STK__OP_AUTO_AUGMENT]         = {"auto_augment",         parse_auto_augment,  NULL,          format_auto_augment,         NULL},
  [STK__OP_AUG_MIX]              = {"aug_mix",              augmix_args,         NULL,          format_aug_mix,              NULL},
  [STK__OP_RANDOM_ERASING]       = {"random_erasing",       erasing_args,        NULL,          format_random_erasing,       NULL},
  [STK__OP_MIXUP]                = {"mixup",                mix_args,            NULL,          format_mix,                  NULL},
  [STK__OP_CUTMIX]               = {"cutmix",               mix_args,            NULL,          format_mix,                  NULL},
  [STK__OP_MIXUP_CUTMIX]         = {"mixup_cutmix",         mix_args,            NULL,          format_mix,                  NULL},
  [STK__OP_PYTHON]               = {"python",               parse_python,        NULL,          format_python,               size_python},
  /* ops no code names by kind: a row each, in order, kind = index */
                                   {"pad",                  parse_pad,           NULL,          format_pad,                  size_pad},
};
/* clang-format on */
#define NKINDS ((int)(sizeof(OPS) / sizeof(OPS[0])))
_Static_assert(NKINDS <= STK__OP_KINDS_MAX, "op kinds below STK__OP_KINDS_MAX");

const char *stk__op_kind_name(int kind) {
  return kind > 0 && kind < NKINDS ? OPS[kind].name : NULL;
}

/* The row of kind; NULL for a kind no op has. */
static const op_row *op_row_of(int kind) {
  return kind > 0 && kind < NKINDS ? &OPS[kind] : NULL;
}

/* One built-in or plugin op from name and its argument text. */
static int parse_op(char *name, char *inner, stk__op *op, ctx_t *cx) {
  args_t a;
  int rc = split_args(inner, &a, cx);
  if (rc) return rc;
  memset(op, 0, sizeof(*op));
  int kind = 0;
  for (int k = 1; k < NKINDS; k++)
    if (OPS[k].name && !strcmp(OPS[k].name, name)) kind = k;
  op->kind = kind ? kind : STK__OP_PLUGIN;
  cx->row = &OPS[op->kind];
  if (cx->row->parse && (rc = cx->row->parse(&a, cx, op))) return rc;
  return all_used(&a, cx);
}

int stk__chain_parse(const char *text, stk__chain *c, stk__chain_fields *f, char *err,
                     size_t errlen) {
  char buf[TEXT_MAX];
  stk__chain_fields dummy;
  if (!f) f = &dummy;
  memset(c, 0, sizeof(*c));
  memset(f, 0, sizeof(*f));
  if (!text || strlen(text) >= sizeof(buf))
    return stk__errf(err, errlen, STK_INVALID_ARGUMENT,
                     "pipeline chain longer than %d bytes", TEXT_MAX - 1);
  strcpy(buf, text);
  char *p = buf;
  unsigned index = 0;
  int closing = 0;    /* 1 after normalize, 2 after to */
  int tensor_ops = 0; /* a random_erasing came */
  int batch_op = 0;   /* a batch op came: nothing may follow it */
  for (;;) {
    char *bar = strchr(p, '|');
    if (bar) *bar = 0;
    char *optext = stk__trim(p);
    index++;
    ctx_t cx = {index, optext, err, errlen, NULL};
    if (!*optext)
      return stk__errf(err, errlen, STK_INVALID_ARGUMENT,
                       "pipeline op %u is empty (two '|' in a row, or one at an end)",
                       index);
    /* name, then optional "( ... )" and nothing after it */
    char *q = optext;
    while (isalnum((unsigned char)*q) || *q == '_') q++;
    char name[STK__OP_NAME_MAX + 1];
    size_t nl = (size_t)(q - optext);
    if (!nl || nl >= sizeof(name))
      return stk__errf(err, errlen, STK_INVALID_ARGUMENT,
                       "pipeline op %u: expected an op name, got '%.40s'", index, optext);
    memcpy(name, optext, nl), name[nl] = 0;
    cx.name = name;
    while (isspace((unsigned char)*q)) q++;
    char *inner = q;
    if (*q == '(') {
      char *close = strchr(q, ')');
      if (!close || *stk__trim(close + 1) || strchr(q + 1, '('))
        return OPFAIL(&cx, "expected name(arguments) with one closing ')' at the end");
      *close = 0;
      inner = q + 1;
    } else if (*q) {
      return OPFAIL(&cx, "unexpected '%.20s' after the name", q);
    }
    int rc;
    if (batch_op)
      return OPFAIL(&cx,
                    "a batch op (mixup, cutmix, mixup_cutmix) ends the chain: "
                    "normalize(...) and to(...) go before it");
    if (!strcmp(name, "normalize") || !strcmp(name, "to")) {
      int to = name[0] == 't';
      if (closing >= (to ? 2 : 1))
        return OPFAIL(&cx, to ? "to(...) may appear once"
                              : "normalize must come before to(...), once");
      args_t a;
      if ((rc = split_args(inner, &a, &cx))) return rc;
      if ((rc = to ? parse_to(&a, &cx, f) : parse_normalize(&a, &cx, f))) return rc;
      closing = to ? 2 : 1;
    } else {
      int erasing = !strcmp(name, "random_erasing");
      batch_op = !strcmp(name, "mixup") || !strcmp(name, "cutmix") ||
                 !strcmp(name, "mixup_cutmix");
      if (closing && !erasing && !batch_op)
        return OPFAIL(
            &cx, "normalize(...) and to(...) end the chain: image ops go before them");
      if (tensor_ops && !erasing && !batch_op)
        return OPFAIL(
            &cx, "random_erasing works on the output tensor: image ops go before it");
      tensor_ops |= erasing;
      stk__op op;
      if ((rc = parse_op(name, inner, &op, &cx))) return rc;
      if (op.kind == STK__OP_DECODE && c->n)
        return OPFAIL(&cx, "decode comes first (it may also be left out)");
      if (op.kind != STK__OP_DECODE && !c->n) {
        memset(&c->ops[0], 0, sizeof(c->ops[0]));
        c->ops[0].kind = STK__OP_DECODE;
        c->n = 1;
      }
      if (c->n == STK__CHAIN_MAX_OPS)
        return OPFAIL(&cx, "a chain holds at most %d ops", STK__CHAIN_MAX_OPS);
      c->ops[c->n++] = op;
    }
    if (!bar) break;
    p = bar + 1;
  }
  if (!c->n) c->ops[0].kind = STK__OP_DECODE, c->n = 1;
  return STK_OK;
}

size_t stk__chain_format(const stk__chain *c, char *buf, size_t len) {
  size_t n = 0;
  if (buf && len) buf[0] = 0;
  for (uint32_t i = 0; i < c->n; i++) {
    const stk__op *o = &c->ops[i];
    const op_row *row = op_row_of(o->kind);
    if (i) put(buf, len, &n, " | ");
    put(buf, len, &n, "%s", o->kind == STK__OP_PLUGIN ? o->name : row ? row->name : "?");
    if (row && row->format) row->format(o, buf, len, &n);
  }
  return n;
}

int stk__chain_size(const stk__chain *c, uint32_t *h, uint32_t *w, char *err,
                    size_t errlen) {
  int fixed = 0; /* 0: the decoded image's own size, unknown here */
  uint32_t ch = 0, cw = 0;
  for (uint32_t i = 0; i < c->n; i++) {
    const stk__op *o = &c->ops[i];
    const op_row *row = op_row_of(o->kind);
    int rc;
    if (row && row->size && (rc = row->size(o, i, &fixed, &ch, &cw, err, errlen)))
      return rc;
  }
  if (!fixed)
    return stk__errf(
        err, errlen, STK_INVALID_ARGUMENT,
        "pipeline: the output size depends on the image; end the geometry with "
        "a crop, random_resized_crop or resize(height, width)");
  *h = ch, *w = cw;
  return STK_OK;
}

/* The built-in op (or normalize, to) nearest to name, if near enough to be
 * a typo of it; NULL otherwise. */
static const char *closest_op(const char *name) {
  static const char *const more[] = {"normalize", "to"};
  const char *best = NULL;
  unsigned bd = 99;
  for (int k = 0; k < NKINDS + 2; k++) {
    const char *n = k < NKINDS ? OPS[k].name : more[k - NKINDS];
    if (!n) continue;
    unsigned d = stk__edit_distance(name, n);
    if (d < bd) bd = d, best = n;
  }
  return stk__typo_near(bd, strlen(name)) ? best : NULL;
}

int stk__chain_check_plugins(const stk__chain *c, const char *plugins, char *err,
                             size_t errlen) {
  for (uint32_t i = 0; i < c->n; i++) {
    const stk__op *o = &c->ops[i];
    if (o->kind != STK__OP_PLUGIN) continue;
    size_t nl = strlen(o->name);
    int found = 0;
    for (const char *p = plugins; p && *p;) {
      const char *e = strchr(p, ',');
      size_t l = e ? (size_t)(e - p) : strlen(p);
      if (l == nl && !memcmp(p, o->name, nl)) found = 1;
      p = e ? e + 1 : p + l;
    }
    if (found) continue;
    const char *near = closest_op(o->name);
    char names[NKINDS * 24 + 32]; /* the table's names, then the closing two */
    size_t n = 0;
    names[0] = 0;
    for (int k = 1; k < NKINDS; k++)
      if (OPS[k].name) put(names, sizeof(names), &n, "%s, ", OPS[k].name);
    put(names, sizeof(names), &n, "normalize, to");
    return stk__errf(err, errlen, STK_INVALID_ARGUMENT,
                     "pipeline op %u: unknown op '%s'%s%s%s (built in: %s; an "
                     "op from a plugin needs plugin = %s)",
                     i + 1, o->name, near ? ": did you mean '" : "", near ? near : "",
                     near ? "'?" : "", names, o->name);
  }
  return STK_OK;
}
