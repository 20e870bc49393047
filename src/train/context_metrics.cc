#include "train/context_metrics.h"

#include <algorithm>
#include <vector>

#include "model/context/context_comm.h"
#include "model/context/cp_cost.h"

namespace strata::train {

using nlohmann::json;

CpMark cp_mark(const model::GPT& m) {
  const model::ContextComm* cc = m.context_comm();
  if (!cc) return {};
  return {cc->bytes(), cc->compute_ns()};
}

json cp_step_metrics(const model::GPT& m, const CpMark& begin, int64_t sequences, int T) {
  const model::ContextComm* cc = m.context_comm();
  if (!cc) return json::object();
  const CpMark now = cp_mark(m);
  const model::GPTConfig& g = m.config();
  const int64_t Cl = g.dim / m.shard().size;
  const model::CpMode mode = cc->options().mode;
  const int C = cc->size();
  const int64_t Tl = T / C;
  return {{"cp_bytes", now.bytes - begin.bytes},
          {"cp_bytes_formula", model::cp_bytes_per_micro(mode, C, g.layers, sequences, T, Cl)},
          {"cp_bytes_per_layer_fwd", model::cp_attention_bytes(mode, C, sequences, Tl, Cl, false)},
          {"cp_bytes_per_layer_bwd", model::cp_attention_bytes(mode, C, sequences, Tl, Cl, true)},
          {"cp_attention_ms", double(now.compute_ns - begin.compute_ns) * 1e-6}};
}

json cp_summary(const model::GPT& m, comm::ProcessGroup& world) {
  const model::ContextComm* cc = m.context_comm();
  double mine = cc ? double(cc->compute_ns()) * 1e-6 : 0.0;
  std::vector<double> all(size_t(world.size()));
  world.all_gather(&mine, all.data(), 1, DType::f64);
  if (!cc) return json::object();
  double sum = 0, mx = 0;
  for (double x : all) sum += x, mx = std::max(mx, x);
  const double mean = sum / double(all.size());
  return {{"cp", cc->size()},
          {"mode", model::cp_mode_name(cc->options().mode)},
          {"chunks", model::cp_chunks_name(cc->options().chunks)},
          {"attention_ms_per_rank", all},
          {"attention_max_over_mean", mean > 0 ? mx / mean : 1.0},
          {"buffer_bytes", cc->buffer_bytes()}};
}

}  // namespace strata::train
