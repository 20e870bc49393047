#include "parallel/muon.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "cost/flops.h"
#include "model/tensor/collectives.h"
#include "parallel/engine.h"

namespace strata::parallel {

const char* optimizer_name(OptimizerKind k) { return k == OptimizerKind::muon ? "muon" : "adamw"; }

OptimizerKind parse_optimizer(const std::string& name) {
  if (name == "adamw") return OptimizerKind::adamw;
  if (name == "muon") return OptimizerKind::muon;
  fail_setting(setting("optimizer"), " ", name.empty() ? "''" : name, ": expected adamw or muon");
}

bool is_muon_view(const model::ParamView& v) {
  const bool block = v.name.rfind("h.", 0) == 0 || v.name.rfind("layers.", 0) == 0;
  return block && v.shape.size() == 2 && v.name.find(".router.") == std::string::npos;
}

std::vector<MuonMatrix> muon_matrices(const std::vector<model::ParamView>& table) {
  std::vector<MuonMatrix> out;
  for (const model::ParamView& v : table) {
    if (!is_muon_view(v)) continue;
    const int rows = int(v.shape[0]), cols = int(v.shape[1]);
    const std::string qkv = "attn.c_attn.weight";
    const bool fused_qkv = v.name.size() > qkv.size() && v.name.compare(v.name.size() - qkv.size(), qkv.size(), qkv) == 0;
    const int parts = fused_qkv && rows % 3 == 0 ? 3 : 1;
    for (int p = 0; p < parts; ++p)
      out.push_back({v.offset + int64_t(p) * (rows / parts) * cols, rows / parts, cols, v.unit, v.decay});
  }
  std::sort(out.begin(), out.end(), [](const MuonMatrix& a, const MuonMatrix& b) { return a.begin < b.begin; });
  return out;
}

std::vector<MuonMatrix> muon_matrices(const model::ModelPart& model) {
  std::vector<MuonMatrix> out = muon_matrices(model.param_table());
  const int T = model.tensor_comm() ? model.tensor_comm()->group().size() : 1;
  if (T == 1) return out;
  const TensorLayout layout = model.tensor_layout();
  for (MuonMatrix& m : out) {
    const auto piece = std::find_if(layout.begin(), layout.end(), [&](const TensorPiece& p) {
      return p.local_offset <= m.begin && m.begin < p.local_offset + p.numel();
    });
    STRATA_CHECK(piece != layout.end() && piece->global_shape.size() == 2,
                 "internal: Muon matrix at ", m.begin, " is in no 2-D piece of the rank's layout");
    m.tp = T;
    m.tp_axis = piece->extents[1] < piece->global_shape[1] ? 1 : piece->extents[0] < piece->global_shape[0] ? 0 : -1;
  }
  return out;
}

std::vector<int> muon_owners(const std::vector<MuonMatrix>& matrices, int ranks, int ns_steps) {
  std::vector<size_t> order(matrices.size());
  std::iota(order.begin(), order.end(), size_t(0));
  auto cost = [&](size_t i) {
    return cost::newton_schulz_flops(matrices[i].full_rows(), matrices[i].full_cols(), ns_steps);
  };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return cost(a) > cost(b); });
  std::vector<double> load(size_t(std::max(ranks, 1)), 0.0);
  std::vector<int> owner(matrices.size(), 0);
  for (size_t i : order) {
    const int r = int(std::min_element(load.begin(), load.end()) - load.begin());
    owner[i] = r;
    load[size_t(r)] += cost(i);
  }
  return owner;
}

int64_t muon_elems_in(const std::vector<MuonMatrix>& matrices, int64_t begin, int64_t end) {
  int64_t n = 0;
  for (const MuonMatrix& m : matrices) n += std::max<int64_t>(0, std::min(end, m.end()) - std::max(begin, m.begin));
  return n;
}

int64_t muon_bytes_per_step(const std::vector<MuonMatrix>& matrices,
                            const std::vector<std::pair<int64_t, int64_t>>& unit_ranges, int stage) {
  if (stage == 0) return 0;
  int64_t bytes = 0;
  for (const auto& [b, e] : unit_ranges)
    if (muon_elems_in(matrices, b, e) > 0) bytes += 8 * (e - b);
  return bytes;
}

int64_t muon_tp_bytes(const std::vector<MuonMatrix>& matrices, int ns_steps, int ranks, int rank) {
  const std::vector<int> owner = muon_owners(matrices, ranks, ns_steps);
  int64_t bytes = 0;
  for (size_t i = 0; i < matrices.size(); ++i)
    if (matrices[i].tp_axis >= 0 && owner[i] == rank) bytes += 4 * matrices[i].size() * matrices[i].tp;
  return bytes;
}

double muon_ns_flops(const std::vector<MuonMatrix>& matrices, int ns_steps) {
  double f = 0;
  for (const MuonMatrix& m : matrices) f += cost::newton_schulz_flops(m.full_rows(), m.full_cols(), ns_steps);
  return f;
}

int64_t muon_numel(const std::vector<model::ParamView>& table) {
  int64_t n = 0;
  for (const model::ParamView& v : table)
    if (is_muon_view(v) && v.primary) n += numel(v.shape);
  return n;
}

}  // namespace strata::parallel
