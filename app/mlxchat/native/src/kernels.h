// The kernels of _mlxchat_native: each .cpp binds its own functions.
#pragma once

#include <nanobind/nanobind.h>

namespace nb = nanobind;

void bind_qmm(nb::module_& m);
void bind_q8(nb::module_& m);
void bind_rms_norm(nb::module_& m);
void bind_rope(nb::module_& m);
void bind_sdpa(nb::module_& m);
