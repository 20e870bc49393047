#include "train/context_metrics.h"

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "core/stats.h"
#include "cost/activations.h"
#include "cost/comm.h"
#include "model/context/context_comm.h"
#include "model/shard.h"

namespace strata::train {

using nlohmann::json;

CpMark cp_mark(const model::StageModel& m) {
  const model::ContextComm* cc = m.context_comm();
  if (!cc) return {};
  return {cc->bytes(), cc->compute_ns()};
}

json cp_step_metrics(const model::StageModel& m, const CpMark& begin, int64_t sequences, int T) {
  const model::ContextComm* cc = m.context_comm();
  if (!cc) return json::object();
  const CpMark now = cp_mark(m);
  const model::GPTConfig& g = m.config();
  const int64_t Cl = g.dim / m.shard().size;
  const bool ring = cc->options().mode == model::CpMode::ring;
  const int C = cc->size();
  const int64_t Tl = T / C;
  const cost::GptShape shape = model::gpt_shape(g);
  const int64_t Kl = cost::kv_columns(shape, m.shard().size), hs = g.head_dim();
  return {{"cp_bytes", now.bytes - begin.bytes},
          {"cp_bytes_formula", cost::cp_bytes_per_micro(ring, C, g.layers, sequences, T, Cl,
                                                        shape.recomputed_layers, Kl, hs)},
          {"cp_bytes_per_layer_fwd",
           cost::cp_attention_bytes(ring, C, sequences, Tl, Cl, false, Kl, hs)},
          {"cp_bytes_per_layer_bwd",
           cost::cp_attention_bytes(ring, C, sequences, Tl, Cl, true, Kl, hs)},
          {"cp_attention_ms", double(now.compute_ns - begin.compute_ns) * 1e-6}};
}

int64_t activation_bytes_per_rank(const model::StageModel& m, int b, int T) {
  const model::ContextComm* cc = m.context_comm();
  int64_t bytes = m.activation_bytes();
  if (cc) {
    const model::GPTConfig& g = m.config();
    const int tp = m.shard().size;
    const bool ring = cc->options().mode == model::CpMode::ring;
    bytes += cost::cp_buffer_bytes(ring, cc->size(), g.layers, b, T / cc->size(), g.dim / tp,
                                   g.heads / tp, cost::kv_columns(model::gpt_shape(g), tp));
  }
  return bytes;
}

namespace {
void refuse_over_budget(double max_mb, int64_t bytes, int T, int C, int b) {
  const double mb = double(bytes) / (1 << 20);
  STRATA_CHECK(mb <= max_mb, "--max-activation-mb ", max_mb, ": --seq ", T, " at --cp ", C,
               " (micro-batch ", b, ") needs ", double(int64_t(mb * 10 + 0.5)) / 10.0,
               " MiB of activations per rank");
}
}  // namespace

void check_activation_budget(double max_mb, const model::StageModel& m, int b, int T) {
  if (max_mb <= 0) return;
  const int C = m.context_comm() ? m.context_comm()->size() : 1;
  refuse_over_budget(max_mb, activation_bytes_per_rank(m, b, T), T, C, b);
}

void check_activation_budget(double max_mb, const model::GPTConfig& g, int tp, bool sp, int cp,
                             model::CpMode mode, int b, int T, bool bf16) {
  if (max_mb <= 0) return;
  const cost::GptShape m = model::gpt_shape(g);
  int64_t most = 0;
  for (int r = 0; r < tp; ++r)
    most = std::max(most, cp > 1 ? cost::cp_activation_bytes(m, tp, sp, r, b, bf16, mode == model::CpMode::ring, cp, T)
                                 : cost::tp_activation_bytes(m, tp, sp, r, b, bf16));
  refuse_over_budget(max_mb, most, T, cp, b);
}

void add_cp_section(SummaryBuilder& summary, const model::StageModel& m, comm::ProcessGroup& group) {
  const model::ContextComm* cc = m.context_comm();
  const double mine[2] = {cc ? double(cc->compute_ns()) * 1e-6 : 0.0,
                          cc ? double(cc->compute_cpu_ns()) * 1e-6 : 0.0};
  std::vector<double> all(size_t(2 * group.size()));
  group.all_gather(mine, all.data(), 2, DType::f64);
  if (!cc) return;
  std::vector<double> wall, cpu;
  for (size_t r = 0; r < all.size(); r += 2) wall.push_back(all[r]), cpu.push_back(all[r + 1]);
  auto max_over_mean = [](const std::vector<double>& v) {
    const double average = mean(v);
    return average > 0 ? *std::max_element(v.begin(), v.end()) / average : 1.0;
  };
  const double balance = max_over_mean(wall);
  summary.set("context_parallel", {{"cp", cc->size()},
                                   {"group", group.name()},
                                   {"mode", model::cp_mode_name(cc->options().mode)},
                                   {"chunks", model::cp_chunks_name(cc->options().chunks)},
                                   {"attention_ms_per_rank", wall},
                                   {"attention_max_over_mean", balance},
                                   {"attention_cpu_ms_per_rank", cpu},
                                   {"attention_cpu_max_over_mean", max_over_mean(cpu)},
                                   {"buffer_bytes", cc->buffer_bytes()}});
  summary.line(cat("context parallel: cp ", cc->size(), " ", model::cp_mode_name(cc->options().mode),
                   " (", model::cp_chunks_name(cc->options().chunks),
                   "); attention time max/mean over ", group.name(), " ", balance));
}

}  // namespace strata::train
