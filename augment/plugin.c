/* plugin.c - loading the plugin ops a job names (`plugin = a,b`,
 * stoker/op.h): each DIR/<name>.so with dlopen, its stoker_op_info entry
 * checked (ABI version, name, functions), and every chain op of it given
 * its arguments once, so that a missing plugin, one of another version or
 * one refusing its arguments refuses the job at open with a clear message
 * instead of failing batch by batch.
 *
 * DIR is the worker operator's choice (stk_limits.plugin_dir or
 * $STOKER_PLUGIN_DIR), never the job's: a job only names a library in it,
 * and the names are [a-z][a-z0-9_]* (validated by the job spec), so no
 * path can reach outside it. A plugin is code the operator installed and
 * runs inside the worker's process.
 *
 * Loading happens in stk_dataset_open; the table is read-only afterwards,
 * so lookups are thread-safe.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/chain.h"
#include "common/error.h"
#include "augment_internal.h"
#include "plugin.h"
#include "stoker/op.h"

void stk__plugins_unload(stk_dataset *ds) {
  for (uint32_t i = 0; i < ds->nplugins; i++)
    if (ds->plugins[i].handle) dlclose(ds->plugins[i].handle);
  free(ds->plugins);
  ds->plugins = NULL, ds->nplugins = 0;
}

const stk_op_info *stk__plugin_find(const stk_dataset *ds, const char *name) {
  for (uint32_t i = 0; ds && i < ds->nplugins; i++)
    if (!strcmp(ds->plugins[i].name, name)) return ds->plugins[i].info;
  return NULL;
}

int stk__code_trusted(const char *who, const char *path, char *err, size_t errlen) {
  struct stat st;
  if (stat(path, &st) != 0) return STK_OK;
  if ((st.st_uid == 0 || st.st_uid == geteuid()) && !(st.st_mode & 022)) return STK_OK;
  return stk__errf(
      err, errlen, STK_INVALID_ARGUMENT,
      "%s: %s %s (mode %04o, owner uid %u): the worker loads code "
      "only from files and directories that root or its own user (uid %u) "
      "owns and nobody else may write (chmod go-w)",
      who, path, st.st_mode & 022 ? "is writable by others" : "belongs to another user",
      (unsigned)(st.st_mode & 07777), (unsigned)st.st_uid, (unsigned)geteuid());
}

/* Load one library into p. */
static int load_one(const char *dir, const char *name, stk__plugin *p, char *err,
                    size_t errlen) {
  char path[4096 + 64];
  snprintf(path, sizeof(path), "%s/%s.so", dir, name);
  struct stat st;
  if (stat(path, &st) != 0)
    return stk__errf(err, errlen, STK_NOT_FOUND,
                     "plugin '%s': %s not found (the worker's plugin directory is %s)",
                     name, path, dir);
  if (!S_ISREG(st.st_mode))
    return stk__errf(err, errlen, STK_INVALID_ARGUMENT, "plugin '%s': %s is not a file",
                     name, path);
  char who[STK__OP_NAME_MAX + 16];
  snprintf(who, sizeof(who), "plugin '%s'", name);
  int rc = stk__code_trusted(who, path, err, errlen);
  if (!rc) rc = stk__code_trusted(who, dir, err, errlen);
  if (rc) return rc;
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *e = dlerror();
    return stk__errf(err, errlen, STK_INVALID_ARGUMENT, "plugin '%s': cannot load: %s",
                     name, e ? e : "?");
  }
  stk_op_entry_fn entry;
  void *sym = dlsym(h, STK_OP_ENTRY);
  memcpy(&entry, &sym, sizeof(entry)); /* object pointer to function pointer */
  const stk_op_info *info = sym ? entry() : NULL;
  const char *why = NULL;
  char buf[160];
  if (!sym) why = "no " STK_OP_ENTRY " function (see stoker/op.h)";
  else if (!info) why = STK_OP_ENTRY "() returned NULL";
  else if (info->abi_version != STK_OP_ABI_VERSION) {
    snprintf(buf, sizeof(buf),
             "built for op ABI version %u, this worker loads version %d",
             info->abi_version, STK_OP_ABI_VERSION);
    why = buf;
  } else if (!info->name || strcmp(info->name, name)) {
    snprintf(buf, sizeof(buf), "calls its op '%.40s', not '%s' as its file name says",
             info->name ? info->name : "(null)", name);
    why = buf;
  } else if (!info->create || !info->apply) {
    why = "its create or apply function is NULL";
  }
  if (why) {
    dlclose(h);
    return stk__errf(err, errlen, STK_INVALID_ARGUMENT, "plugin '%s' (%s): %s", name,
                     path, why);
  }
  snprintf(p->name, sizeof(p->name), "%s", name);
  p->handle = h, p->info = info;
  return STK_OK;
}

int stk__plugins_load(stk_dataset *ds, char *err, size_t errlen) {
  const char *list = ds->spec.plugin;
  if (ds->spec.pipeline != STK_PIPELINE_CHAIN || !list[0]) return STK_OK;
  const char *dir = ds->limits.plugin_dir;
  if (!dir || !*dir) dir = getenv("STOKER_PLUGIN_DIR");
  if (!dir || !*dir)
    return stk__errf(err, errlen, STK_INVALID_ARGUMENT,
                     "the job uses plugin = %s, but this process has no plugin directory "
                     "(stoker-worker --plugin-dir DIR, or STOKER_PLUGIN_DIR)",
                     list);
  uint32_t n = 1;
  for (const char *p = list; *p; p++) n += *p == ',';
  ds->plugins = calloc(n, sizeof(*ds->plugins));
  if (!ds->plugins) return STK_NO_MEMORY;
  int rc = STK_OK;
  for (const char *p = list; *p && !rc;) {
    const char *e = strchr(p, ',');
    size_t l = e ? (size_t)(e - p) : strlen(p);
    char name[STK__OP_NAME_MAX];
    if (l >= sizeof(name)) l = sizeof(name) - 1; /* validated: shorter */
    memcpy(name, p, l), name[l] = 0;
    if (!stk__plugin_find(ds, name))
      rc = load_one(dir, name, &ds->plugins[ds->nplugins], err, errlen);
    if (!rc && ds->plugins[ds->nplugins].handle) ds->nplugins++;
    p += l + (e ? 1 : 0);
  }
  /* every op's arguments, once */
  static _Thread_local stk__chain c;
  if (!rc) rc = stk__chain_parse(ds->spec.chain, &c, NULL, err, errlen);
  for (uint32_t i = 0; !rc && i < c.n; i++) {
    if (c.ops[i].kind != STK__OP_PLUGIN) continue;
    const stk_op_info *info = stk__plugin_find(ds, c.ops[i].name);
    void *state = NULL;
    char why[200] = "";
    if (!info) {
      rc = stk__errf(err, errlen, STK_INVALID_ARGUMENT, "plugin op '%s' is not loaded",
                     c.ops[i].name);
    } else if (info->create(c.ops[i].args, &state, why, sizeof(why))) {
      why[sizeof(why) - 1] = 0;
      rc =
          stk__errf(err, errlen, STK_INVALID_ARGUMENT, "plugin op %s(%s): %s",
                    c.ops[i].name, c.ops[i].args, why[0] ? why : "refused its arguments");
    } else if (info->destroy) {
      info->destroy(state);
    }
  }
  if (rc) stk__plugins_unload(ds);
  return rc;
}
