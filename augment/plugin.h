/* plugin.h - what plugin.c offers: the plugin libraries a job names,
 * loaded when its dataset opens, and the lookup of their ops by name.
 * Private to augment/.
 */
#ifndef STOKER_AUGMENT_PLUGIN_H
#define STOKER_AUGMENT_PLUGIN_H

#include <stddef.h>

#include "augment_internal.h"

/* plugin.c: load every library of ds->spec.plugin from the plugin
 * directory (limits.plugin_dir, else $STOKER_PLUGIN_DIR), check its ABI
 * version and name, and check each chain op's arguments once. STK_OK, or
 * STK_INVALID_ARGUMENT / STK_NOT_FOUND with a message. */
int stk__plugins_load(stk_dataset *ds, char *err, size_t errlen);
/* Code the worker runs (a plugin library, a python op's module, the
 * directories they come from) must be writable only by root or the
 * worker's own user: path (followed if a link) belongs to one of them and
 * no group or other may write it. who names the code in the message
 * ("plugin 'cutout'"). STK_OK (also when path cannot be stat'ed: the
 * caller says what is missing), or STK_INVALID_ARGUMENT with a message
 * that says what to do. Thread-safe. */
int stk__code_trusted(const char *who, const char *path, char *err, size_t errlen);
/* dlclose what stk__plugins_load loaded and free the list (none is fine). */
void stk__plugins_unload(stk_dataset *ds);
/* The loaded op called name, or NULL (also for ds NULL). Thread-safe
 * after open. */
const struct stk_op_info *stk__plugin_find(const stk_dataset *ds, const char *name);

#endif
