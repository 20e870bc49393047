// Which kernel paths a rank chose on its CPU, and why: the start line's "kernels ..." and
// summary.json's "kernels" section. Every rank picks its own (kernels/isa.h,
// kernels/gemm_bf16.h), so on hosts of different CPU kinds the ranks may differ; the lead
// rank names each choice with the ranks that made it.
#pragma once
#include <string>

#include "nlohmann/json.hpp"

namespace strata::comm {
class ProcessGroup;
}

namespace strata::train {

struct KernelPaths {
  int isa = 0;        // kernels::Isa
  int bf16_path = 0;  // kernels::GemmPath under --precision bf16, else fp32
  bool bf16 = false;
  std::string words() const;  // "x86-64-v3", or under bf16 "x86-64-v4 (bf16 amx)"
  // {"isa", "bf16_gemm", "cpu": {"vendor", "model", "flags"}, "self_checks": [...], "notes": [...]}
  nlohmann::json to_json() const;
};

// This rank's choice (settles it: runs the self-checks on first use).
KernelPaths chosen_kernel_paths(bool bf16);

// The choices of every rank of group (null: this one alone), in words: "x86-64-v3" when all
// agree, else "x86-64-v3 on ranks 0-1, x86-64-v2 on ranks 2-3". A collective over group.
std::string kernel_paths_of_group(const KernelPaths& mine, comm::ProcessGroup* group);

}  // namespace strata::train
