// Rendering of a plan: JSON for scripts (keys documented in docs/planner.md) and a table for
// people.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <sstream>

#include "core/error.h"
#include "cost/flops.h"
#include "nlohmann/json.hpp"
#include "plan/planner.h"

namespace strata::plan {

namespace {

using json = nlohmann::json;

const char* precision_name(Precision p) { return p == Precision::bf16 ? "bf16" : "fp32"; }
const char* optimizer_name(Optimizer o) {
  return o == Optimizer::adamw ? "adamw" : o == Optimizer::sgd ? "sgd" : "muon";
}

json states_json(const ModelStateBytes& b) {
  return {{"parameters", b.parameters},
          {"gradients", b.gradients},
          {"optimizer", b.optimizer},
          {"total", b.total()}};
}

json layout_json(const Layout& l) {
  return {{"tp", l.tp},
          {"pp", l.pp},
          {"dp", l.dp},
          {"cp", l.cp},
          {"ep", l.ep},
          {"zero", l.zero},
          {"micro_batch", l.micro_batch},
          {"recompute", recompute_name(l.recompute)}};
}

std::string f(const char* fmt, double x) {
  char b[64];
  std::snprintf(b, sizeof b, fmt, x);
  return b;
}

std::string gib(double bytes) { return f("%.2f", bytes / (1024.0 * 1024 * 1024)); }

std::string human(double x) {  // 6.74e9 -> "6.74B"
  const char* units[] = {"", "K", "M", "B", "T"};
  int u = 0;
  while (x >= 1000 && u < 4) x /= 1000, ++u;
  return f(x >= 100 ? "%.0f" : x >= 10 ? "%.1f" : "%.2f", x) + units[u];
}

std::string bytes_h(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (b >= 1024 && u < 5) b /= 1024, ++u;
  return f(b >= 100 ? "%.0f " : "%.1f ", b) + units[u];
}

bool megatron_applies(const ModelSpec& m) {
  return !m.moe() && m.kv_heads == m.heads && m.mlp == MlpKind::gelu &&
         m.ffn == cost::default_ffn(false, m.hidden);
}

}  // namespace

json estimate_to_json(const Estimate& e) {
  json comm = json::array();
  for (const CommItem& c : e.comm)
    comm.push_back({{"dim", c.dim},
                    {"what", c.what},
                    {"collective", collective_name(c.op)},
                    {"group", c.group},
                    {"link", c.inter_node ? "inter-node" : "intra-node"},
                    {"bytes_per_call", c.bytes_per_call},
                    {"calls_per_step", c.calls_per_step},
                    {"time_s", c.time_s},
                    {"exposed_s", c.exposed_s}});
  const TimeBreakdown& t = e.time;
  return {{"layout", layout_json(e.layout)},
          {"micro_batches", e.micro_batches},
          {"fits", e.fits},
          {"memory",
           {{"stage", e.mem.stage},
            {"in_flight_micro_batches", e.mem.in_flight},
            {"dense_params", e.mem.dense_params},
            {"expert_params", e.mem.expert_params},
            {"muon_params", e.mem.muon_params},
            {"ns_flops_per_step", e.mem.ns_flops},
            {"model_states", states_json(e.mem.states)},
            {"activations", e.mem.activations},
            {"activations_model", e.mem.engine_activations ? "strata" : "korthikanti"},
            {"comm_buffers", e.mem.comm_buffers},
            {"total", e.mem.total()},
            {"usable", e.usable_bytes}}},
          {"communication", comm},
          {"time",
           {{"step_s", t.step_s},
            {"micro_batch_s", t.t_micro},
            {"compute_s", t.compute},
            {"recompute_s", t.recompute},
            {"bubble_s", t.bubble},
            {"tp_s", t.tp},
            {"cp_s", t.cp},
            {"ep_s", t.ep},
            {"pp_s", t.pp},
            {"zero_micro_s", t.zero_micro},
            {"dp_exposed_s", t.dp_final},
            {"optimizer_s", t.optimizer}}},
          {"bubble_fraction", e.bubble_fraction()},
          {"pipeline",
           {{"bubble_planned", e.pipeline_bubble},
            {"bubble_no_transfer", e.pipeline_bubble_ideal},
            {"bubble_formula", e.pipeline_formula},
            {"transfer_s", e.pp_transfer_s}}},
          {"model_flops_per_step", e.model_flops_per_step},
          {"hardware_flops_per_step", e.hardware_flops_per_step},
          {"tokens_per_s", e.tokens_per_s},
          {"mfu", e.mfu}};
}

json plan_to_json(const PlanRequest& req, const PlanResult& res) {
  const TrainSetup& s = req.setup;
  const ModelSpec& m = s.model;
  const ParamCounts pc = count_params(m);
  const StateBytesPerParam per = s.state_bytes();
  json j;
  j["model"] = {
      {"name", m.name},
      {"layers", m.layers},
      {"hidden", m.hidden},
      {"heads", m.heads},
      {"kv_heads", m.kv_heads},
      {"ffn", m.ffn},
      {"seq", m.seq},
      {"vocab", m.vocab},
      {"padded_vocab", m.padded_vocab()},
      {"experts", m.experts},
      {"top_k", m.top_k},
      {"expert_ffn", m.moe() ? m.expert_width() : 0},
      {"shared_experts", m.shared_experts},
      {"route_groups", m.route_groups},
      {"route_max_groups", m.route_max_groups},
      {"mlp", m.mlp == MlpKind::swiglu ? "swiglu" : "gelu"},
      {"params", pc.total()},
      {"active_params", pc.active()},
      {"routed_expert_params", pc.expert_total()},
      {"shared_expert_params", pc.shared_total()},
      {"megatron_param_formula", megatron_param_count(double(m.layers), double(m.hidden),
                                                      double(m.padded_vocab()), double(m.seq))},
      {"source", m.source}};
  j["hardware"] = gpu_to_json(s.gpu);
  j["cluster"] = {{"gpus", s.gpus},
                  {"gpus_per_node", s.gpu.gpus_per_node},
                  {"global_batch", s.global_batch},
                  {"tokens_per_step", double(s.global_batch) * double(m.seq)},
                  {"precision", precision_name(s.precision)},
                  {"grad_precision", per.gradient == 4 ? "fp32" : "bf16"},
                  {"optimizer", optimizer_name(s.optimizer)},
                  {"bytes_per_param",
                   {{"parameter", per.parameter},
                    {"gradient", per.gradient},
                    {"optimizer", per.optimizer},
                    {"total", per.total()}}},
                  {"sequence_parallel", s.seq_parallel},
                  {"cp_mode", s.cp_mode == CpMode::ring ? "ring" : "ulysses"},
                  {"headroom", s.headroom},
                  {"overlap", s.overlap}};
  if (res.rlhf) {
    json models = json::array();
    for (const RlhfModelMemory& r : res.rlhf->models)
      models.push_back({{"role", r.role},
                        {"params", r.params},
                        {"trained", r.trained},
                        {"states", states_json(r.states)}});
    const RlhfEstimate& e = *res.rlhf;
    j["rlhf"] = {{"algo", rl_algo_name(req.rlhf->algo)},
                 {"models", models},
                 {"kv_cache", res.rlhf->kv_cache},
                 {"activations", res.rlhf->activations},
                 {"total", res.rlhf->total()},
                 {"usable", res.rlhf->usable},
                 {"fits", res.rlhf->fits()},
                 {"tp", req.rlhf->tp},
                 {"zero", req.rlhf->zero},
                 {"rollout_batch", req.rlhf->rollout_batch},
                 {"prompt_len", req.rlhf->prompt_len},
                 {"response_len", req.rlhf->response_len},
                 {"epochs", req.rlhf->epochs},
                 {"time_split",
                  {{"generate_s", e.generate_s},
                   {"score_s", e.score_s},
                   {"train_s", e.train_s},
                   {"generate", e.share(e.generate_s)},
                   {"score", e.share(e.score_s)},
                   {"train", e.share(e.train_s)}}},
                 {"smallest_cluster_gpus", res.rlhf->fits() || !res.rlhf_smallest_cluster
                                               ? json(nullptr)
                                               : json(res.rlhf_smallest_cluster)}};
    j["notes"] = req.notes;
    return j;
  }
  const SearchResult& sr = res.search;
  j["search"] = {{"considered", sr.considered},
                 {"fit", sr.fit},
                 {"too_big", sr.too_big},
                 {"invalid", sr.invalid},
                 {"sample_problem", sr.sample_problem}};
  j["best"] = res.fits() ? estimate_to_json(sr.ranked[0]) : json(nullptr);
  json ranking = json::array();
  for (size_t i = 0; i < sr.ranked.size() && int(i) < req.top; ++i) {
    const Estimate& e = sr.ranked[i];
    ranking.push_back({{"layout", layout_json(e.layout)},
                       {"step_s", e.time.step_s},
                       {"mfu", e.mfu},
                       {"memory_bytes", e.mem.total()},
                       {"bubble_fraction", e.bubble_fraction()}});
  }
  j["ranking"] = ranking;
  j["explanation"] = res.explanation;
  if (!res.fits()) {
    json fn = {
        {"least_memory", sr.least_memory ? estimate_to_json(*sr.least_memory) : json(nullptr)}};
    const ClusterFit* c = res.smallest_cluster ? &*res.smallest_cluster : nullptr;
    fn["smallest_cluster_gpus"] = c && c->found ? json(c->gpus) : json(nullptr);
    if (c && c->found) {
      fn["smallest_cluster_layout"] = layout_json(c->layout);
      fn["smallest_cluster_memory_bytes"] = c->bytes;
      fn["scan_step_gpus"] = c->step_gpus;
    }
    j["fits_nowhere"] = fn;
  }
  json compute;
  compute["model_flops_per_token"] = model_flops_per_token(m);
  if (megatron_applies(m))
    compute["megatron_flops_per_step_full_recompute"] =
        megatron_flops_per_iteration(double(s.global_batch), double(m.seq), double(m.layers),
                                     double(m.hidden), double(m.padded_vocab()), true);
  compute["train_tokens"] = req.train_tokens;
  if (res.fits() && req.train_tokens > 0) {
    const Estimate& b = sr.ranked[0];
    const double days = req.train_tokens / b.tokens_per_s / 86400;
    compute["days_to_train"] = days;
    compute["days_to_train_with_failures"] = days / (1 - res.checkpoint.overhead_fraction);
  }
  j["compute"] = compute;
  const CheckpointPlan& ck = res.checkpoint;
  j["reliability"] = {{"checkpoint_bytes", res.checkpoint_bytes},
                      {"storage_gbps", req.storage_gbps},
                      {"write_s", ck.write_s},
                      {"stall_s", ck.stall_s},
                      {"job_mtbf_s", ck.job_mtbf_s},
                      {"young_interval_s", ck.young_s},
                      {"daly_interval_s", ck.daly_s},
                      {"failures_per_day", ck.failures_per_day},
                      {"overhead_fraction", ck.overhead_fraction},
                      {"gpu_hours_lost_per_day", ck.gpu_hours_lost_per_day},
                      {"restart_s", req.restart_minutes * 60},
                      {"lost_per_failure_s",
                       {{"disk", ck.disk_lost_per_failure_s},
                        {"memory", ck.step_s > 0 ? json(ck.memory_lost_per_failure_s) : json(nullptr)}}},
                      {"memory_ckpt_every", ck.mem_every},
                      {"step_s", ck.step_s}};
  if (res.outer) {
    const OuterEstimate& x = *res.outer;
    j["outer"] = {{"groups", x.groups},
                  {"inner_steps", x.inner_steps},
                  {"min_inner_steps", x.min_inner_steps},
                  {"link_share", req.outer.link_share},
                  {"fragments", req.outer.fragments},
                  {"overlap", req.outer.overlap},
                  {"dtype", parallel::outer_dtype_name(req.outer.dtype)},
                  {"group_layout", layout_json(x.group.layout)},
                  {"inter_node", x.inter_node},
                  {"sync_bytes_per_gpu", x.sync_bytes},
                  {"sync_s", x.sync_s},
                  {"bytes_per_step_per_gpu", x.bytes_per_step},
                  {"ddp_bytes_per_step_per_gpu", x.ddp_bytes_per_step},
                  {"ddp_inter_node_share", x.ddp_inter_share},
                  {"exposed_per_step_s", x.exposed_per_step_s},
                  {"step_s", x.step_s},
                  {"group_step_s", x.group.time.step_s},
                  {"tokens_per_s", x.tokens_per_s},
                  {"ddp_step_s", x.ddp.time.step_s},
                  {"ddp_tokens_per_s", x.ddp.tokens_per_s},
                  {"state_bytes_per_gpu", x.state_bytes},
                  {"memory_bytes", x.group.mem.total() + double(x.state_bytes)},
                  {"fits", x.fits},
                  {"recommended", x.recommended}};
  } else if (req.outer.asked) {
    j["outer"] = {{"problem", res.outer_problem}};
  }
  j["notes"] = req.notes;
  return j;
}

namespace {

void memory_table(std::ostream& o, const Estimate& e, const ModelSpec& model) {
  const MemoryEstimate& m = e.mem;
  o << "Memory per GPU (" << m.stage << " pipeline stage, " << m.in_flight
    << " micro-batch(es) of activations in flight)\n";
  auto row = [&](const char* name, double bytes, const std::string& note) {
    char b[200];
    std::snprintf(b, sizeof b, "  %-18s %10s GiB  %s\n", name, gib(bytes).c_str(), note.c_str());
    o << b;
  };
  row("parameters", double(m.states.parameters), "");
  row("gradients", double(m.states.gradients), "");
  row("optimizer states", double(m.states.optimizer),
      m.expert_params > 0
          ? cat("(", human(double(m.dense_params)), " dense",
                model.shared_experts > 0 ? " (shared experts included)" : "", " + ",
                human(double(m.expert_params)), " routed expert params on this GPU before ZeRO)")
          : cat("(", human(double(m.dense_params)), " params on this GPU before ZeRO)") +
                (m.muon_params > 0 ? cat("; Muon's matrices ", human(double(m.muon_params)), ", one momentum each")
                                   : std::string()));
  row("activations", m.activations,
      m.engine_activations
          ? "(strata's buffers, as `strata train` allocates them)"
          : cat("(Korthikanti et al.'s per-layer terms: ", korthikanti_reason(model, e.layout),
                ")"));
  row("comm buffers", m.comm_buffers, "");
  row("total", m.total(),
      cat("of ", gib(e.usable_bytes), " GiB usable", e.fits ? "" : ": DOES NOT FIT"));
}

void comm_table(std::ostream& o, const Estimate& e) {
  if (e.comm.empty()) {
    o << "Communication per step: none (one GPU)\n";
    return;
  }
  o << "Communication per step (time if nothing overlapped; exposed = on the critical path)\n";
  char b[256];
  std::snprintf(b, sizeof b, "  %-9s %-14s %5s %-6s %11s %9s %9s %9s  %s\n", "dim", "collective",
                "group", "link", "bytes/call", "calls", "time s", "exposed", "what");
  o << b;
  for (const CommItem& c : e.comm) {
    std::snprintf(b, sizeof b, "  %-9s %-14s %5d %-6s %11s %9.0f %9.4f %9.4f  %s\n", c.dim.c_str(),
                  collective_name(c.op), c.group, c.inter_node ? "net" : "nvlink",
                  bytes_h(c.bytes_per_call).c_str(), c.calls_per_step, c.time_s, c.exposed_s,
                  c.what.c_str());
    o << b;
  }
}

void ranking_table(std::ostream& o, const PlanRequest& req, const SearchResult& sr) {
  char b[256];
  std::snprintf(b, sizeof b, "  %3s %3s %3s %5s %3s %3s %4s %3s %-9s %9s %9s %7s %7s\n", "#", "tp",
                "pp", "dp", "cp", "ep", "zero", "mb", "recompute", "mem GiB", "step s", "MFU",
                "bubble");
  o << b;
  for (size_t i = 0; i < sr.ranked.size() && int(i) < req.top; ++i) {
    const Estimate& e = sr.ranked[i];
    const Layout& l = e.layout;
    std::snprintf(b, sizeof b, "  %3zu %3d %3d %5d %3d %3d %4d %3d %-9s %9s %9.3f %6.1f%% %7.3f\n",
                  i + 1, l.tp, l.pp, l.dp, l.cp, l.ep, l.zero, l.micro_batch,
                  recompute_name(l.recompute), gib(e.mem.total()).c_str(), e.time.step_s,
                  100 * e.mfu, e.bubble_fraction());
    o << b;
  }
}

void rlhf_section(std::ostream& o, const PlanRequest& req, const PlanResult& res) {
  const RlhfEstimate& r = *res.rlhf;
  const RlhfSetup& s = *req.rlhf;
  const bool dpo = s.algo == RlAlgo::dpo;
  std::string algo = rl_algo_name(s.algo);
  std::transform(algo.begin(), algo.end(), algo.begin(), [](unsigned char c) { return std::toupper(c); });
  o << "\nRLHF (" << algo << ") memory per GPU: tp " << s.tp << ", ZeRO-" << s.zero << " over "
    << req.setup.gpus / s.tp << " data ranks, " << (dpo ? "batch " : "rollout batch ")
    << s.rollout_batch << (dpo ? " preference pairs" : "") << " per GPU\n";
  char b[200];
  for (const RlhfModelMemory& m : r.models) {
    std::snprintf(b, sizeof b, "  %-10s %8s params  %-9s %10s GiB\n", m.role.c_str(),
                  human(double(m.params)).c_str(), m.trained ? "trained" : "inference",
                  gib(double(m.states.total())).c_str());
    o << b;
  }
  std::snprintf(b, sizeof b, "  %-10s %8s %18s %10s GiB\n", "KV cache", "", "",
                gib(r.kv_cache).c_str());
  if (!dpo) o << b;  // DPO does not generate
  std::snprintf(b, sizeof b, "  %-10s %8s %18s %10s GiB\n", "activations", "", "",
                gib(r.activations).c_str());
  o << b;
  o << "  total " << gib(r.total()) << " GiB of " << gib(r.usable)
    << " GiB usable: " << (r.fits() ? "fits" : "DOES NOT FIT");
  if (!r.fits())
    o << (res.rlhf_smallest_cluster
              ? cat("; smallest cluster that fits: ", res.rlhf_smallest_cluster, " GPUs")
              : std::string("; no cluster up to 2^20 GPUs fits"));
  o << "\n";
  o << "Time per iteration per GPU (first-order: FLOPs at " << f("%.2f", s.gpu.efficiency)
    << " of peak, decode at HBM bandwidth), " << s.prompt_len << " prompt + " << s.response_len
    << " response tokens, " << s.epochs << " epoch(s)\n";
  o << "  generate " << f("%.3g", r.generate_s) << " s, score " << f("%.3g", r.score_s)
    << " s, train " << f("%.3g", r.train_s) << " s = " << f("%.3g", r.iteration_s()) << " s: generate "
    << f("%.0f", 100 * r.share(r.generate_s)) << "%, score " << f("%.0f", 100 * r.share(r.score_s))
    << "%, train " << f("%.0f", 100 * r.share(r.train_s)) << "%\n";
}

// Replica groups (plan/outer.h): asked for, or recommended.
void outer_section(std::ostream& o, const PlanRequest& req, const PlanResult& res) {
  if (!res.outer) {
    if (req.outer.asked) o << "\nReplica groups (DiLoCo): not planned: " << res.outer_problem << "\n";
    return;
  }
  const OuterEstimate& x = *res.outer;
  const OuterRequest& q = req.outer;
  o << "\nReplica groups (DiLoCo)" << (q.asked ? "" : ", recommended: inter-node data-parallel traffic is ")
    << (q.asked ? "" : f("%.0f%% of the best layout's step", 100 * x.ddp_inter_share)) << "\n";
  o << "  " << x.groups << " groups of " << x.group.layout.gpus() << " GPUs (" << x.group.layout.str()
    << "), each " << req.setup.global_batch / x.groups << " sequences per step, meeting every " << x.inner_steps
    << " steps" << (q.fragments > 1 ? cat(" in ", q.fragments, " fragments") : "")
    << (q.overlap > 0 ? cat(", ", q.overlap, " step(s) of overlap") : "") << ", "
    << parallel::outer_dtype_name(q.dtype) << (x.inter_node ? " across nodes" : " inside a node") << "\n";
  o << "  per GPU: " << bytes_h(x.sync_bytes) << " per sync (" << f("%.3g", x.sync_s) << " s), "
    << bytes_h(x.bytes_per_step) << " per step vs " << bytes_h(x.ddp_bytes_per_step)
    << " of data-parallel gradients per step in the best layout ("
    << (x.bytes_per_step > 0 ? cat("1/", f("%.0f", x.ddp_bytes_per_step / x.bytes_per_step)) : std::string("-"))
    << ")\n";
  o << "  step " << f("%.3f", x.step_s) << " s (" << f("%.3f", x.exposed_per_step_s) << " s of it the exchange), "
    << human(x.tokens_per_s) << " tokens/s vs " << f("%.3f", x.ddp.time.step_s) << " s and "
    << human(x.ddp.tokens_per_s) << " tokens/s: " << f("%.2f", x.tokens_per_s / x.ddp.tokens_per_s) << "x\n";
  o << "  the exchange stays within " << f("%.0f", 100 * q.link_share) << "% of the training time from --inner-steps "
    << x.min_inner_steps << "\n";
  o << "  memory: + " << gib(double(x.state_bytes)) << " GiB per GPU of outer state (global parameters and "
    << "momentum, fp32" << (q.overlap > 0 ? ", what was sent" : "")
    << (q.error_feedback && q.dtype != parallel::OuterDType::fp32 ? ", the residual" : "") << "): " << gib(x.group.mem.total() + double(x.state_bytes))
    << " GiB of " << gib(x.group.usable_bytes) << " (" << (x.fits ? "fits" : "DOES NOT FIT") << ")\n";
}

}  // namespace

std::string plan_to_text(const PlanRequest& req, const PlanResult& res) {
  const TrainSetup& s = req.setup;
  const ModelSpec& m = s.model;
  const ParamCounts pc = count_params(m);
  const StateBytesPerParam per = s.state_bytes();
  std::ostringstream o;
  o << "strata plan: " << m.name << " on " << s.gpus << " x " << s.gpu.name << " ("
    << s.gpu.gpus_per_node << " per node)\n\n";
  o << "Model     " << human(double(pc.total())) << " parameters";
  if (m.moe()) {
    o << " (" << human(double(pc.active())) << " active per token; " << m.experts
      << " experts of ffn " << m.expert_width() << ", top-" << m.top_k;
    if (m.shared_experts > 0) o << ", " << m.shared_experts << " shared";
    if (m.limits_groups()) o << " within " << m.route_max_groups << " of " << m.route_groups << " groups";
    o << ": routed " << human(double(pc.expert_total()));
    if (m.shared_experts > 0) o << ", shared " << human(double(pc.shared_total()));
    o << ")";
  }
  o << "; " << m.layers << " layers, hidden " << m.hidden << ", " << m.heads << " heads ("
    << m.kv_heads << " KV), ffn " << m.ffn << (m.mlp == MlpKind::swiglu ? " SwiGLU" : " GELU")
    << ", seq " << m.seq << ", vocab " << m.vocab << "\n";
  o << "Hardware  " << s.gpu.name << ": " << f("%.1f", s.gpu.memory_gib) << " GiB, "
    << f("%.3g", s.gpu.peak_tflops) << " TFLOP/s bf16 (x" << f("%.2f", s.gpu.efficiency)
    << " sustained), intra-node " << f("%.3g", s.gpu.intra.gbps) << " GB/s (alpha "
    << f("%.1f", s.gpu.intra.alpha_us) << " us), inter-node " << f("%.3g", s.gpu.inter.gbps)
    << " GB/s (alpha " << f("%.1f", s.gpu.inter.alpha_us) << " us)\n";
  o << "Training  ";
  if (!res.rlhf)
    o << "global batch " << s.global_batch << " x " << m.seq << " = "
      << human(double(s.global_batch) * double(m.seq)) << " tokens/step; ";
  o << precision_name(s.precision) << " (grads " << (per.gradient == 4 ? "fp32" : "bf16") << "), "
    << optimizer_name(s.optimizer) << ": " << per.parameter << " + " << per.gradient << " + "
    << per.optimizer << " = " << per.total() << " B/param"
    << (s.optimizer == Optimizer::muon ? "; the blocks' matrices 4 fewer (one momentum, not two)" : "") << "\n";
  for (const std::string& n : req.notes) o << "Note      " << n << "\n";
  if (res.rlhf) {
    rlhf_section(o, req, res);
    return o.str();
  }
  const SearchResult& sr = res.search;
  o << "\nLayouts: " << sr.considered << " considered, " << sr.fit << " fit, " << sr.too_big
    << " too big, " << sr.invalid << " invalid\n";
  if (res.fits()) {
    ranking_table(o, req, sr);
    const Estimate& b = sr.ranked[0];
    o << "\nBest layout: " << b.layout.str() << " (" << b.micro_batches << " micro-batches)\n";
    if (b.layout.pp > 1)
      o << "Pipeline  " << parallel::pipeline::schedule_name(s.schedule)
        << (s.virtual_stages > 1 ? cat(" x ", s.virtual_stages, " chunks") : "") << ", pp "
        << b.layout.pp << ", " << b.micro_batches << " micro-batches: bubble "
        << f("%.3f", b.pipeline_bubble) << " of the schedule (" << f("%.3f", b.pipeline_bubble_ideal)
        << " without transfers; formula " << f("%.3f", b.pipeline_formula) << "), "
        << f("%.3g", b.pp_transfer_s * 1e3) << " ms per stage-to-stage message\n";
    memory_table(o, b, s.model);
    o << "\n";
    comm_table(o, b);
    o << "\nCompute\n";
    o << "  model FLOPs/step (6N + 12*L*h*s per token)   " << f("%.3e", b.model_flops_per_step)
      << "\n";
    o << "  hardware FLOPs/step (with recomputation)    " << f("%.3e", b.hardware_flops_per_step)
      << "\n";
    if (megatron_applies(m))
      o << "  Megatron 96*B*s*l*h^2*(1+s/6h+V/16lh)       "
        << f("%.3e",
             megatron_flops_per_iteration(double(s.global_batch), double(m.seq), double(m.layers),
                                          double(m.hidden), double(m.padded_vocab()), true))
        << " (full recomputation)\n";
    o << "  step " << f("%.3f", b.time.step_s) << " s, " << human(b.tokens_per_s)
      << " tokens/s, MFU " << f("%.1f", 100 * b.mfu) << "%\n";
    if (req.train_tokens > 0) {
      const double days = req.train_tokens / b.tokens_per_s / 86400;
      o << "  " << human(req.train_tokens) << " tokens: " << f("%.1f", days) << " days ("
        << f("%.1f", days / (1 - res.checkpoint.overhead_fraction))
        << " with checkpoints and failures)\n";
    }
    o << "\nWhy this layout\n";
    for (const std::string& line : res.explanation) o << "  - " << line << "\n";
  } else {
    o << "\nNo layout fits in " << gib(s.gpu.memory_bytes() * (1 - s.headroom)) << " GiB per GPU";
    if (sr.least_memory)
      o << ": the leanest valid layout (" << sr.least_memory->layout.str() << ") needs "
        << gib(sr.least_memory->mem.total()) << " GiB\n";
    else
      o << " (no valid layout: " << sr.sample_problem << ")\n";
    const ClusterFit* c = res.smallest_cluster ? &*res.smallest_cluster : nullptr;
    if (c && c->found)
      o << "Smallest cluster that fits: " << c->gpus << " GPUs (" << c->layout.str() << ", "
        << gib(c->bytes) << " GiB per GPU"
        << (c->step_gpus > s.gpu.gpus_per_node
                ? cat("; scanned in steps of ", c->step_gpus, " GPUs")
                : "")
        << ")\n";
    else
      o << "No cluster up to 2^20 GPUs fits with these fixed settings and global batch.\n";
    if (sr.least_memory) {
      o << "\n";
      memory_table(o, *sr.least_memory, s.model);
    }
  }
  outer_section(o, req, res);
  const CheckpointPlan& ck = res.checkpoint;
  o << "\nReliability (" << s.gpus << " GPUs, job MTBF " << f("%.1f", ck.job_mtbf_s / 3600)
    << " h, " << f("%.2f", ck.failures_per_day) << " failures/day)\n";
  o << "  checkpoint " << bytes_h(res.checkpoint_bytes)
    << " (parameters + optimizer states), write " << f("%.1f", ck.write_s) << " s at "
    << f("%.0f", req.storage_gbps) << " GB/s; stall " << f("%.1f", ck.stall_s) << " s\n";
  o << "  interval: Young " << f("%.1f", ck.young_s / 60) << " min, Daly "
    << f("%.1f", ck.daly_s / 60) << " min\n";
  o << "  at Daly's interval " << f("%.2f", 100 * ck.overhead_fraction)
    << "% of wall time is lost to checkpoints, redone work and restarts ("
    << f("%.0f", req.restart_minutes) << " min each): " << f("%.1f", ck.gpu_hours_lost_per_day)
    << " GPU-hours per day\n";
  o << "  lost work per failure: restart from disk " << f("%.1f", ck.disk_lost_per_failure_s / 60)
    << " min (half of Daly's interval + the restart)";
  if (ck.step_s > 0)
    o << "; from in-memory copies every " << ck.mem_every << " step(s) (--mem-ckpt-every "
      << ck.mem_every << ") " << f("%.1f", ck.memory_lost_per_failure_s / 60) << " min (at most "
      << ck.mem_every << " step(s) of "
      << f("%.2f", ck.step_s) << " s + the restart): restarts and redone work "
      << f("%.2f", 100 * ck.memory_restart_fraction)
      << "% of wall time (the copies' cost and the disk saves for lost hosts not counted)";
  o << "\n";
  return o.str();
}

}  // namespace strata::plan
