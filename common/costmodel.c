/* costmodel.c - the price-performance model, its search over shapes and
 * the instance table reader (see costmodel.h for the formula). Owns
 * nothing; allocates nothing; reads one file with stdio. */
#include "costmodel.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "stoker/status.h"

/* ---- the instance table ------------------------------------------- */

/* A finite number >= lo (and > lo when strict) from the whole of s. */
static int num_field(const char *s, double lo, int strict, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || *end || errno || !isfinite(v) || v < lo || (strict && v <= lo))
    return -1;
  *out = v;
  return 0;
}

/* One line's fields into *in; -1 with err naming the field. */
static int parse_line(char **f, int nf, stk__instance *in, char *why, size_t whylen) {
  if (nf != 7)
    return stk__errf(why, whylen, -1,
                     "%d field(s), want 7: name vcpu accelerators accel_kind gbit "
                     "usd_per_hour flags",
                     nf);
  memset(in, 0, sizeof(*in));
  if (strlen(f[0]) >= sizeof(in->name))
    return stk__errf(why, whylen, -1, "name '%s' is longer than %zu bytes", f[0],
                     sizeof(in->name) - 1);
  if (!stk__instance_name_ok(f[0]))
    return stk__errf(why, whylen, -1,
                     "name '%s': use letters, digits and . _ - : / + only", f[0]);
  snprintf(in->name, sizeof(in->name), "%s", f[0]);
  if (num_field(f[1], 0, 1, &in->vcpu))
    return stk__errf(why, whylen, -1, "vcpu wants a number > 0, got '%s'", f[1]);
  double acc;
  if (num_field(f[2], 0, 0, &acc) || acc != floor(acc) || acc > 1024)
    return stk__errf(why, whylen, -1, "accelerators wants an integer 0..1024, got '%s'",
                     f[2]);
  in->accelerators = (uint32_t)acc;
  if (strlen(f[3]) >= sizeof(in->accel_kind))
    return stk__errf(why, whylen, -1, "accel_kind '%s' is longer than %zu bytes", f[3],
                     sizeof(in->accel_kind) - 1);
  snprintf(in->accel_kind, sizeof(in->accel_kind), "%s", f[3]);
  if (num_field(f[4], 0, 1, &in->nic_gbps))
    return stk__errf(why, whylen, -1, "gbit wants a number > 0, got '%s'", f[4]);
  char price[64];
  snprintf(price, sizeof(price), "%s", f[5]);
  char *slash = strchr(price, '/');
  if (slash) {
    if (strcmp(slash, "/core"))
      return stk__errf(
          why, whylen, -1,
          "usd_per_hour wants a number or 'N/core' (per core-hour), got '%s'", f[5]);
    *slash = 0;
  }
  double usd;
  if (num_field(price, 0, 0, &usd))
    return stk__errf(why, whylen, -1,
                     "usd_per_hour wants a number >= 0 or 'N/core', got '%s'", f[5]);
  in->usd_per_hour = slash ? usd * in->vcpu : usd;
  if (!isfinite(in->usd_per_hour))
    return stk__errf(why, whylen, -1, "usd_per_hour x vcpu is not a finite number");
  if (strcmp(f[6], "-")) {
    char flags[128];
    snprintf(flags, sizeof(flags), "%s", f[6]);
    for (char *save = NULL, *tok = strtok_r(flags, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
      if (!strcmp(tok, "approx")) in->approx = 1;
      else if (!strcmp(tok, "burst")) in->burst = 1;
      else
        return stk__errf(
            why, whylen, -1,
            "unknown flag '%s' (flags: '-' or a comma list of approx, burst)", tok);
    }
  }
  return 0;
}

int stk__instances_parse(stk__instance_table *t, const char *text, const char *label,
                         char *err, size_t errlen) {
  unsigned lineno = 0;
  const char *p = text;
  while (*p) {
    lineno++;
    const char *nl = strchr(p, '\n');
    size_t len = nl ? (size_t)(nl - p) : strlen(p);
    char line[1024];
    if (len >= sizeof(line))
      return stk__errf(err, errlen, STK_INVALID_ARGUMENT,
                       "%s:%u: line longer than %zu bytes", label, lineno,
                       sizeof(line) - 1);
    memcpy(line, p, len);
    line[len] = 0;
    p = nl ? nl + 1 : p + len;
    char *hash = strchr(line, '#');
    if (hash) *hash = 0;
    char *f[8];
    int nf = 0;
    for (char *save = NULL, *tok = strtok_r(line, " \t\r", &save); tok;
         tok = strtok_r(NULL, " \t\r", &save))
      if (nf < 8) f[nf++] = tok;
      else nf++;
    if (!nf) continue;
    stk__instance in;
    char why[256];
    if (parse_line(f, nf, &in, why, sizeof(why)))
      return stk__errf(err, errlen, STK_INVALID_ARGUMENT, "%s:%u: %s", label, lineno,
                       why);
    stk__instance *slot = (stk__instance *)stk__instances_find(t, in.name);
    if (!slot) {
      if (t->n >= STK_INSTANCES_MAX)
        return stk__errf(err, errlen, STK_INVALID_ARGUMENT,
                         "%s:%u: more than %d instance types", label, lineno,
                         STK_INSTANCES_MAX);
      slot = &t->v[t->n++];
    }
    *slot = in;
  }
  return 0;
}

int stk__instances_load(stk__instance_table *t, const char *path, char *err,
                        size_t errlen) {
  FILE *f = fopen(path, "r");
  if (!f) return stk__errf(err, errlen, STK_IO, "%s: %s", path, strerror(errno));
  static const size_t cap = 1 << 20;
  char *buf = malloc(cap + 1);
  if (!buf) {
    fclose(f);
    return stk__errf(err, errlen, STK_NO_MEMORY, "%s: out of memory", path);
  }
  size_t n = fread(buf, 1, cap + 1, f);
  int bad = ferror(f);
  fclose(f);
  int rc;
  if (bad) rc = stk__errf(err, errlen, STK_IO, "%s: read error", path);
  else if (n > cap)
    rc = stk__errf(err, errlen, STK_INVALID_ARGUMENT, "%s: larger than 1 MiB", path);
  else if (memchr(buf, 0, n))
    rc = stk__errf(err, errlen, STK_INVALID_ARGUMENT, "%s: holds a NUL byte (not text)",
                   path);
  else {
    buf[n] = 0;
    rc = stk__instances_parse(t, buf, path, err, errlen);
  }
  free(buf);
  return rc;
}

const stk__instance *stk__instances_find(const stk__instance_table *t, const char *name) {
  for (size_t i = 0; i < t->n; i++)
    if (!strcmp(t->v[i].name, name)) return &t->v[i];
  return NULL;
}

int stk__instance_name_ok(const char *name) {
  if (!name || !*name) return 0;
  size_t n = 0;
  for (const char *p = name; *p; p++, n++) {
    unsigned char c = (unsigned char)*p;
    if (n >= STK_INSTANCE_NAME_MAX - 1) return 0;
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
          strchr("._-:/+", c)))
      return 0;
  }
  return 1;
}

void stk__instance_family(const char *name, char *buf, size_t len) {
  snprintf(buf, len, "%s", name);
  char *dot = strrchr(buf, '.');
  if (dot) *dot = 0;
}

/* ---- the model ----------------------------------------------------- */

const char *stk__cm_bind_name(int bind) {
  switch (bind) {
    case STK_CM_BIND_COMPUTE:
      return "compute";
    case STK_CM_BIND_SUPPLY:
      return "data supply";
    case STK_CM_BIND_LINK:
      return "link";
    case STK_CM_BIND_RECEIVE:
      return "receive";
    default:
      return "-";
  }
}

static int missing(stk__cm_result *out, const char *fmt, const char *what) {
  char m[200];
  snprintf(m, sizeof(m), fmt, what);
  snprintf(out->missing, sizeof(out->missing), "missing: %s", m);
  out->ok = 0;
  out->bind = STK_CM_BIND_NONE;
  return 0;
}

int stk__cm_predict(const stk__cm_job *job, const stk__cm_shape *sh,
                    stk__cm_result *out) {
  memset(out, 0, sizeof(*out));
  out->usd_per_epoch = -1;
  if (!sh->accel || !sh->accel_count)
    return missing(out, "%s", "the accelerator instance");
  if (!(job->compute_s > 0))
    return missing(out, "%s",
                   "the step compute time (step time minus input stall; measure a few "
                   "steps: stoker-train-loop or your loop's 'stall N%' line)");
  if (!(job->images_per_step > 0)) return missing(out, "%s", "the images per step");
  int remote = sh->data && sh->data_count > 0;
  int local = !remote || sh->local_loading;
  double S = (double)sh->accel_count * sh->local_cores; /* spare cores, all hosts */
  if (local && !(sh->local_cores > 0))
    return missing(out, "the cores %s can spare for data loading", sh->accel->name);
  if (local && !(sh->accel_rate > 0))
    return missing(out, "the images per CPU-second on %s (calibration)", sh->accel->name);
  if (sh->accel->usd_per_hour < 0)
    return missing(out, "the price of %s", sh->accel->name);
  double usd_h = (double)sh->accel_count * sh->accel->usd_per_hour;
  double D = local ? sh->accel_rate * S : 0; /* images/s the data side delivers */
  out->local_images_per_s = D;
  int bind = STK_CM_BIND_SUPPLY;
  if (remote) {
    if (!(sh->data_rate > 0))
      return missing(out, "the images per CPU-second on %s (calibration)",
                     sh->data->name);
    if (sh->data->usd_per_hour < 0)
      return missing(out, "the price of %s", sh->data->name);
    if (!(job->bytes_per_image > 0))
      return missing(out, "%s", "the batch bytes on the wire");
    if (!(job->recv_cpu_s_per_gb >= 0))
      return missing(out, "%s",
                     "the training host's receiving cost (CPU seconds per GB taken in)");
    if (job->recv_cpu_s_per_gb > 0 && !(sh->local_cores > 0))
      return missing(out, "the cores %s can spare for taking batches in",
                     sh->accel->name);
    double b = job->bytes_per_image, c = job->recv_cpu_s_per_gb / 1e9;
    double cores = sh->data_cores > 0 ? sh->data_cores : sh->data->vcpu;
    double R = (double)sh->data_count * cores * sh->data_rate;
    double accel_bps = (double)sh->accel_count * sh->accel->nic_gbps * 1e9 / 8;
    double data_bps = (double)sh->data_count * sh->data->nic_gbps * 1e9 / 8;
    double Limg = (accel_bps < data_bps ? accel_bps : data_bps) / b;
    double Rcv = c > 0 ? S / (b * c) : INFINITY;
    double take = R;
    if (Limg < take) take = Limg, bind = STK_CM_BIND_LINK;
    if (Rcv < take) take = Rcv, bind = STK_CM_BIND_RECEIVE;
    /* with local loading, each image taken in costs the local builders
     * r_a b c images' worth of CPU; an image is always cheaper to take in
     * than to build, else no data host would help (then take = 0) */
    double keep = local ? 1.0 - sh->accel_rate * b * c : 1.0;
    if (keep < 0) keep = 0;
    out->remote_images_per_s = take * keep;
    D += take * keep;
    double loc = local ? sh->accel_rate * S : 0;
    out->supply_s = job->images_per_step / (loc + R * keep);
    out->link_s = job->images_per_step / (loc + Limg * keep);
    out->recv_s = isfinite(Rcv) ? job->images_per_step / (loc + Rcv * keep) : 0;
    usd_h += (double)sh->data_count * sh->data->usd_per_hour;
  } else {
    out->supply_s = job->images_per_step / D;
  }
  out->compute_s = job->compute_s;
  out->data_s = job->images_per_step / D;
  if (job->compute_s >= out->data_s) bind = STK_CM_BIND_COMPUTE;
  out->step_s = job->compute_s >= out->data_s ? job->compute_s : out->data_s;
  out->bind = bind;
  out->util = job->compute_s / out->step_s;
  out->usd_per_hour = usd_h;
  out->usd_per_step = usd_h * out->step_s / 3600.0;
  if (job->samples) {
    out->steps_per_epoch = ceil((double)job->samples / job->images_per_step);
    out->usd_per_epoch = out->usd_per_step * out->steps_per_epoch;
  }
  out->ok = 1;
  return 1;
}

/* ---- the search ---------------------------------------------------- */

static void put(stk__cm_option *out, size_t cap, size_t *n, const stk__cm_job *job,
                const stk__cm_shape *sh, int larger) {
  if (*n < cap) {
    stk__cm_option *o = &out[*n];
    memset(o, 0, sizeof(*o));
    o->shape = *sh;
    o->larger = larger;
    stk__cm_predict(job, sh, &o->r);
  }
  (*n)++;
}

size_t stk__cm_search_run(const stk__cm_search *s, stk__cm_option *out, size_t cap,
                          int *cheapest) {
  size_t n = 0;
  stk__cm_shape sh = s->base;
  sh.data = NULL, sh.data_count = 0, sh.data_cores = 0, sh.data_rate = 0;
  put(out, cap, &n, &s->job, &sh, 0);
  if (s->table && s->base.accel) {
    char fam[STK_INSTANCE_NAME_MAX], f2[STK_INSTANCE_NAME_MAX];
    stk__instance_family(s->base.accel->name, fam, sizeof(fam));
    for (size_t i = 0; i < s->table->n; i++) {
      const stk__instance *t = &s->table->v[i];
      stk__instance_family(t->name, f2, sizeof(f2));
      if (!s->base.accel->accelerators || strcmp(fam, f2) ||
          t->vcpu <= s->base.accel->vcpu || t->accelerators < s->base.accel->accelerators)
        continue;
      /* the same job on fewer, larger instances: as many accelerators
       * busy as before (the rest idle), the same cores per accelerator
       * taken by training, the rest of the vCPU spare */
      double used = (double)s->base.accel_count * s->base.accel->accelerators;
      double per_acc = (s->base.accel->vcpu - s->base.local_cores) /
                       (double)s->base.accel->accelerators;
      stk__cm_shape big = sh;
      big.accel = t;
      big.accel_count = (uint32_t)ceil(used / t->accelerators);
      big.local_cores = t->vcpu - per_acc * used / big.accel_count;
      put(out, cap, &n, &s->job, &big, 1);
    }
  }
  for (size_t c = 0; c < s->ncand && c < STK_CM_CANDIDATES_MAX; c++)
    for (uint32_t k = 1; k <= s->max_data_hosts; k++) {
      stk__cm_shape het = s->base;
      het.data = s->cand[c].type;
      het.data_count = k;
      het.data_cores = s->cand[c].cores;
      het.data_rate = s->cand[c].rate;
      put(out, cap, &n, &s->job, &het, 0);
    }
  int best = -1;
  size_t m = n < cap ? n : cap;
  for (size_t i = 0; i < m; i++) {
    if (!out[i].r.ok) continue;
    /* a hair's difference is a tie: the earlier (fewer hosts) wins */
    if (best < 0 || out[i].r.usd_per_step < out[best].r.usd_per_step * (1 - 1e-9))
      best = (int)i;
  }
  if (best >= 0) out[best].cheapest = 1;
  *cheapest = best;
  return n;
}
