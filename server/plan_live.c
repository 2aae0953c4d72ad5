/* plan_live.c - a running job's shape and figures, from its Status reply,
 * as the cost model's search; the purchase sentence of `stoker status`
 * and `stoker plan --coordinator` (plan_live.h). */
#include "plan_live.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/advice.h"

#ifndef STK_INSTANCES_INSTALLED
#define STK_INSTANCES_INSTALLED "/usr/local/share/stoker/instances.tsv"
#endif
#ifndef STK_INSTANCES_RELATIVE
#define STK_INSTANCES_RELATIVE "../share/stoker/instances.tsv"
#endif
#ifndef STK_INSTANCES_SOURCE
#define STK_INSTANCES_SOURCE ""
#endif

/* A rank's figures count while this fresh (ranks report every few s). */
#define RANK_FRESH_MS 30000

int stk__plan_table_load(stk__instance_table *t, const char *user, const char **shipped,
                         char *err, size_t errlen) {
  static char near[PATH_MAX + 64];
  char why[640];
  const char *path = STK_INSTANCES_INSTALLED;
  ssize_t sn = readlink("/proc/self/exe", near, PATH_MAX - 1);
  if (sn > 0) {
    near[sn] = 0;
    char *sl = strrchr(near, '/');
    if (sl)
      snprintf(sl + 1, sizeof(near) - (size_t)(sl + 1 - near), "%s",
               STK_INSTANCES_RELATIVE);
  }
  if (sn > 0 && !access(near, R_OK)) path = near;
  else if (access(path, R_OK) && *STK_INSTANCES_SOURCE &&
           !access(STK_INSTANCES_SOURCE, R_OK))
    path = STK_INSTANCES_SOURCE;
  if (shipped) *shipped = path;
  memset(t, 0, sizeof(*t));
  if (stk__instances_load(t, path, why, sizeof(why))) {
    snprintf(err, errlen, "the shipped instance table: %s", why);
    return -1;
  }
  if (user && *user && stk__instances_load(t, user, why, sizeof(why))) {
    snprintf(err, errlen, "--instances: %s", why);
    return -1;
  }
  return 0;
}

/* The rate o->rates gives for type name ("TYPE=N", the last wins), or 0. */
static double given_rate(const stk__live_opts *o, const char *name) {
  double v = 0;
  size_t n = strlen(name);
  for (size_t i = 0; o->rates && i < o->nrates; i++) {
    const char *r = o->rates[i], *eq = r ? strchr(r, '=') : NULL;
    if (!eq || (size_t)(eq - r) != n || strncmp(r, name, n)) continue;
    char *end;
    double x = strtod(eq + 1, &end);
    if (end != eq + 1 && !*end && x > 0 && isfinite(x)) v = x;
  }
  return v;
}

static void note(stk__live_plan *p, const char *fmt, ...) {
  size_t k = strlen(p->notes);
  if (k && k + 2 < sizeof(p->notes))
    snprintf(p->notes + k, sizeof(p->notes) - k, "; "), k += 2;
  va_list ap;
  va_start(ap, fmt);
  if (k < sizeof(p->notes)) vsnprintf(p->notes + k, sizeof(p->notes) - k, fmt, ap);
  va_end(ap);
}

/* One worker as the plan sees it. */
typedef struct wrow {
  const char *type; /* "" = not told */
  char host[256];   /* the address without its port */
  double cores;     /* cpu_cores (0 = not told) */
  double rate;      /* images per CPU-second (0 = not measured yet) */
} wrow;

static int wrow_cmp(const void *a, const void *b) {
  const wrow *x = a, *y = b;
  int c = strcmp(x->type, y->type);
  return c ? c : strcmp(x->host, y->host);
}

/* Per instance type: hosts, cores, the core-weighted mean rate. */
typedef struct tagg {
  const stk__instance *type;
  uint32_t hosts, workers;
  double cores, rate_cores, rate_sum; /* rate_sum / rate_cores = the mean */
} tagg;

static double tagg_rate(const tagg *a) {
  return a->rate_cores > 0 ? a->rate_sum / a->rate_cores : 0;
}

int stk__live_plan_build(const Stoker__V1__StatusResponse *r,
                         const stk__instance_table *t, const stk__live_opts *o,
                         stk__live_plan *p, char *err, size_t errlen) {
  memset(p, 0, sizeof(*p));
  stk_job_spec_defaults(&p->spec);
  char why[512];
  const char *canon = r->job && r->job->canonical ? r->job->canonical : "";
  if (!*canon || stk_job_spec_parse(&p->spec, canon, why, sizeof(why))) {
    snprintf(err, errlen, "missing: the job (the coordinator sent %s)",
             *canon ? "a job this stoker cannot read" : "none");
    return -1;
  }
  if (!p->spec.batch_size || !p->spec.world_size) {
    snprintf(err, errlen, "missing: the job's batch_size and world_size");
    return -1;
  }
  const char *an = o->accel && *o->accel ? o->accel : r->accel_type;
  if (!an || !*an) {
    snprintf(err, errlen,
             "missing: the training hosts' instance type (stoker-coordinator "
             "--accel-type, as stoker-launch passes it; or stoker plan --accel TYPE)");
    return -1;
  }
  const stk__instance *acc = stk__instances_find(t, an);
  if (!acc || !acc->accelerators) {
    snprintf(err, errlen,
             "missing: instance type '%.60s' %s (add it with --instances FILE)",
             stk__instance_name_ok(an) ? an : "?",
             acc ? "has no accelerators in the table" : "is not in the instance table");
    return -1;
  }
  stk__cm_search *s = &p->s;
  const stk_job_spec *sp = &p->spec;
  stk_job_spec wire;
  stk_batch_layout lay;
  const stk_job_spec *w = stk_image_wire_spec(sp, &wire) ? &wire : sp;
  s->job.images_per_step = (double)sp->batch_size * sp->world_size;
  if (!stk_batch_layout_of(w, &lay))
    s->job.bytes_per_image = (double)lay.total_bytes / sp->batch_size;
  s->job.samples = sp->num_samples ? sp->num_samples : r->dataset_size;

  /* the ranks: the slowest fresh one sets the pace */
  double recv = -1;
  for (size_t i = 0; i < r->n_ranks; i++) {
    const Stoker__V1__RankStatus *k = r->ranks[i];
    const Stoker__V1__ClientStats *c = k->stats;
    if (!c || k->last_report_ms_ago > RANK_FRESH_MS) continue;
    p->nranks++;
    double st = c->stall_fraction >= 0 && c->stall_fraction < 1 ? c->stall_fraction : 0;
    if (c->step_ms >= STK_MIN_STEP_MS && isfinite(c->step_ms) && c->step_ms < 1e9) {
      /* the step as the loop lives it: 1 / its batch rate (a told step
       * plus the stall would not include the CPU waits of a throttled
       * host), else compute + stall */
      double step = c->batches_per_s > 0 && isfinite(c->batches_per_s)
                        ? 1000 / c->batches_per_s
                        : c->step_ms / (1 - st);
      if (step > p->step_ms_measured) {
        p->step_ms_measured = step;
        p->stall_measured = st;
      }
      if (c->step_ms / 1e3 > s->job.compute_s) s->job.compute_s = c->step_ms / 1e3;
    }
    if (c->recv_cpu_s_per_gb > 0 && isfinite(c->recv_cpu_s_per_gb) &&
        c->recv_cpu_s_per_gb > recv)
      recv = c->recv_cpu_s_per_gb;
  }
  if (o->recv > 0) s->job.recv_cpu_s_per_gb = o->recv;
  else if (recv > 0) s->job.recv_cpu_s_per_gb = recv;
  else {
    s->job.recv_cpu_s_per_gb = 0.5;
    p->recv_assumed = 1;
    note(p, "receiving cost assumed 0.5 CPU-s/GB (no rank reported one yet)");
  }

  /* the workers, by instance type and host */
  size_t nw = r->n_workers;
  wrow *rows = calloc(nw ? nw : 1, sizeof(*rows));
  if (!rows) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  uint32_t untyped = 0;
  for (size_t i = 0; i < nw; i++) {
    const Stoker__V1__WorkerStatus *ws = r->workers[i];
    const Stoker__V1__WorkerInfo *wi = ws->worker;
    wrow *x = &rows[i];
    x->type = wi && wi->instance_type && *wi->instance_type ? wi->instance_type : "";
    if (!*x->type && o->worker_type && *o->worker_type) x->type = o->worker_type;
    if (!*x->type) untyped++;
    snprintf(x->host, sizeof(x->host), "%s", wi && wi->address ? wi->address : "");
    char *colon = strrchr(x->host, ':');
    if (colon) *colon = 0;
    double cc = wi ? stk__worker_usable_cores(wi->cpu_cores, wi->cores) : 0;
    x->cores = cc > 0 && cc < 1e6 ? cc : 0;
    double bpc = ws->stats ? ws->stats->batches_per_cpu_s : 0;
    x->rate = bpc > 0 && isfinite(bpc) ? bpc * sp->batch_size : 0;
  }
  qsort(rows, nw, sizeof(*rows), wrow_cmp);
  tagg agg[STK_CM_CANDIDATES_MAX + 1];
  size_t na = 0;
  tagg local = {acc, 0, 0, 0, 0, 0};
  double all_rate = 0, all_cores = 0;
  int unknown_type = 0;
  for (size_t i = 0; i < nw; i++) {
    const wrow *x = &rows[i];
    if (x->rate > 0 && x->cores > 0)
      all_rate += x->rate * x->cores, all_cores += x->cores;
    if (!*x->type) continue;
    tagg *a = NULL;
    if (!strcmp(x->type, acc->name)) a = &local;
    else {
      const stk__instance *ty = stk__instances_find(t, x->type);
      if (!ty) {
        unknown_type = 1;
        continue;
      }
      if (na && agg[na - 1].type == ty) a = &agg[na - 1];
      else if (na < STK_CM_CANDIDATES_MAX) {
        a = &agg[na++];
        memset(a, 0, sizeof(*a));
        a->type = ty;
      } else continue;
    }
    int new_host =
        i == 0 || strcmp(rows[i - 1].type, x->type) || strcmp(rows[i - 1].host, x->host);
    a->hosts += new_host;
    a->workers++;
    a->cores += x->cores;
    if (x->rate > 0 && x->cores > 0)
      a->rate_sum += x->rate * x->cores, a->rate_cores += x->cores;
  }
  free(rows);
  double mean_rate = all_cores > 0 ? all_rate / all_cores : 0;
  if (untyped)
    note(p,
         "%u worker(s) did not tell their instance type (stoker-worker --instance-type) "
         "and are left out",
         untyped);
  if (unknown_type) note(p, "workers of a type not in the table are left out");

  /* the training hosts */
  s->base.accel = acc;
  uint32_t per = acc->accelerators;
  s->base.accel_count = o->accel_count   ? o->accel_count
                        : r->accel_hosts ? r->accel_hosts
                                         : (sp->world_size + per - 1) / per;
  uint32_t ranks_per_host =
      (sp->world_size + s->base.accel_count - 1) / s->base.accel_count;
  p->local_workers = local.workers;
  if (o->spare_cores > 0) s->base.local_cores = o->spare_cores;
  else if (local.cores > 0) s->base.local_cores = local.cores / s->base.accel_count;
  else {
    s->base.local_cores = acc->vcpu - ranks_per_host;
    if (s->base.local_cores < 0) s->base.local_cores = 0;
    p->spare_assumed = 1;
    note(p,
         "spare cores per training host assumed %g (vCPU minus one per rank; "
         "--spare-cores)",
         s->base.local_cores);
  }
  s->base.accel_rate = tagg_rate(&local);
  double gr = given_rate(o, acc->name);
  if (gr > 0) {
    s->base.accel_rate = gr;
    note(p, "%s's images per CPU-second as given (%.0f)", acc->name, gr);
  }
  if (!(s->base.accel_rate > 0) && mean_rate > 0) {
    s->base.accel_rate = mean_rate;
    p->accel_rate_assumed = 1;
    note(p, "%s's images per CPU-second taken from the data workers' (%.0f)", acc->name,
         mean_rate);
  }

  /* the data hosts now: the type with the most hosts */
  for (size_t i = 0; i < na; i++) {
    p->data_workers += agg[i].workers;
    if (agg[i].hosts > p->now_data_count) {
      p->now_data_count = agg[i].hosts;
      p->now_data = agg[i].type;
    }
  }
  s->base.local_loading = local.workers > 0 && p->data_workers > 0;
  s->table = t;

  /* candidates: the live types, then the coordinator's and the caller's */
  for (size_t i = 0; i < na && s->ncand < STK_CM_CANDIDATES_MAX; i++) {
    double rate = tagg_rate(&agg[i]);
    if ((gr = given_rate(o, agg[i].type->name)) > 0) {
      rate = gr;
      note(p, "%s's images per CPU-second as given (%.0f)", agg[i].type->name, gr);
    }
    s->cand[s->ncand++] = (stk__cm_candidate){
        agg[i].type, rate > 0 ? rate : mean_rate,
        agg[i].hosts && agg[i].cores > 0 ? agg[i].cores / agg[i].hosts : 0};
  }
  char list[1024];
  snprintf(list, sizeof(list), "%s,%s", r->data_type ? r->data_type : "",
           o->data ? o->data : "");
  for (char *save = NULL, *tok = strtok_r(list, ", ", &save); tok;
       tok = strtok_r(NULL, ", ", &save)) {
    const stk__instance *ty = stk__instances_find(t, tok);
    if (!ty) {
      snprintf(err, errlen,
               "missing: data-host type '%.60s' is not in the instance table",
               stk__instance_name_ok(tok) ? tok : "?");
      return -1;
    }
    int dup = 0;
    for (size_t i = 0; i < s->ncand; i++) dup |= s->cand[i].type == ty;
    if (dup || ty->accelerators || s->ncand == STK_CM_CANDIDATES_MAX) continue;
    if ((gr = given_rate(o, ty->name)) > 0) {
      s->cand[s->ncand++] = (stk__cm_candidate){ty, gr, 0};
      note(p, "%s's images per CPU-second as given (%.0f)", ty->name, gr);
      continue;
    }
    s->cand[s->ncand++] = (stk__cm_candidate){ty, mean_rate, 0};
    if (mean_rate > 0)
      note(p, "%s's images per CPU-second taken from the workers' (%.0f)", ty->name,
           mean_rate);
  }
  uint32_t mx = o->max_data_hosts ? o->max_data_hosts : 4;
  if (mx < p->now_data_count + 3) mx = p->now_data_count + 3;
  s->max_data_hosts = mx;
  return 0;
}

void stk__plan_shape_label(const stk__cm_option *o, char *buf, size_t len) {
  const stk__cm_shape *s = &o->shape;
  int k = snprintf(buf, len, "%u x %s", s->accel_count, s->accel->name);
  if (k < 0 || (size_t)k >= len) return;
  if (s->data_count)
    snprintf(buf + k, len - (size_t)k, " + %u x %s", s->data_count, s->data->name);
  else if (o->larger) snprintf(buf + k, len - (size_t)k, " (homogeneous, larger)");
  else snprintf(buf + k, len - (size_t)k, " (homogeneous)");
}

int stk__live_current(const stk__live_plan *p, const stk__cm_option *out, size_t n) {
  for (size_t i = 0; i < n; i++) {
    const stk__cm_shape *s = &out[i].shape;
    if (out[i].larger || s->accel != p->s.base.accel) continue;
    if (!p->now_data_count ? !s->data_count
                           : s->data == p->now_data && s->data_count == p->now_data_count)
      return (int)i;
  }
  return -1;
}

/* The smallest count of type ty at which the link binds, or 0. */
static uint32_t link_from(const stk__cm_option *out, size_t n, const stk__instance *ty) {
  for (size_t i = 0; i < n; i++)
    if (out[i].shape.data == ty && out[i].r.ok && out[i].r.bind == STK_CM_BIND_LINK)
      return out[i].shape.data_count;
  return 0;
}

void stk__live_purchase(const stk__live_plan *p, const stk__cm_option *out, size_t n,
                        int best, int cur, char *buf, size_t len) {
  if (best < 0) {
    const char *m = "missing: a figure the model needs";
    if (cur >= 0 && !out[cur].r.ok) m = out[cur].r.missing;
    else if (n && !out[0].r.ok) m = out[0].r.missing;
    snprintf(buf, len, "%s", m);
    return;
  }
  const stk__cm_option *b = &out[best];
  char bl[200], step_now[96] = "";
  stk__plan_shape_label(b, bl, sizeof(bl));
  if (cur < 0 || !out[cur].r.ok) {
    snprintf(buf, len, "cheapest: %s: %.1f ms/step (%s binds), $%.6f/step", bl,
             b->r.step_s * 1e3, stk__cm_bind_name(b->r.bind), b->r.usd_per_step);
    return;
  }
  const stk__cm_option *c = &out[cur];
  if (p->step_ms_measured > 0)
    snprintf(step_now, sizeof(step_now), "%.1f ms measured (the model: %.1f)",
             p->step_ms_measured, c->r.step_s * 1e3);
  else snprintf(step_now, sizeof(step_now), "%.1f ms by the model", c->r.step_s * 1e3);
  double d = 100 * (b->r.usd_per_step / c->r.usd_per_step - 1);
  int k;
  if (best == cur) {
    char cl[200];
    stk__plan_shape_label(c, cl, sizeof(cl));
    k = snprintf(buf, len, "keep %s: the cheapest $/step; step %s, %s binds", cl,
                 step_now, stk__cm_bind_name(c->r.bind));
    /* what one data host fewer would cost */
    for (size_t i = 0; c->shape.data_count && i < n; i++)
      if (out[i].shape.data == c->shape.data &&
          out[i].shape.data_count + 1 == c->shape.data_count && out[i].r.ok && k > 0 &&
          (size_t)k < len) {
        k += snprintf(buf + k, len - (size_t)k, "; with %u: %.1f ms/step, $/step %+.0f%%",
                      out[i].shape.data_count, out[i].r.step_s * 1e3,
                      100 * (out[i].r.usd_per_step / c->r.usd_per_step - 1));
        break;
      }
  } else if (!b->larger && b->shape.data_count && b->shape.data == c->shape.data &&
             b->shape.data_count > c->shape.data_count) {
    k = snprintf(buf, len,
                 "add %u x %s to the data hosts: step %s -> %.1f ms, $/step %+.0f%%",
                 b->shape.data_count - c->shape.data_count, b->shape.data->name, step_now,
                 b->r.step_s * 1e3, d);
  } else if (!b->larger && b->shape.data_count && !c->shape.data_count) {
    k = snprintf(
        buf, len, "add %u x %s as data hosts: step %s -> %.1f ms, $/step %+.0f%%",
        b->shape.data_count, b->shape.data->name, step_now, b->r.step_s * 1e3, d);
  } else if (!b->larger && b->shape.data_count && b->shape.data == c->shape.data) {
    k = snprintf(buf, len,
                 "remove %u x %s from the data hosts: step %s -> %.1f ms, $/step %+.0f%%",
                 c->shape.data_count - b->shape.data_count, b->shape.data->name, step_now,
                 b->r.step_s * 1e3, d);
  } else if (!b->larger && !b->shape.data_count) {
    k = snprintf(
        buf, len,
        "remove the %u x %s data host(s) (load on the training hosts alone): step "
        "%s -> %.1f ms, $/step %+.0f%%",
        c->shape.data_count, c->shape.data->name, step_now, b->r.step_s * 1e3, d);
  } else {
    k = snprintf(buf, len, "change to %s: step %s -> %.1f ms, $/step %+.0f%%", bl,
                 step_now, b->r.step_s * 1e3, d);
  }
  if (k < 0 || (size_t)k >= len) return;
  if (best != cur)
    k += snprintf(buf + k, len - (size_t)k, " (%s binds)", stk__cm_bind_name(b->r.bind));
  if (k < 0 || (size_t)k >= len) return;
  const stk__instance *ty = b->shape.data ? b->shape.data : c->shape.data;
  uint32_t from = ty ? link_from(out, n, ty) : 0;
  if (from)
    snprintf(buf + k, len - (size_t)k, "; the link binds from %u x %s", from, ty->name);
}
