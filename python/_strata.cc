// The C++ parts `import strata` stands on (pybind11): the sampler's epoch orders, so a
// PyTorch script draws exactly the samples `strata train` would; the checkpoint reader and
// the planner (ckpt_bindings.cc, plan_bindings.cc). strata's one-line errors arrive as
// ValueError.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <optional>
#include <stdexcept>

#include "bindings.h"
#include "core/error.h"
#include "data/sampler.h"

namespace py = pybind11;

namespace {

// This rank's sample indices for positions [start, start + count * world) of an epoch of n
// samples, dealt round robin (position start + rank + k * world is the rank's k-th): a
// position p past the epoch's samples repeats position p mod n (DistributedSampler's padding).
// The order of positions is strata's EpochOrder (seed, epoch) when shuffling, else identity.
py::array_t<int64_t> rank_indices(int64_t n, int64_t world, int64_t rank, bool shuffle, uint64_t seed,
                                  int64_t epoch, int64_t start, int64_t count) {
  if (n < 0 || world < 1 || rank < 0 || rank >= world || start < 0 || count < 0 || epoch < 0)
    throw std::invalid_argument("rank_indices: bad arguments");
  py::array_t<int64_t> out(count);
  int64_t* o = out.mutable_data();
  if (count > 0 && n == 0) throw std::invalid_argument("rank_indices: an empty dataset has no samples");
  {
    py::gil_scoped_release unlocked;
    std::optional<strata::data::EpochOrder> order;
    if (shuffle) order.emplace(seed, epoch, n);
    for (int64_t k = 0; k < count; ++k) {
      const int64_t p = (start + rank + k * world) % n;
      o[k] = order ? (*order)(p) : p;
    }
  }
  return out;
}

}  // namespace

PYBIND11_MODULE(_strata, m) {
  m.doc() = "strata's C++ library, under the Python package strata";
  m.def("rank_indices", &rank_indices, py::arg("n"), py::arg("world"), py::arg("rank"), py::arg("shuffle"),
        py::arg("seed"), py::arg("epoch"), py::arg("start"), py::arg("count"));
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const strata::Error& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });
  strata::python::bind_ckpt(m);
  strata::python::bind_plan(m);
}
