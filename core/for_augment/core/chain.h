/* core/chain.h - op chains (`pipeline = decode | resize(256) |
 * center_crop(224) | ...`): the compiled form the JPEG builders run, its
 * parser, its canonical text (what the job hash covers) and the output
 * size it makes. Core's interface for augment: on the include path only of
 * what links stoker_core_for_augment (core/CMakeLists.txt); not public
 * API. core/job_spec.c stores a chain in stk_job_spec.chain as canonical text,
 * augment/ops_chain.c runs it (each op's step in augment/ops_kernels.c).
 * docs/pipelines.md is the user's
 * reference (every op, its parameters, its random draws).
 *
 * Pure functions of their arguments; no allocation; thread-safe.
 */
#ifndef STOKER_CORE_CHAIN_H
#define STOKER_CORE_CHAIN_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define STK__CHAIN_MAX_OPS 32
#define STK__OP_NAME_MAX   32  /* a plugin op's name, with its NUL */
#define STK__OP_ARGS_MAX   200 /* a plugin op's argument text, with its NUL */
#define STK__CHAIN_MAX_DIM 16384

/* An op's kind: the index of its row in core/chain.c's OPS[] (name,
 * parser, canonical text, output size); its row of augment/ops_kernels.c's
 * KERNELS[] (its step in the image pipeline) carries its name. The
 * constants below are the kinds code refers to by kind; an op that only
 * its two rows know needs none (its row sits at the end of OPS[], after
 * STK__OP_PYTHON). Kinds are below STK__OP_KINDS_MAX. */
typedef enum stk__op_kind {
  STK__OP_DECODE = 1,    /* always first (implied when not written) */
  STK__OP_RRC,           /* random_resized_crop(h[, w], scale=a:b, ratio=a:b) */
  STK__OP_RESIZE,        /* resize(s) (shorter side) or resize(h, w) */
  STK__OP_CENTER_CROP,   /* center_crop(h[, w]), zero padding when larger */
  STK__OP_RANDOM_CROP,   /* random_crop(h[, w], padding=p) */
  STK__OP_HFLIP,         /* hflip(p) */
  STK__OP_VFLIP,         /* vflip(p) */
  STK__OP_ROTATE,        /* rotate(a[, a...]): one of multiples of 90, ccw */
  STK__OP_COLOR_JITTER,  /* color_jitter(b, c, s, h), torchvision's order */
  STK__OP_GRAYSCALE,     /* grayscale(p) */
  STK__OP_GAUSSIAN_BLUR, /* gaussian_blur(k[, kw], sigma=a:b) */
  STK__OP_PLUGIN,        /* any other name: an op a `plugin =` library defines */
  /* torchvision's autoaugment operations (augment/ops_policy.c), each
   * applied with probability p: lo[0] its magnitude */
  STK__OP_SHEAR_X,              /* shear_x(m[, p]): shear factor */
  STK__OP_SHEAR_Y,              /* shear_y(m[, p]) */
  STK__OP_TRANSLATE_X,          /* translate_x(px[, p]) */
  STK__OP_TRANSLATE_Y,          /* translate_y(px[, p]) */
  STK__OP_ROTATE_BY,            /* rotate_by(degrees[, p]): size kept */
  STK__OP_BRIGHTNESS,           /* brightness(factor[, p]) */
  STK__OP_COLOR,                /* color(factor[, p]) */
  STK__OP_CONTRAST,             /* contrast(factor[, p]) */
  STK__OP_SHARPNESS,            /* sharpness(factor[, p]) */
  STK__OP_POSTERIZE,            /* posterize(bits[, p]) */
  STK__OP_SOLARIZE,             /* solarize(threshold[, p]) */
  STK__OP_AUTOCONTRAST,         /* autocontrast([p]) */
  STK__OP_EQUALIZE,             /* equalize([p]) */
  STK__OP_INVERT,               /* invert([p]) */
  STK__OP_IDENTITY,             /* identity() */
  STK__OP_RAND_AUGMENT,         /* rand_augment(num_ops, magnitude, bins):
                                   kh, kw, pad */
  STK__OP_TRIVIAL_AUGMENT_WIDE, /* trivial_augment_wide(bins): pad */
  STK__OP_AUTO_AUGMENT,         /* auto_augment(policy): kw 0 imagenet, 1 cifar10,
                                   2 svhn; pad 10 (its bins) */
  STK__OP_AUG_MIX,              /* aug_mix(severity, width, depth, alpha, all_ops):
                                   kh severity, kw width, pad depth (0: 1..3
                                   drawn), lo[0] alpha, lo[1] all_ops */
  /* on the output tensor, after Normalize (augment/ops_erase.c); only
   * random_erasing ops and a batch op may follow one */
  STK__OP_RANDOM_ERASING, /* random_erasing(p, scale=a:b, ratio=a:b, value=v|random):
                            lo/hi[0] scale, [1] ratio, lo[2] value, kh 1 =
                            random */
  /* batch ops (augment/ops_mix.c): on the whole batch, after every
   * sample's ops; at most one, and it ends the chain. lo[0] mixup's alpha
   * (0: off), lo[1] cutmix's, p the probability a batch is mixed, lo[2]
   * the probability of cutmix when both are on, lo[3] label smoothing, kh
   * timm's mode (0 batch, 1 pair, 2 elem), hi[0]:hi[1] its cutmix_minmax
   * (hi[1] 0: none) */
  STK__OP_MIXUP,        /* mixup(alpha, p, smoothing, mode) */
  STK__OP_CUTMIX,       /* cutmix(alpha, p, smoothing, mode, minmax=a:b) */
  STK__OP_MIXUP_CUTMIX, /* mixup_cutmix(mixup=a, cutmix=b, p, switch=s, smoothing,
                          mode, minmax) */
  /* python(module:function[, arg...][, size=h:w]) (augment/ops_python.c):
   * a user's NumPy function in a Python process of the builder's; args as
   * canonical text (module:function first), h, w the declared output size
   * (0: the input's) */
  STK__OP_PYTHON
} stk__op_kind;

/* Every op kind is below this (core/chain.c checks its table against
 * it); augment's fused ops are numbered from it. */
#define STK__OP_KINDS_MAX 64

/* The name of op kind as a chain writes it (static), or NULL for a kind
 * without one (a plugin op: its own name is in stk__op.name; a kind past
 * the table). Thread-safe. */
const char *stk__op_kind_name(int kind);

/* 1 when kind is a batch op. */
static inline int stk__op_is_batch(int kind) {
  return kind == STK__OP_MIXUP || kind == STK__OP_CUTMIX || kind == STK__OP_MIXUP_CUTMIX;
}

/* 1 when a chain's canonical text (NUL-terminated) ends in a batch op:
 * the job's batch then carries the soft-target tensor `target`. */
static inline int stk__chain_text_mixes(const char *canon) {
  return strstr(canon, "| mixup(") || strstr(canon, "| cutmix(") ||
         strstr(canon, "| mixup_cutmix(");
}

/* One op, its parameters resolved (defaults filled in). */
typedef struct stk__op {
  int kind;                    /* stk__op_kind */
  uint32_t h, w;               /* size; resize(s): h = s, w = 0 (shorter side) */
  uint32_t pad;                /* random_crop padding, each side */
  uint32_t kh, kw;             /* gaussian_blur kernel (odd) */
  uint32_t angles;             /* rotate: bit k set = 90k degrees may be drawn */
  float p;                     /* hflip, vflip, grayscale probability */
  float lo[4], hi[4];          /* rrc: [0] scale, [1] ratio; jitter: b, c, s, h;
                                  blur: [0] sigma */
  char name[STK__OP_NAME_MAX]; /* plugin: the op's name */
  char args[STK__OP_ARGS_MAX]; /* plugin, python: its arguments as written (python:
                                  without size=), "" if none */
} stk__op;

typedef struct stk__chain {
  uint32_t n; /* ops, ops[0] is the decode */
  stk__op ops[STK__CHAIN_MAX_OPS];
} stk__chain;

/* What a chain's closing `normalize(...)` and `to(...)` set: they are job
 * fields (mean, std, dtype, layout), so they are not kept in the chain. */
typedef struct stk__chain_fields {
  int has_norm, has_to;
  float mean[3], std[3];
  int dtype, layout; /* stk_dtype, stk_layout */
} stk__chain_fields;

/* torchvision Resize(s) of a w x h image: the shorter side becomes s, the
 * longer int(s * longer / shorter). */
static inline void stk__resize_short(uint32_t w, uint32_t h, uint32_t s, uint32_t *nw,
                                     uint32_t *nh) {
  uint32_t sh = w <= h ? w : h, lg = w <= h ? h : w;
  uint32_t nl = (uint32_t)((double)s * lg / sh); /* >= s, as lg >= sh */
  *nw = w <= h ? s : nl;
  *nh = w <= h ? nl : s;
}

/* Parse chain text into *c (and the closing normalize/to into *f, which
 * may be NULL when text holds neither). Names that are not built-in ops
 * become STK__OP_PLUGIN ops: stk__chain_check_plugins says whether a
 * plugin provides them. STK_OK, or STK_INVALID_ARGUMENT with "pipeline op
 * N 'name': why" in err. */
int stk__chain_parse(const char *text, stk__chain *c, stk__chain_fields *f, char *err,
                     size_t errlen);

/* The canonical text of c (every parameter written, numbers as %.9g, ops
 * joined by " | "), snprintf-like: returns the length it needs. */
size_t stk__chain_format(const stk__chain *c, char *buf, size_t len);

/* The output size of c: STK_OK with *h, *w, or STK_INVALID_ARGUMENT when
 * it depends on the image (no crop or fixed resize after the last
 * shorter-side resize, or a rotate that may or may not swap sides). */
int stk__chain_size(const stk__chain *c, uint32_t *h, uint32_t *w, char *err,
                    size_t errlen);

/* STK_OK when every plugin op of c is named in `plugins` (a job's plugin
 * field: names separated by commas), else STK_INVALID_ARGUMENT naming it. */
int stk__chain_check_plugins(const stk__chain *c, const char *plugins, char *err,
                             size_t errlen);

/* 1 when name is a valid plugin name: [a-z0-9_], 1..31 bytes, starting
 * with a letter. */
int stk__plugin_name_ok(const char *name, size_t len);

#endif
