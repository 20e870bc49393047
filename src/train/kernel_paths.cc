#include "train/kernel_paths.h"

#include <map>
#include <vector>

#include "comm/process_group.h"
#include "kernels/cpu.h"
#include "kernels/gemm_bf16.h"
#include "kernels/isa.h"
#include "kernels/selfcheck.h"

namespace strata::train {

std::string KernelPaths::words() const {
  std::string s = kernels::isa_name(kernels::Isa(isa));
  if (bf16) {
    const auto p = kernels::GemmPath(bf16_path);
    s += " (bf16 ";
    s += p == kernels::GemmPath::fp32 ? "emulated" : kernels::gemm_path_name(p);
    s += ')';
  }
  return s;
}

nlohmann::json KernelPaths::to_json() const {
  const kernels::CpuInfo& cpu = kernels::cpu_info();
  nlohmann::json checks = nlohmann::json::array();
  for (const kernels::PathCheck& c : kernels::path_checks())
    checks.push_back({{"path", c.path}, {"ok", c.ok}, {"why", c.why}});
  nlohmann::json j = {{"isa", kernels::isa_name(kernels::Isa(isa))},
                      {"cpu", {{"vendor", cpu.vendor}, {"model", cpu.model}, {"flags", cpu.flags}}},
                      {"self_checks", checks},
                      {"notes", kernels::path_notes()}};
  j["bf16_gemm"] = bf16 ? nlohmann::json(kernels::gemm_path_name(kernels::GemmPath(bf16_path)))
                        : nlohmann::json();
  return j;
}

KernelPaths chosen_kernel_paths(bool bf16) {
  KernelPaths k;
  k.bf16 = bf16;
  k.isa = int(kernels::isa());
  if (bf16) k.bf16_path = int(kernels::bf16_gemm_path());
  return k;
}

std::string kernel_paths_of_group(const KernelPaths& mine, comm::ProcessGroup* group) {
  if (!group || group->size() <= 1) return mine.words();
  const double code = mine.isa * 8 + mine.bf16_path;
  std::vector<double> all(size_t(group->size()), 0.0);
  group->all_gather(&code, all.data(), 1, DType::f64);
  // Each choice with the ranks that made it, as runs "0-1,4".
  std::map<int, std::vector<int>> by_code;
  for (int r = 0; r < int(all.size()); ++r) by_code[int(all[size_t(r)])].push_back(r);
  if (by_code.size() == 1) return mine.words();
  std::string out;
  for (const auto& [c, ranks] : by_code) {
    KernelPaths k = mine;
    k.isa = c / 8, k.bf16_path = c % 8;
    std::string list;
    for (size_t i = 0; i < ranks.size();) {
      size_t j = i;
      while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
      if (!list.empty()) list += ',';
      list += std::to_string(ranks[i]);
      if (j > i) list += '-', list += std::to_string(ranks[j]);
      i = j + 1;
    }
    if (!out.empty()) out += ", ";
    out += k.words();
    out += ranks.size() > 1 ? " on ranks " : " on rank ";
    out += list;
  }
  return out;
}

}  // namespace strata::train
