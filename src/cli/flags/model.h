// The model family, TOML section [model]: a preset (--model) or a Hugging Face directory
// (--init-from), with overrides of its architecture, and Mixture-of-Experts blocks:
//   --model tiny --layers 2 --dim 64 --heads 4 --max-seq 128 --vocab 512
//   --arch llama --kv-heads 2 --ffn 256 --norm-eps 1e-5 --rope-theta 1e4 --rope-scaling 8
//   --experts 8 --top-k 2 --moe-every 2 --capacity-factor 1.25 | --dropless ...
//   --expert-ffn 64 --shared-experts 1 --router-score sigmoid --aux-loss-scope sequence
//   --route-groups 2 --route-max-groups 1
#pragma once
#include <string>

#include "cli/flags/family.h"
#include "model/model_part.h"

namespace strata::cli {

struct ModelFlags {
  std::string model = "tiny";
  std::string init_from;
  int layers = 0, dim = 0, heads = 0, max_seq = 0, vocab = 0;  // 0: the preset's
  std::string arch;                                            // empty: the preset's
  int kv_heads = 0, ffn = 0;
  float norm_eps = 0, rope_theta = 0;
  std::string rope_scaling;
  bool tie = false, untie = false;
  model::expert::MoEConfig moe;
  std::string router_score = "softmax", aux_scope = "group";  // into moe by resolve()

  void add_to(CLI::App& app, const Only& only = {});

  // After parsing: the model the flags describe and the name it is reported by ("tiny",
  // "llama from DIR"). Throws one line naming the flag for a bad or contradicting value.
  struct Resolved {
    model::GPTConfig config;
    std::string name;
  };
  Resolved resolve(const CLI::App& app) const;

 private:
  model::GPTConfig from_hf(const CLI::App& app) const;
  void apply_arch(const CLI::App& app, model::GPTConfig& m) const;
};

}  // namespace strata::cli
