#include "cli/flags/model.h"

#include "ckpt/hf.h"
#include "cli/command.h"
#include "core/error.h"
#include "model/gpt.h"
#include "model/presets.h"
#include "train/init_from.h"

namespace strata::cli {
namespace {

constexpr int kMaxVocab = 1 << 24;

// An architecture override, when the flag was given: positive, else one line naming it.
void override_size(const CLI::App& app, const char* flag, int value, int& field) {
  if (app.count(flag) == 0) return;
  STRATA_CHECK(value > 0, flag, " must be positive (got ", value, ")");
  field = value;
}

const char* const kLlamaFlags[] = {"--kv-heads", "--ffn", "--norm-eps", "--rope-theta", "--rope-scaling",
                                   "--tie-embeddings", "--no-tie-embeddings"};

}  // namespace

void ModelFlags::add_to(CLI::App& app, const Only& only) {
  FamilyScope family(app, "Model", "model", only);
  app.add_option("--model", model, "Preset: " + model::model_preset_list() +
                                       " (strata train refuses one that does not fit the machine)")
      ->capture_default_str();
  app.add_option("--layers", layers, "Transformer blocks (overrides the preset)");
  app.add_option("--dim", dim, "Model width (overrides the preset)");
  app.add_option("--heads", heads, "Attention heads; must divide --dim");
  app.add_option("--max-seq", max_seq, "Maximum sequence length (position table rows)");
  // --arch llama [--kv-heads N --ffn F --norm-eps E --rope-theta T --tie-embeddings]: Llama
  // blocks (model/model_part.h Arch) from any preset's sizes; a Llama preset has them already.
  app.add_option("--arch", arch, "Block architecture: gpt2 or llama (default: the preset's)");
  app.add_option("--kv-heads", kv_heads,
                 "Llama: key/value heads (grouped-query attention; 1: multi-query; must divide "
                 "--heads)");
  app.add_option("--ffn", ffn, "Llama: MLP width (default 8 x dim / 3 rounded up to 256)");
  app.add_option("--norm-eps", norm_eps, "Llama: RMSNorm epsilon (default 1e-5)")
      ->check(finite(NumberRange::positive()));
  app.add_option("--rope-theta", rope_theta, "Llama: rotary embedding base (default 10000)")
      ->check(finite(NumberRange::positive()));
  app.add_option("--rope-scaling", rope_scaling,
                 "Llama: Llama 3.1's rope_scaling (llama3): none, FACTOR or "
                 "FACTOR,LOW,HIGH,ORIGINAL (e.g. 32,1,4,8192); default: the preset's");
  auto* tie_flag = app.add_flag("--tie-embeddings", tie, "Llama: the output layer is the embedding");
  app.add_flag("--no-tie-embeddings", untie, "Llama: an output layer of its own (lm_head)")->excludes(tie_flag);
  app.add_option("--init-from", init_from,
                 "Start from a Hugging Face model directory (GPT2LMHeadModel or LlamaForCausalLM: "
                 "config.json and model.safetensors or its shards); the model's shape comes from "
                 "its config.json")
      ->check(dir_path());
  app.add_option("--vocab", vocab, "Vocabulary size (padded to a multiple of 64)");
  // --experts E --top-k K [--moe-every N] [--capacity-factor F | --dropless] ... (docs/moe.md)
  app.add_option("--experts", moe.experts, "Mixture of Experts: E expert MLPs per MoE block (0: dense)")
      ->capture_default_str();
  app.add_option("--top-k", moe.top_k, "Experts per token (gates renormalised over the k)")->capture_default_str();
  app.add_option("--moe-every", moe.every, "Every N-th block is an MoE block")->capture_default_str();
  auto* cf = app.add_option("--capacity-factor", moe.capacity_factor,
                            "Slots per expert = ceil(F x tokens x K / E) per micro-batch")
                 ->capture_default_str()
                 ->check(finite(NumberRange::positive()));
  app.add_flag("--dropless", moe.dropless, "No capacity limit: every token reaches its experts")->excludes(cf);
  app.add_option("--aux-loss-coef", moe.aux_coef, "Load-balancing loss coefficient")->capture_default_str();
  app.add_option("--z-loss-coef", moe.z_coef, "Router z-loss coefficient")->capture_default_str();
  app.add_option("--router-jitter", moe.jitter, "Router input noise U(1-j, 1+j) in training")
      ->capture_default_str();
  app.add_option("--router-bias-update-rate", moe.bias_rate,
                 "Balancing without an auxiliary loss (DeepSeek-V3): a per-expert bias on the top-k choice, moved "
                 "by this much toward the mean load after every step (0: off; with --aux-loss-coef 0)")
      ->capture_default_str();
  // DeepSeekMoE / DeepSeek-V3 (model/expert/config.h): fine-grained and shared experts, sigmoid
  // scores, the balance loss per sequence, routing limited to M of G expert groups.
  app.add_option("--expert-ffn", moe.expert_ffn,
                 "Each routed expert's hidden width (fine-grained experts; default: the dense MLP's)");
  app.add_option("--shared-experts", moe.shared_experts,
                 "Always-on experts of --expert-ffn units beside the routed ones, computed where the token is")
      ->capture_default_str();
  app.add_option("--router-score", router_score,
                 "softmax, or sigmoid (DeepSeek-V3: gates are the chosen scores normalised over the k)")
      ->capture_default_str()
      ->check(CLI::IsMember({"softmax", "sigmoid"}));
  app.add_option("--aux-loss-scope", aux_scope,
                 "The balance loss's fractions per micro-batch (group: Switch) or per sequence (DeepSeek-V3)")
      ->capture_default_str()
      ->check(CLI::IsMember({"group", "sequence"}));
  app.add_option("--route-groups", moe.route_groups,
                 "Node-limited routing: the experts in G equal groups (one per host of the ep ranks)");
  app.add_option("--route-max-groups", moe.route_max_groups,
                 "Node-limited routing: each token chooses its top-k within its M best groups");
}

void ModelFlags::apply_arch(const CLI::App& app, model::GPTConfig& m) const {
  if (app.count("--arch")) {
    const model::Arch a = model::parse_arch(arch);
    // Llama blocks are built from any preset's sizes, but a Llama preset's grouped heads, MLP
    // width and untied output have no GPT-2 form: say so by the flags typed, not by a field.
    STRATA_CHECK(a == model::Arch::llama || !m.llama(), "--arch ", arch, " conflicts with --model ", model,
                 ", a llama model (grouped key/value heads, its own MLP width and output layer); use a gpt2 "
                 "preset (tiny, small, gpt2) or drop --arch");
    if (a == model::Arch::llama && !m.llama()) m.tie_embeddings = false;  // Llama's default
    m.arch = a;
  }
  const bool llama = m.llama();
  for (const char* flag : kLlamaFlags)
    STRATA_CHECK(llama || app.count(flag) == 0, flag, " needs Llama blocks (--arch llama or a "
                 "llama preset)");
  override_size(app, "--kv-heads", kv_heads, m.kv_heads);
  override_size(app, "--ffn", ffn, m.ffn);
  if (app.count("--norm-eps")) m.norm_eps = norm_eps;
  if (app.count("--rope-theta")) m.rope_theta = rope_theta;
  if (app.count("--rope-scaling")) model::parse_rope_scaling(rope_scaling, m);
  if (tie) m.tie_embeddings = true;
  if (untie) m.tie_embeddings = false;
  // A preset's heads changed without --kv-heads: multi-head unless the preset's grouping fits.
  if (llama && app.count("--heads") && !app.count("--kv-heads") && m.heads % m.kv() != 0) m.kv_heads = 0;
}

// --init-from DIR: the model is the one DIR/config.json describes (train/init_from.h). A shape
// flag may repeat a value of it, never contradict it; --max-seq may shorten a Llama's context
// (RoPE has no table to match), not GPT-2's (wpe's rows are in the file).
model::GPTConfig ModelFlags::from_hf(const CLI::App& app) const {
  const ckpt::HfModel hf = ckpt::read_hf_config(init_from, "--init-from");
  model::GPTConfig m = train::hf_model_config(hf);
  const std::string src = init_from + "/config.json";
  const bool llama = m.llama();
  STRATA_CHECK(!app.count("--model"), "--model ", model,
               ": with --init-from the model is the one ", src, " describes; drop --model");
  auto same = [&](const char* flag, double given, double theirs, const char* llama_key, const char* gpt2_key) {
    if (!app.count(flag)) return;
    STRATA_CHECK(float(given) == float(theirs), flag, " ", given, " contradicts ", src, "'s ",
                 llama ? llama_key : gpt2_key, " ", theirs);
  };
  if (app.count("--arch"))
    STRATA_CHECK(model::parse_arch(arch) == m.arch, "--arch ", arch, " contradicts ", src, "'s model_type ",
                 hf.arch);
  same("--layers", layers, m.layers, "num_hidden_layers", "n_layer");
  same("--dim", dim, m.dim, "hidden_size", "n_embd");
  same("--heads", heads, m.heads, "num_attention_heads", "n_head");
  same("--vocab", vocab, m.vocab, "vocab_size", "vocab_size");
  for (const char* flag : kLlamaFlags)
    STRATA_CHECK(llama || app.count(flag) == 0, flag, " needs Llama blocks; ", src, " is a GPT-2");
  same("--kv-heads", kv_heads, m.kv(), "num_key_value_heads", nullptr);
  same("--ffn", ffn, m.hidden(), "intermediate_size", nullptr);
  same("--norm-eps", norm_eps, m.norm_eps, "rms_norm_eps", nullptr);
  same("--rope-theta", rope_theta, m.rope_theta, "rope_theta", nullptr);
  if (app.count("--rope-scaling")) {
    model::GPTConfig given = m;
    model::parse_rope_scaling(rope_scaling, given);
    STRATA_CHECK(given.arch_json()["rope_scaling"] == m.arch_json()["rope_scaling"], "--rope-scaling ",
                 rope_scaling, " contradicts ", src, "'s rope_scaling ", m.arch_json()["rope_scaling"].dump());
  }
  if (tie || untie)
    STRATA_CHECK(tie == m.tie_embeddings, tie ? "--tie-embeddings" : "--no-tie-embeddings", " contradicts ", src,
                 "'s tie_word_embeddings ", m.tie_embeddings ? "true" : "false");
  if (app.count("--max-seq")) {
    if (!llama) same("--max-seq", max_seq, m.seq, nullptr, "n_positions");
    STRATA_CHECK(max_seq > 0 && max_seq <= m.seq, "--max-seq ", max_seq, " must be in [1, ", m.seq, "], ", src,
                 "'s max_position_embeddings");
    m.seq = max_seq;
  }
  return m;
}

ModelFlags::Resolved ModelFlags::resolve(const CLI::App& app) const {
  Resolved r;
  r.name = model;
  model::GPTConfig& m = r.config;
  if (app.count("--init-from")) {
    m = from_hf(app);
    r.name = cat(m.llama() ? "llama" : "gpt2", " from ", init_from);
  } else {
    m = model::GPTConfig::preset(model);
    override_size(app, "--layers", layers, m.layers);
    override_size(app, "--dim", dim, m.dim);
    override_size(app, "--heads", heads, m.heads);
    override_size(app, "--max-seq", max_seq, m.seq);
    apply_arch(app, m);
    if (app.count("--vocab")) {
      override_size(app, "--vocab", vocab, m.vocab);
      // Padding to 64 would overflow an int near 2^31; real vocabularies stay below 2^18.
      STRATA_CHECK(vocab <= kMaxVocab, "--vocab must be in [1, ", kMaxVocab, "] (got ", vocab, ")");
      m.padded_vocab = int(model::padded_vocab(m.vocab));
    }
  }
  // A preset's experts (Mixtral) unless the flags say otherwise.
  model::expert::MoEConfig experts = moe;
  STRATA_CHECK(!app.count("--expert-ffn") || moe.expert_ffn > 0, "--expert-ffn must be positive (got ",
               moe.expert_ffn, ")");
  if (!app.count("--experts")) experts.experts = m.moe.experts;
  if (!app.count("--top-k") && m.moe.enabled()) experts.top_k = m.moe.top_k;
  experts.score = router_score == "sigmoid" ? model::expert::RouterScore::sigmoid : model::expert::RouterScore::softmax;
  experts.aux_scope = aux_scope == "sequence" ? model::expert::AuxScope::sequence : model::expert::AuxScope::group;
  m.moe = experts;
  return r;
}

}  // namespace strata::cli
