/* sources_jpeg.c - PLACEHOLDER until the JPEG sources land: no ImageFolder
 * or tar source in this build (stk_dataset_open says STK_UNSUPPORTED). */
#include "internal.h"

const stk__source_ops *const stk__imagefolder_source_ptr = NULL;
const stk__source_ops *const stk__tar_source_ptr = NULL;
