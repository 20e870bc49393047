// strata.plan's C++ side: keyword arguments (the flags of `strata plan` without the dashes,
// '-' as '_') into the planner's PlanArgs, and what `strata plan --json` prints for them: the
// same function builds the request for both (plan/request.h), so the figures are the same.
#include <functional>
#include <map>

#include "bindings.h"
#include "core/error.h"
#include "nlohmann/json.hpp"
#include "plan/request.h"

namespace py = pybind11;

namespace strata::python {
namespace {

using plan::PlanArgs;
using Setter = std::function<void(PlanArgs&, py::handle)>;

// A value of the Python type T, or an Error naming the keyword and what it got.
template <typename T>
T value(const std::string& key, py::handle v, const char* expected) {
  // bool is an int in Python: refuse it where a count is meant, and ints where a flag is.
  const bool is_bool = py::isinstance<py::bool_>(v);
  bool ok = false;
  if constexpr (std::is_same_v<T, bool>) ok = is_bool;
  else if constexpr (std::is_integral_v<T>) ok = py::isinstance<py::int_>(v) && !is_bool;
  else if constexpr (std::is_floating_point_v<T>) ok = (py::isinstance<py::float_>(v) || py::isinstance<py::int_>(v)) && !is_bool;
  else ok = py::isinstance<py::str>(v);
  if (!ok) fail(key, "=", std::string(py::repr(v)), ": expected ", expected);
  try {
    return v.cast<T>();
  } catch (const py::cast_error&) {
    fail(key, "=", std::string(py::repr(v)), ": expected ", expected, " (out of range)");
  }
}

const std::map<std::string, Setter>& setters() {
  static const std::map<std::string, Setter> s = [] {
    std::map<std::string, Setter> m;
    auto opt_int = [&](const char* k, auto PlanArgs::*field) {
      m[k] = [k, field](PlanArgs& a, py::handle v) {
        using T = typename std::remove_reference_t<decltype(a.*field)>::value_type;
        a.*field = value<T>(k, v, "an integer");
      };
    };
    auto opt_num = [&](const char* k, std::optional<double> PlanArgs::*field) {
      m[k] = [k, field](PlanArgs& a, py::handle v) { a.*field = value<double>(k, v, "a number"); };
    };
    auto num = [&](const char* k, double PlanArgs::*field) {
      m[k] = [k, field](PlanArgs& a, py::handle v) { a.*field = value<double>(k, v, "a number"); };
    };
    auto str = [&](const char* k, std::string PlanArgs::*field) {
      m[k] = [k, field](PlanArgs& a, py::handle v) { a.*field = value<std::string>(k, v, "a string"); };
    };
    auto opt_str = [&](const char* k, std::optional<std::string> PlanArgs::*field) {
      m[k] = [k, field](PlanArgs& a, py::handle v) { a.*field = value<std::string>(k, v, "a string"); };
    };
    auto flag = [&](const char* k, bool PlanArgs::*field) {
      m[k] = [k, field](PlanArgs& a, py::handle v) { a.*field = value<bool>(k, v, "True or False"); };
    };
    str("model", &PlanArgs::model);
    opt_str("arch", &PlanArgs::arch);
    opt_int("layers", &PlanArgs::layers);
    opt_int("dim", &PlanArgs::hidden);
    opt_int("hidden", &PlanArgs::hidden);  // the spelling of an earlier release (strata/plan.py warns)
    opt_int("heads", &PlanArgs::heads);
    opt_int("kv_heads", &PlanArgs::kv_heads);
    opt_int("ffn", &PlanArgs::ffn);
    opt_int("seq", &PlanArgs::seq);
    opt_int("vocab", &PlanArgs::vocab);
    opt_int("experts", &PlanArgs::experts);
    opt_int("top_k", &PlanArgs::top_k);
    opt_int("expert_ffn", &PlanArgs::expert_ffn);
    opt_int("shared_experts", &PlanArgs::shared_experts);
    opt_int("route_groups", &PlanArgs::route_groups);
    opt_int("route_max_groups", &PlanArgs::route_max_groups);
    str("gpu", &PlanArgs::gpu);
    str("intra_bench", &PlanArgs::intra_bench);
    str("inter_bench", &PlanArgs::inter_bench);
    opt_int("gpus", &PlanArgs::gpus);
    opt_int("gpus_per_node", &PlanArgs::gpus_per_node);
    opt_int("batch", &PlanArgs::global_batch);
    opt_int("global_batch", &PlanArgs::global_batch);  // the spelling of an earlier release
    opt_int("micro_batches", &PlanArgs::micro_batches);
    opt_num("efficiency", &PlanArgs::efficiency);
    opt_int("tp", &PlanArgs::tp);
    opt_int("pp", &PlanArgs::pp);
    opt_int("dp", &PlanArgs::dp);
    opt_int("cp", &PlanArgs::cp);
    opt_int("ep", &PlanArgs::ep);
    opt_int("zero", &PlanArgs::zero);
    opt_int("micro_batch", &PlanArgs::micro_batch);
    opt_str("recompute", &PlanArgs::recompute);
    opt_str("tokens", &PlanArgs::tokens);
    str("precision", &PlanArgs::precision);
    str("grad_precision", &PlanArgs::grad_precision);
    str("optimizer", &PlanArgs::optimizer);
    str("cp_mode", &PlanArgs::cp_mode);
    str("schedule", &PlanArgs::schedule);
    m["virtual_stages"] = [](PlanArgs& a, py::handle v) { a.virtual_stages = value<int>("virtual_stages", v, "an integer"); };
    m["top"] = [](PlanArgs& a, py::handle v) { a.top = value<int>("top", v, "an integer"); };
    flag("no_sp", &PlanArgs::no_sp);
    flag("rlhf", &PlanArgs::rlhf);
    num("headroom", &PlanArgs::headroom);
    num("bucket_mb", &PlanArgs::bucket_mb);
    num("overlap", &PlanArgs::overlap);
    num("gpu_mtbf_hours", &PlanArgs::gpu_mtbf_h);
    num("job_mtbf_hours", &PlanArgs::job_mtbf_h);
    num("storage_gbps", &PlanArgs::storage_gbps);
    num("restart_min", &PlanArgs::restart_min);
    opt_num("ckpt_stall_s", &PlanArgs::stall_s);
    opt_int("rollout_batch", &PlanArgs::rollout_batch);
    opt_str("algo", &PlanArgs::algo);
    opt_int("prompt_len", &PlanArgs::prompt_len);
    opt_int("response_len", &PlanArgs::response_len);
    opt_int("epochs", &PlanArgs::epochs);
    str("critic", &PlanArgs::critic);
    return m;
  }();
  return s;
}

std::string plan_json(const py::dict& kwargs) {
  PlanArgs a;
  const auto& known = setters();
  for (const auto& [k, v] : kwargs) {
    const std::string key = py::str(k);
    auto it = known.find(key);
    if (it == known.end()) fail("unknown argument '", key, "'");
    if (!v.is_none()) it->second(a, v);
  }
  py::gil_scoped_release unlocked;
  const plan::PlanRequest req = plan::build_plan_request(a);
  return plan::plan_to_json(req, plan::run_plan(req)).dump();
}

py::list plan_keywords() {
  py::list out;
  for (const auto& [k, _] : setters()) out.append(k);
  return out;
}

}  // namespace

void bind_plan(py::module_& m) {
  m.def("plan_json", &plan_json, py::arg("kwargs"));
  m.def("plan_keywords", &plan_keywords);
}

}  // namespace strata::python
