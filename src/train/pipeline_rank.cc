#include "train/expert_state.h"
#include "train/pipeline_rank.h"

#include <algorithm>
#include <cstdio>
#include <memory>

#include "core/error.h"
#include "core/stats.h"
#include "core/trace.h"
#include "cost/activations.h"
#include "cost/comm.h"
#include "cost/stage_activations.h"
#include "data/dataset.h"
#include "model/context/context_comm.h"
#include "model/shard.h"
#include "model/stage.h"
#include "model/tensor/collectives.h"
#include "parallel/pipeline/engine.h"
#include "parallel/pipeline/executor.h"
#include "train/context_metrics.h"
#include "train/metrics.h"
#include "train/pipeline_costs.h"

namespace strata::train {

namespace pl = parallel::pipeline;
using nlohmann::json;

namespace {

std::vector<model::MicroInput> inputs_of(const data::StepBatch& batch) {
  std::vector<model::MicroInput> in;
  for (const data::MicroBatch& mb : batch.micro)
    in.push_back({mb.tokens.data(), mb.targets.data(),
                  mb.weights.empty() ? nullptr : mb.weights.data(), mb.B, mb.T, data::doc_starts(mb)});
  return in;
}

// The rows' sample ids and the epoch, which key an MoE router's jitter (docs/moe.md).
std::vector<model::SampleIds> ids_of(const data::StepBatch& batch) {
  std::vector<model::SampleIds> ids;
  for (const data::MicroBatch& mb : batch.micro) ids.push_back({mb.sample_ids.data(), batch.epoch});
  return ids;
}

// "0-1" or "0,3" (interleaved chunks): the layers stage s holds.
std::string stage_layers_text(const std::vector<model::StageChunk>& chunks, const pl::Schedule& sched,
                              int s) {
  std::string layers;
  for (int c = 0; c < sched.virt; ++c) {
    const model::StageChunk& ch = chunks[size_t(sched.virtual_stage(s, c))];
    layers += cat(c ? "," : "", ch.begin, "-", ch.end - 1);
  }
  return layers;
}

// --max-activation-mb under --pp: a stage holds its own layers' activations for the
// micro-batches it keeps in flight (the one-process figure is not any stage's), so each
// stage's own figure, its largest rank's, is compared, naming the stage that does not fit:
// the stage model's buffers and, under cp, the cp attention's (cost/activations.h; Ulysses
// keeps one head-sharded output per layer and slot). Collective over the job, before step 1.
void check_stage_activations(double max_mb, const model::StageModel& sm, const std::vector<int>& slots,
                             const TrainConfig& cfg, parallel::Mesh& mesh, int b,
                             const std::vector<model::StageChunk>& chunks, const pl::Schedule& sched) {
  if (max_mb <= 0) return;
  const parallel::MeshDims d = mesh.dims();
  int64_t bytes = sm.activation_bytes();
  if (d.cp > 1) {
    int layer_slots = 0;  // Ulysses' saved outputs: one per layer and slot of each chunk
    for (size_t c = 0; c < sm.chunks().size(); ++c)
      layer_slots += (sm.chunks()[c].end - sm.chunks()[c].begin) * slots[c];
    const model::ContextComm* cc = sm.context_comm();
    const bool ring = cc->options().mode == model::CpMode::ring;
    bytes += cost::cp_buffer_bytes(ring, d.cp, layer_slots, b, cfg.train_seq() / d.cp,
                                   cfg.model.dim / d.tp, cfg.model.heads / d.tp,
                                   cost::kv_columns(model::gpt_shape(cfg.model), d.tp));
  }
  const double mine = double(bytes);
  std::vector<double> all(size_t(mesh.world().size()));
  mesh.world().all_gather(&mine, all.data(), 1, DType::f64);
  std::vector<double> most(size_t(d.pp), 0.0);
  for (int r = 0; r < int(all.size()); ++r) {
    const int s = parallel::Mesh::coord_of(d, r).pp;
    most[size_t(s)] = std::max(most[size_t(s)], all[size_t(r)]);
  }
  auto mib = [](double x) { return fmt("%.1f MiB", x / (1 << 20)); };
  std::string each;
  int over = -1;
  for (int s = 0; s < d.pp; ++s) {
    each += cat(s ? ", " : "", "stage ", s, " ", mib(most[size_t(s)]));
    if (over < 0 && most[size_t(s)] > max_mb * (1 << 20)) over = s;
  }
  STRATA_CHECK(over < 0, "--max-activation-mb ", max_mb, ": pipeline stage ", over, " (layers ",
               stage_layers_text(chunks, sched, over), ") needs ", mib(most[size_t(over)]),
               " of activations per rank at --seq ", cfg.train_seq(), " (micro-batch ", b,
               ", its micro-batches in flight; ", each, ")");
}

// This rank's activation bytes by the formula (cost/stage_activations.h): its chunks' blocks
// for the schedule's slots, its head or embedding, the scratch and, under cp, the
// ContextComm's buffers; what the stage model allocates.
int64_t planned_stage_activations(const TrainConfig& cfg, const model::StageModel& sm,
                                  const std::vector<int>& slots, bool split, int b) {
  std::vector<cost::ChunkSlots> chunks;
  for (size_t c = 0; c < sm.chunks().size(); ++c) {
    const model::StageChunk& ch = sm.chunks()[c];
    int64_t recomputed = 0;
    for (int l = ch.begin; l < ch.end; ++l)
      recomputed += cfg.model.recomputes_block(l, l - ch.begin);
    chunks.push_back({ch.end - ch.begin, recomputed, ch.embed, ch.head, slots[c]});
  }
  const model::TensorComm* tc = sm.tensor_comm();
  const model::ContextComm* cc = sm.context_comm();
  return cost::stage_activation_buffers(model::gpt_shape(cfg.model), chunks, split,
                                        tc ? tc->size() : 1, tc && tc->sequence_parallel(),
                                        tc ? tc->rank() : 0, b, sm.compute() == DType::bf16,
                                        cc ? cc->size() : 1,
                                        !cc || cc->options().mode == model::CpMode::ring,
                                        cfg.train_seq())
      .total();
}


// A pipeline stage (docs/pipeline.md): this rank's chunks of the model as a stage model,
// every micro-batch's forward and backward in the schedule's order by the executor, the
// stage engine reducing gradients over dp x cp; each step's bubble and transfer accounting,
// and the pipeline's summary section. The trainer runs the stage model as this rank's model;
// it samples nothing (the whole model is on no rank).
class PipelineRunner final : public StepRunner {
 public:
  PipelineRunner(const TrainConfig& cfg, const ParallelConfig& pc, parallel::Mesh& mesh, const Topology& topo);

  model::StageModel& build_model(const TrainConfig&, const Topology&, int) override { return sm_; }
  std::unique_ptr<parallel::StepEngine> make_engine(const parallel::OptimConfig& optim, uint64_t seed) override {
    auto e = pl::make_stage_engine(sm_, mesh_, pc_.dp, optim, seed);
    engine_ = e.get();
    return e;
  }
  double forward_backward(const data::StepBatch& batch, float scale) override;
  double forward_sum(const data::StepBatch& batch) override {
    sm_.set_inputs(inputs_of(batch));
    pl::Executor eval(pl::make_forward_only(P_, int(batch.micro.size()), V_), stage_, &mesh_.pp(), grad_.get());
    return eval.run(sm_, 0);  // the last stage's rows; the trainer sums over the job
  }
  json step_metrics() override { return step_rec_; }
  void summary_sections(SummaryBuilder& summary) override;

 private:
  // Context parallel: the attention bytes this rank sends per step, for its stage's layers
  // only (the trainer's record counts every layer of the model).
  int64_t stage_cp_bytes(const data::StepBatch& batch) const;

  const TrainConfig& cfg_;
  const ParallelConfig& pc_;
  parallel::Mesh& mesh_;
  const Topology& topo_;
  const parallel::MeshDims d_;
  const int P_, V_, stage_, A_, b_;
  const pl::Schedule sched_;
  const DType compute_;
  const PipelineCosts pcost_;
  const std::vector<int> slots_;
  model::StageModel sm_;
  comm::GroupPtr grad_;
  pl::Executor ex_;
  int stage_layers_ = 0, stage_recomputed_ = 0;
  parallel::DataParallelEngine* engine_ = nullptr;
  std::vector<double> bubbles_, steps_ms_;  // this stage's, per step (rank 0: every stage's mean)
  std::vector<double> transfer_shares_;     // per step: mean over stages of transfer wait / step
  std::vector<double> replayed_bubbles_;    // per step: the model fed the stages' measured compute
  std::vector<double> own_window_bubbles_;  // per step: each stage's bubble over its own time
  json step_rec_;
};

// This rank's chunks of the model, by the split that balances the layer types' measured
// costs (train/pipeline_costs.h).
std::vector<model::StageChunk> chunks_of_rank(const PipelineCosts& pcost, const pl::Schedule& sched, int stage) {
  std::vector<model::StageChunk> mine;
  for (int c = 0; c < sched.virt; ++c) mine.push_back(pcost.chunks[size_t(sched.virtual_stage(stage, c))]);
  return mine;
}

PipelineCosts costs_of(const TrainConfig& cfg, const ParallelConfig& pc, const pl::Schedule& sched, int b, DType compute,
                       parallel::Mesh& mesh, const Topology& topo) {
  const int64_t rows = int64_t(b) * cfg.train_seq() / mesh.dims().cp;  // a cp rank's chunks
  PipelineCosts pcost = pipeline_costs(cfg, pc, sched, b, compute,
                                       (topo.tp ? topo.tp->local_rows(rows) : rows) * cfg.model.dim, *topo.group,
                                       &mesh.pp());
  if (topo.rank == 0) std::fprintf(stderr, "strata train: %s\n", pipeline_costs_line(pcost).c_str());
  return pcost;
}

PipelineRunner::PipelineRunner(const TrainConfig& cfg, const ParallelConfig& pc, parallel::Mesh& mesh,
                               const Topology& topo)
    : cfg_(cfg), pc_(pc), mesh_(mesh), topo_(topo), d_(mesh.dims()), P_(d_.pp), V_(pc.pipeline.virt),
      stage_(mesh.pp_rank()), A_(cfg.accum(topo.dp_world)), b_(cfg.batch / (A_ * topo.dp_world)),
      sched_(pl::make_schedule(pc.pipeline.schedule, P_, A_, V_)),
      compute_(pc.dp.precision == cost::Precision::bf16 ? DType::bf16 : DType::f32),
      pcost_(costs_of(cfg, pc, sched_, b_, compute_, mesh, topo)), slots_(pl::slots_for(sched_, stage_)),
      sm_(cfg.model, chunks_of_rank(pcost_, sched_, stage_), slots_, b_, compute_, sched_.split_backward, topo.tp,
          topo.cp, /*allocate_state=*/false, mesh.has_ep() ? &mesh.ep() : nullptr),
      grad_(mesh.pp().split(0, mesh.pp().rank(), mesh.pp().name() + ".grad")),
      ex_(sched_, stage_, &mesh.pp(), grad_.get()) {
  check_stage_activations(cfg.max_activation_mb, sm_, slots_, cfg, mesh, b_, pcost_.chunks, sched_);
  // Each stage's F/B/W spans on a track named by its stage: merged, the schedule's diagonal.
  if (tracer().enabled()) tracer().name_thread(cat("compute (pp stage ", stage_, ")"));
  for (const model::StageChunk& ch : sm_.chunks()) {
    stage_layers_ += ch.end - ch.begin;
    for (int l = ch.begin; l < ch.end; ++l) stage_recomputed_ += cfg.model.recomputes_block(l, l - ch.begin);
  }
}

int64_t PipelineRunner::stage_cp_bytes(const data::StepBatch& batch) const {
  int64_t sequences = 0;
  for (const data::MicroBatch& mb : batch.micro) sequences += mb.B;
  return cost::cp_bytes_per_micro(topo_.cp->options().mode == model::CpMode::ring, d_.cp, stage_layers_, sequences,
                                  cfg_.train_seq(), cfg_.model.dim / d_.tp, stage_recomputed_,
                                  cost::kv_columns(model::gpt_shape(cfg_.model), d_.tp), cfg_.model.head_dim());
}

double PipelineRunner::forward_backward(const data::StepBatch& batch, float scale) {
  sm_.set_inputs(inputs_of(batch), ids_of(batch));
  engine_->begin_micro(0, int(batch.micro.size()));  // each unit's gradients: after that many
  double loss = ex_.run(sm_, scale);
  if (sm_.moe()) {
    // The aux and z losses of every stage's MoE blocks join the last stage's sum (counted
    // where it is, topo.counts_loss; each cp rank's cover its chunks, as without a pipeline).
    double aux_z = sm_.moe()->load_aux_z();
    mesh_.pp().all_reduce(&aux_z, 1);
    if (mesh_.last_stage()) loss += aux_z;
  }
  const PipelineStep acc = account_step(ex_, pcost_, mesh_.pp());
  bubbles_.push_back(acc.bubble_mean);
  own_window_bubbles_.push_back(acc.bubble_own_window);
  transfer_shares_.push_back(acc.transfer_share);
  replayed_bubbles_.push_back(acc.replayed);
  steps_ms_.push_back(acc.record["pp_schedule_ms"].get<double>());
  step_rec_ = acc.record;
  if (topo_.cp) step_rec_["cp_bytes_formula"] = stage_cp_bytes(batch);
  return loss;
}

void PipelineRunner::summary_sections(SummaryBuilder& summary) {
  if (cfg_.optim.kind == parallel::OptimizerKind::muon) {  // this stage's matrices, over its dp x cp group
    RankStateFormula f;
    f.dense_params = sm_.num_params();
    f.dense_ranks = mesh_.dp_cp().size();
    MuonFormula m = muon_formula(sm_, f, pc_.dp.stage, mesh_.dp_cp().rank(), 0, cfg_.optim.muon.ns_steps);
    m.dense_updated = -1;  // the stage engine keeps unit 0 in a region of its own: not this shard formula's
    add_muon_section(summary, cfg_.optim.muon, sm_, *engine_, m);
  }
  // Under cp the activations include the cp attention's buffers (Ulysses: its saved outputs).
  const int64_t acts = sm_.activation_bytes() + (topo_.cp ? topo_.cp->buffer_bytes() : 0);
  const int64_t planned = planned_stage_activations(cfg_, sm_, slots_, sched_.split_backward, b_);
  const double mine_s[4] = {double(acts), double(sm_.num_params()),
                            double(pl::max_in_flight(sched_, stage_)), double(planned)};
  std::vector<double> all(size_t(4 * P_));
  mesh_.pp().all_gather(mine_s, all.data(), 4, DType::f64);
  // Steady state: the first step pays for warm-up.
  std::vector<double> steady(bubbles_.begin() + (bubbles_.size() > 1 ? 1 : 0), bubbles_.end());
  const double measured = median(steady), formula = pl::bubble_formula(sched_);
  auto steady_median = [](const std::vector<double>& v) {
    return median(std::vector<double>(v.begin() + (v.size() > 1 ? 1 : 0), v.end()));
  };
  const double transfer_share = steady_median(transfer_shares_);
  const double replayed = steady_median(replayed_bubbles_);
  json stages = json::array();
  std::string text = cat("pipeline: ", pl::schedule_name(pc_.pipeline.schedule), ", ", P_, " stages",
                         V_ > 1 ? cat(" x ", V_, " chunks") : "",
                         d_.cp > 1 ? cat(" of cp ", d_.cp, " (each stage message: B x seq/", d_.cp,
                                        " rows)")
                                  : "",
                         ", ", A_,
                         " micro-batches: bubble ", fmt("%.3f", measured),
                         " measured (median over steps, mean over stages) vs formula ",
                         fmt("%.3f", formula), " vs planned ", fmt("%.3f", pcost_.planned.bubble),
                         " (", pcost_.costs.measured ? "measured" : "estimated",
                         " layer costs, ", fmt("%.3f", pcost_.transfer_s * 1e3),
                         " ms per message) vs ", fmt("%.3f", replayed),
                         " replayed with each step's measured stage compute; waiting on "
                         "messages already sent ", fmt("%.3f", transfer_share), " of the schedule");
  for (int s = 0; s < P_; ++s) {
    const std::string layers = stage_layers_text(pcost_.chunks, sched_, s);
    const double* at = all.data() + 4 * s;
    stages.push_back({{"stage", s}, {"layers", layers}, {"params", int64_t(at[1])},
                      {"activation_bytes", int64_t(at[0])},
                      {"activation_bytes_planned", int64_t(at[3])},
                      {"in_flight", int(at[2])}});
    text += cat("\n  stage ", s, ": layers ", layers, ", ", int64_t(at[1]),
                " params, activations ", int64_t(at[0]), " B (planned ", int64_t(at[3]),
                ") for ", int(at[2]), " micro-batches in flight");
  }
  json pipe = {{"schedule", pl::schedule_name(pc_.pipeline.schedule)}, {"pp", P_}, {"cp", d_.cp},
               {"virtual_stages", V_},
               {"micro_batches", A_}, {"bubble_measured", measured},
               {"bubble_formula", formula}, {"median_schedule_ms", median(steps_ms_)},
               {"transfer_wait_share", transfer_share},
               {"bubble_replayed", replayed},
               {"bubble_measured_own_windows", steady_median(own_window_bubbles_)},
               {"stages", stages}};
  pipe.update(pipeline_costs_json(pcost_));
  summary.set("pipeline", pipe);
  summary.line(text);
  // The attention's balance within this stage's cp group.
  if (topo_.cp) add_cp_section(summary, sm_, mesh_.cp());
}

}  // namespace

TrainResult train_pipeline_rank(const TrainConfig& cfg, const ParallelConfig& pc,
                                parallel::Mesh& mesh, Topology topo) {
  auto runner = std::make_unique<PipelineRunner>(cfg, pc, mesh, topo);
  // Under cp each cp rank of the last stage sums its own rows' losses: all of them count
  // (replica groups that read the same data: group 0's, as train_in_world decided).
  topo.counts_group_loss = mesh.last_stage() && mesh.tp_rank() == 0;
  topo.counts_loss = topo.counts_loss_of_group && topo.counts_group_loss;
  topo.counts_tokens = topo.counts_group_loss && mesh.cp_rank() == 0;  // the cp ranks share sequences
  return Trainer(cfg, topo, std::move(runner)).run();
}

}  // namespace strata::train
