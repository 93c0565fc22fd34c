/*
 * warpnorm kernel ABI: the one definition of every kernel argument struct.
 *
 * Included by the CUDA C++ kernels (cuda/<family>.cu) and read by bindgen (`cargo xtask bindings`)
 * to generate src/abi/generated.rs, which the Rust launch planner fills in. Never edit the
 * generated file by hand; change this header (or the per-family headers it includes) and
 * rerun `cargo xtask bindings`. CI runs `cargo xtask bindings --check`.
 *
 * Conventions:
 * - Every kernel takes exactly one argument: one of these structs, by value.
 * - Device pointers travel as `wn_devptr` (a 64-bit device address); the kernel casts them.
 * - Sizes, counts and strides are 64-bit so that tensors over 2^31 elements work.
 * - Only fixed-width C types; no padding surprises (fields ordered largest first where it
 *   matters, and every struct is checked for size/alignment by the generated layout tests).
 */
#ifndef WARPNORM_ABI_H
#define WARPNORM_ABI_H

#include <stdint.h>

/** A device address (what cuMemAlloc returns), as a plain 64-bit integer. */
typedef uint64_t wn_devptr;

#include "abi/copy.h"
#include "abi/layer_norm.h"
#include "abi/batch_norm.h"

#endif /* WARPNORM_ABI_H */
