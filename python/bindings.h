// The parts of module _strata, one function per area (python/*_bindings.cc).
#pragma once
#include <pybind11/pybind11.h>

namespace strata::python {

void bind_ckpt(pybind11::module_& m);  // checkpoints: list, tensors, read, Hugging Face export
void bind_plan(pybind11::module_& m);  // the planner: `strata plan --json` as a string

}  // namespace strata::python
