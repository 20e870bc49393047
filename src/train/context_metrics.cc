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
  const double mine[2] = {cc ? double(cc->compute_ns()) * 1e-6 : 0.0,
                          cc ? double(cc->compute_cpu_ns()) * 1e-6 : 0.0};
  std::vector<double> all(size_t(2 * world.size()));
  world.all_gather(mine, all.data(), 2, DType::f64);
  if (!cc) return json::object();
  std::vector<double> wall, cpu;
  for (size_t r = 0; r < all.size(); r += 2) wall.push_back(all[r]), cpu.push_back(all[r + 1]);
  auto max_over_mean = [](const std::vector<double>& v) {
    double sum = 0, mx = 0;
    for (double x : v) sum += x, mx = std::max(mx, x);
    return sum > 0 ? mx / (sum / double(v.size())) : 1.0;
  };
  return {{"cp", cc->size()},
          {"mode", model::cp_mode_name(cc->options().mode)},
          {"chunks", model::cp_chunks_name(cc->options().chunks)},
          {"attention_ms_per_rank", wall},
          {"attention_max_over_mean", max_over_mean(wall)},
          {"attention_cpu_ms_per_rank", cpu},
          {"attention_cpu_max_over_mean", max_over_mean(cpu)},
          {"buffer_bytes", cc->buffer_bytes()}};
}

}  // namespace strata::train
