#include "train/init_from.h"

#include "ckpt/chunks.h"
#include "ckpt/load.h"
#include "core/error.h"
#include "core/timer.h"
#include "train/metrics.h"

namespace strata::train {

model::GPTConfig hf_model_config(const ckpt::HfModel& m) {
  model::GPTConfig c;
  c.arch = model::parse_arch(m.arch);
  c.layers = int(m.layers), c.dim = int(m.dim), c.heads = int(m.heads);
  c.kv_heads = c.llama() ? int(m.kv_heads) : 0;
  c.ffn = c.llama() ? int(m.ffn) : 0;
  c.seq = int(m.max_seq);
  c.vocab = int(m.vocab);
  c.padded_vocab = int(model::padded_vocab(c.vocab));
  c.norm_eps = c.llama() ? float(m.norm_eps) : 1e-5f;
  c.rope_theta = float(m.rope_theta);
  c.rope_factor = float(m.rope_factor), c.rope_low_freq_factor = float(m.rope_low);
  c.rope_high_freq_factor = float(m.rope_high), c.rope_original_max_pos = float(m.rope_original);
  c.tie_embeddings = m.tie;
  return c;
}

std::vector<ckpt::TensorInfo> global_tensor_table(const model::GPTConfig& cfg) {
  std::vector<ckpt::TensorInfo> out;
  for (const model::ParamView& v : model::build_param_table(cfg))
    out.push_back({v.name, v.shape, v.offset});
  return out;
}

// Every tensor is read once here, before any rank starts, so that a tensor HfImport::read refuses
// (a NaN, an infinity) is one line and not one per rank; the ranks' own reads then come from
// the page cache.
void check_init_from(const std::string& dir, const model::GPTConfig& cfg, bool values) {
  const std::vector<ckpt::TensorInfo> table = global_tensor_table(cfg);
  const ckpt::HfImport in(dir, table, "--init-from");
  if (!values) return;
  std::vector<float> tensor;
  for (const ckpt::TensorInfo& t : ckpt::unique_views(table)) {
    tensor.resize(size_t(numel(t.shape)));
    in.read(t, tensor.data());
  }
}

std::string init_from_hf(const std::string& dir, const model::GPTConfig& cfg,
                         const TensorLayout& layout, parallel::StepEngine& engine) {
  Stopwatch clock;
  const ckpt::HfImport in(dir, global_tensor_table(cfg), "--init-from");
  std::string name;  // the tensor in `whole`
  std::vector<float> whole;
  auto global = [&](const TensorPiece& p) -> const float* {
    if (p.name != name) {
      whole.resize(size_t(numel(p.global_shape)));
      in.read({p.name, p.global_shape, 0}, whole.data());
      name = p.name;
    }
    return whole.data();
  };
  int filled = 0;
  for (const parallel::StateShard& s : engine.state_shards()) {
    if (s.name != "params") continue;  // the moments of a fresh start stay zero
    ckpt::fill_from_global({s.name, s.dtype, {s.begin, s.end}, s.data, {}}, layout, global);
    name.clear();  // a region's layout may revisit a tensor another region read last
    ++filled;
  }
  STRATA_CHECK(filled > 0, "--init-from: the engine holds no parameter state to fill");
  engine.state_loaded(0);
  const ckpt::HfModel& m = in.model();
  return cat("initialised from ", dir, ": Hugging Face ",
             m.arch == "llama" ? "LlamaForCausalLM" : "GPT2LMHeadModel", ", ", in.tensors(),
             " tensors (", in.dtypes(), "), ", fmt("%.2f", clock.seconds()), " s");
}

}  // namespace strata::train
