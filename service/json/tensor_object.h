/* json/tensor_object.h: what json/tensor.c and json/tensor_object.c share
 * inside the codec. */
#ifndef ATTND_JSON_TENSOR_OBJECT_H
#define ATTND_JSON_TENSOR_OBJECT_H

#include "json/json.h"

/* codec_array_parse of a tensor object at r->p (its '{'): the same
 * contract, for CODEC_LEAF_F32. */
int codec__tensor_object(codec_reader *r, const char *ptr,
                         const char *shape_doc, int min_rank, int max_rank,
                         codec_array *a, codec_error *err);

/* Sets the unavailable error of a failed allocation. */
void codec__oom(codec_error *err);

#endif
