#include "harness.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <mutex>

#include "comm/process_group.h"
#include "core/error.h"
#include "core/rng.h"
#include "cost/shapes.h"
#include "gtest/gtest.h"
#include "kernels/adamw.h"
#include "parallel/zero_comm.h"
#include "parallel/mesh.h"
#include "model/context/context_comm.h"
#include "model/expert/moe.h"
#include "model/tensor/collectives.h"
#include "model/stage.h"
#include "parallel/pipeline/engine.h"
#include "parallel/pipeline/executor.h"

namespace strata::ptest {

model::GPTConfig small_config() {
  model::GPTConfig c;
  c.layers = 2;
  c.dim = 64;
  c.heads = 4;
  c.seq = 16;
  c.vocab = 64;
  c.padded_vocab = 64;
  return c;
}

namespace {

// The total loss of the last forward: cross-entropy (of the whole sequences) plus an MoE
// model's aux and z losses, which a context-parallel rank has for its chunks only.
double with_moe_losses(const model::GPT& gpt, double ce) {
  if (!gpt.moe()) return ce;
  double aux_z = gpt.moe()->last_aux() + gpt.moe()->last_z();
  if (gpt.context_comm()) gpt.context_comm()->group().all_reduce(&aux_z, 1);
  return ce + aux_z;
}

// Rows [row0, row0 + B) of the global batch of `step`: a noisy affine sequence (learnable)
// with the last 3 targets of the last row of the batch masked out (weight 0).
struct Rows {
  int B = 0, T = 0;
  std::vector<int32_t> tokens, targets;
  std::vector<float> weights;
};

Rows batch_rows(const RunSpec& s, int step, int row0, int B) {
  Rows r;
  r.B = B;
  r.T = s.T;
  const int V = s.model.vocab;
  for (int row = row0; row < row0 + B; ++row) {
    Rng rng(s.seed, 1000 + uint64_t(step) * 64 + uint64_t(row));
    std::vector<int32_t> seq(s.T + 1);
    seq[0] = int32_t(rng.below(V));
    for (int t = 1; t <= s.T; ++t)
      seq[t] = rng.uniform() < 0.2f ? int32_t(rng.below(V)) : (3 * seq[t - 1] + 1) % V;
    for (int t = 0; t < s.T; ++t) {
      r.tokens.push_back(seq[t]);
      r.targets.push_back(seq[t + 1]);
      r.weights.push_back(row == s.batch - 1 && t >= s.T - 3 ? 0.0f : 1.0f);
    }
  }
  return r;
}

int64_t real_tokens(const RunSpec& s) { return int64_t(s.batch) * s.T - 3; }

}  // namespace

RunResult run_reference(const RunSpec& s) {
  omp_set_num_threads(1);
  const int micro = s.batch / s.accum;
  model::GPT gpt(s.model, micro, true, nullptr, s.compute);
  gpt.init(s.seed);
  const int64_t n = gpt.num_params();
  std::vector<float> m(n, 0.0f), v(n, 0.0f);
  const auto decay = model::decay_ranges(gpt.param_table(), 0, n);
  RunResult out;
  for (int step = 0; step < s.steps; ++step) {
    gpt.zero_grads();
    double loss = 0;
    for (int a = 0; a < s.accum; ++a) {
      Rows r = batch_rows(s, step, a * micro, micro);
      loss += with_moe_losses(
          gpt, gpt.forward(r.tokens.data(), r.targets.data(), r.weights.data(), r.B, r.T));
      gpt.backward(float(1.0 / double(real_tokens(s))));
    }
    const double ss = kernels::sum_squares(gpt.grads(), n);
    kernels::AdamWStep st;
    st.lr = s.lr;
    st.beta1 = s.optim.beta1;
    st.beta2 = s.optim.beta2;
    st.eps = s.optim.eps;
    st.weight_decay = s.optim.weight_decay;
    st.t = step + 1;
    st.grad_scale = kernels::clip_scale(ss, s.optim.grad_clip);
    for (const model::DecayRange& d : decay)
      kernels::adamw_update(gpt.params() + d.begin, gpt.grads() + d.begin, m.data() + d.begin,
                            v.data() + d.begin, d.end - d.begin, d.decay, st);
    out.losses.push_back(loss / double(real_tokens(s)));
    out.grad_norms.push_back(float(std::sqrt(ss)));
  }
  out.params.assign(gpt.params(), gpt.params() + n);
  return out;
}

RunResult run_data_parallel(const RunSpec& s, int world,
                            const parallel::DataParallelOptions& opts) {
  TpRun run;
  run.dp = world;
  run.opts = opts;
  return run_tensor_parallel(s, run);
}

// Copies a piece (its local elements) into the one-process flat buffer at the global view.
static void place_piece(std::vector<float>& global, const std::vector<model::ParamView>& table,
                        const TensorPiece& p, const float* local) {
  const model::ParamView* v = nullptr;
  for (const model::ParamView& x : table)
    if (x.name == p.name) v = &x;
  STRATA_CHECK(v, "no global view ", p.name);
  const int64_t n = p.numel();
  for (int64_t q = 0; q < n; ++q) {
    int64_t e = p.offsets[0] + q;
    if (p.extents.size() == 2)
      e = (p.offsets[0] + q / p.extents[1]) * p.global_shape[1] + p.offsets[1] + q % p.extents[1];
    global[size_t(v->offset + e)] = local[q];
  }
}

RunResult run_tensor_parallel(const RunSpec& s, const TpRun& run, int64_t* tp_bytes) {
  const int world = run.tp * run.cp * run.dp;
  STRATA_CHECK(s.batch % (run.dp * s.accum) == 0, "test batch ", s.batch, " does not split into ",
               run.dp, " dp ranks x ", s.accum, " micro-batches");
  const int micro = s.batch / (run.dp * s.accum);
  std::vector<RunResult> results(world);
  std::vector<std::vector<float>> local(world);
  std::vector<TensorLayout> layouts(world);
  std::vector<int64_t> bytes(world, 0);
  comm::run_threads(world, [&](comm::ProcessGroup& pg) {
    omp_set_num_threads(1);
    parallel::Mesh mesh(pg, {run.tp, run.dp, run.cp, 1, run.ep});
    std::unique_ptr<model::TensorComm> tc;
    if (mesh.has_tp()) tc = std::make_unique<model::TensorComm>(
          mesh.tp(), run.sp, int(cost::tp_kv_share(s.model.kv(), run.tp)));
    std::unique_ptr<model::ContextComm> cc;
    if (mesh.has_cp()) cc = std::make_unique<model::ContextComm>(mesh.cp(), run.cp_opt);
    model::GPT gpt(s.model, micro, parallel::model_owns_state(run.opts), tc.get(), s.compute,
                   cc.get(), mesh.has_ep() ? &mesh.ep() : nullptr);
    STRATA_CHECK(gpt.compute() == s.compute, "the model computes in ", dtype_name(gpt.compute()),
                 " instead of ", dtype_name(s.compute));
    parallel::ExpertGroups xg;
    if (mesh.has_ep()) xg = {&mesh.edp(), &mesh.ep()};
    parallel::DataParallelEngine engine(gpt, mesh.dp_cp(), run.opts, s.optim, s.seed, xg);
    const int rank = pg.rank(), d = mesh.dp_rank();
    RunResult& out = results[rank];
    for (int step = 0; step < s.steps; ++step) {
      engine.begin_step();
      double loss = 0;
      for (int a = 0; a < s.accum; ++a) {
        engine.begin_micro(a, s.accum);
        Rows r = batch_rows(s, step, (d * s.accum + a) * micro, micro);
        loss += with_moe_losses(
            gpt, gpt.forward(r.tokens.data(), r.targets.data(), r.weights.data(), r.B, r.T));
        gpt.backward(float(1.0 / double(real_tokens(s))));
      }
      engine.end_backward();
      out.grad_norms.push_back(engine.step(s.lr));
      out.losses.push_back(parallel::sum_over_ranks(mesh.dp(), loss) / double(real_tokens(s)));
    }
    local[rank] = engine.gather_full_params();
    layouts[rank] = gpt.tensor_layout();
    out.memory = engine.memory_report();
    out.grad_reduce_bytes = engine.grad_reduce_bytes_last_step();
    if (const parallel::Region* x = engine.expert_region())
      out.expert_grad_reduce_bytes = engine.grad_reduce_bytes_last_step(*x);
    if (gpt.moe()) out.ep_bytes = gpt.moe()->group().bytes_sent(), out.ep_rows = gpt.moe()->group().rows_sent();
    bytes[rank] = engine.tp_bytes_last_step();
  });
  // Ranks with the same tp rank and expert-parallel rank hold the same weights; the first
  // ep x tp ranks (tp fastest, then cp, dp: parallel/mesh.h) hold every piece between them.
  const int group = run.tp * run.ep;  // dp·cp indices 0 .. ep - 1
  for (int r = 1; r < world; ++r) {
    EXPECT_EQ(results[r].losses, results[0].losses) << "rank " << r << " reports other losses";
    const int i = r / run.tp, same = (i % run.ep) * run.tp + r % run.tp;  // dp·cp index i
    EXPECT_EQ(local[r], local[same]) << "rank " << r << " holds other weights";
  }
  const std::vector<model::ParamView> table = model::build_param_table(s.model);
  std::vector<float> global(size_t(s.model.num_params()), NAN);
  for (int t = 0; t < std::min(group, world); ++t)  // every piece, from the first ranks
    for (const TensorPiece& p : layouts[t]) place_piece(global, table, p, &local[t][p.local_offset]);
  for (float v : global) STRATA_CHECK(!std::isnan(v), "a weight is held by no rank");
  results[0].params = std::move(global);
  for (int r = 1; r < world; ++r) results[0].ep_bytes += results[r].ep_bytes, results[0].ep_rows += results[r].ep_rows;
  if (tp_bytes) *tp_bytes = bytes[0];
  return results[0];
}

RunResult run_pipeline(const RunSpec& s, const PpRun& run, int64_t* tp_bytes) {
  namespace pl = parallel::pipeline;
  const int world = run.pp * run.dp * run.tp * run.cp, micro = s.batch / (run.dp * s.accum);
  STRATA_CHECK(s.batch % (run.dp * s.accum) == 0, "test batch ", s.batch, " does not split");
  const pl::Schedule sched =
      pl::make_schedule(pl::parse_schedule(run.schedule), run.pp, s.accum, run.virt);
  const auto chunks = model::split_layers(s.model, s.T, run.pp, run.virt, run.split);
  std::vector<RunResult> results(world);
  std::vector<std::vector<float>> local(world);
  std::vector<TensorLayout> layouts(world);
  comm::run_threads(world, [&](comm::ProcessGroup& pg) {
    omp_set_num_threads(1);
    parallel::MeshDims dims;
    dims.dp = run.dp;
    dims.pp = run.pp;
    dims.tp = run.tp;
    dims.cp = run.cp;
    parallel::Mesh mesh(pg, dims);
    std::unique_ptr<model::TensorComm> tc;
    if (mesh.has_tp()) tc = std::make_unique<model::TensorComm>(
          mesh.tp(), run.sp, int(cost::tp_kv_share(s.model.kv(), run.tp)));
    std::unique_ptr<model::ContextComm> cc;
    if (mesh.has_cp()) cc = std::make_unique<model::ContextComm>(mesh.cp(), run.cp_opt);
    const int stage = mesh.pp_rank();
    std::vector<model::StageChunk> mine;
    for (int c = 0; c < run.virt; ++c) mine.push_back(chunks[size_t(sched.virtual_stage(stage, c))]);
    model::StageModel sm(s.model, mine, pl::slots_for(sched, stage), micro, s.compute,
                         sched.split_backward, tc.get(), cc.get(), /*allocate_state=*/false);
    parallel::DataParallelOptions opts;
    opts.stage = run.zero;
    if (run.reduce_bf16) opts.reduce_precision = cost::Precision::bf16;
    const auto engine = pl::make_stage_engine(sm, mesh, opts, s.optim, s.seed);
    comm::GroupPtr grad = mesh.has_pp() ? mesh.pp().split(0, mesh.pp().rank(), "pp-grad") : nullptr;
    pl::Executor ex(sched, stage, mesh.has_pp() ? &mesh.pp() : nullptr, grad.get());
    RunResult& out = results[size_t(pg.rank())];
    const int d = mesh.dp_rank();
    for (int step = 0; step < s.steps; ++step) {
      std::vector<Rows> rows;
      std::vector<model::MicroInput> in;
      for (int a = 0; a < s.accum; ++a) rows.push_back(batch_rows(s, step, (d * s.accum + a) * micro, micro));
      for (const Rows& r : rows)
        in.push_back({r.tokens.data(), r.targets.data(), r.weights.data(), r.B, r.T});
      sm.set_inputs(in);
      engine->begin_step();
      engine->begin_micro(0, s.accum);
      double loss = ex.run(sm, float(1.0 / double(real_tokens(s))));
      engine->end_backward();
      out.grad_norms.push_back(engine->step(s.lr));
      if (mesh.tp_rank() != 0) loss = 0;  // every tp rank of the last stage has the loss
      pg.all_reduce(&loss, 1);
      out.losses.push_back(loss / double(real_tokens(s)));
    }
    local[size_t(pg.rank())] = engine->gather_full_params();
    layouts[size_t(pg.rank())] = sm.tensor_layout();
    if (tp_bytes && pg.rank() == 0) *tp_bytes = tc ? tc->bytes() : 0;
  });
  for (int r = 1; r < world; ++r)
    EXPECT_EQ(results[size_t(r)].losses, results[0].losses) << "rank " << r << " reports other losses";
  const std::vector<model::ParamView> table = model::build_param_table(s.model);
  std::vector<float> global(size_t(s.model.num_params()), NAN);
  for (int r = 0; r < world; ++r) {
    const parallel::MeshCoord at = parallel::Mesh::coord_of({run.tp, run.dp, run.cp, run.pp}, r);
    if (at.dp != 0 || at.cp != 0) continue;
    for (const TensorPiece& p : layouts[size_t(r)])
      if (p.primary) place_piece(global, table, p, &local[size_t(r)][size_t(p.local_offset)]);
  }
  results[0].params = std::move(global);
  return results[0];
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  STRATA_CHECK(a.size() == b.size(), "length ", a.size(), " vs ", b.size());
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(a[i] - b[i]));
  return d;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  STRATA_CHECK(a.size() == b.size(), "length ", a.size(), " vs ", b.size());
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, double(std::abs(a[i] - b[i])));
  return d;
}

}  // namespace strata::ptest
