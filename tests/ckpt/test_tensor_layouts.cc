// Tensor checkpoints: saved by one mesh (tp × dp × ZeRO), loaded by another, every element
// checked; the chunk arithmetic against brute force; and the refusals (missing coverage,
// overlapping chunks, wrong global shapes), each one line.
#include <fstream>
#include <random>

#include "ckpt/safetensors.h"
#include "layouts.h"

using namespace ckpt_test;

namespace {

constexpr int64_t C = 8;

// A one-block GPT-like model whose tensors exercise every kind of piece.
std::vector<TensorInfo> model_table(int64_t proj_cols = 4 * C) {
  std::vector<TensorInfo> t = {{"wte", {13, C}, 0},
                               {"h.0.ln_1.weight", {C}, 0},
                               {"h.0.attn.c_attn.weight", {3 * C, C}, 0},
                               {"h.0.attn.c_attn.bias", {3 * C}, 0},
                               {"h.0.mlp.c_proj.weight", {C, proj_cols}, 0},
                               {"h.0.mlp.c_proj.bias", {C}, 0}};
  int64_t at = 0;
  for (TensorInfo& x : t) x.offset = at, at += numel(x.shape);
  return t;
}

const char* kNames[] = {"params", "exp_avg", "exp_avg_sq"};

std::vector<float> expected_local(const TensorLayout& layout, int state, int64_t step,
                                  const std::vector<TensorInfo>& table) {
  return local_state(layout, [&](const std::string& name, int64_t pos) {
    return tvalue(state, step, tensor_index(table, name), pos);
  });
}

// Each rank of `m` saves `step`; `edit` may change a rank's layout first. Returns the errors
// of the ranks ("" when the save committed).
std::vector<std::string> save_mesh(const std::string& run, const Mesh& m, int64_t step,
                                   const std::function<void(int, TensorLayout&)>& edit = {}) {
  const std::vector<TensorInfo> table = model_table();
  Group g(m.world());
  std::vector<std::string> errors(size_t(m.world()));
  g.run([&](int r) {
    TensorLayout layout = megatron_layout(table, m.tp_rank(r), m.tp);
    if (edit) edit(r, layout);
    const int64_t psi = layout_numel(layout);
    std::vector<std::vector<float>> bufs;
    SaveRequest req;
    req.step = step;
    req.tensors = table;
    req.layout = layout;
    req.train.world = m.world();
    req.train.tp = m.tp;
    req.train.dp = m.dp;
    req.train.zero_stage = m.stage;
    for (int s = 0; s < 3; ++s) {
      std::vector<float> full = expected_local(layout, s, step, table);
      const Range held = held_range(m, r, s, psi);
      std::vector<float> buf(size_t(held.size()), 777.0f);  // padding past Ψ_local: junk
      for (int64_t i = held.begin; i < std::min(held.end, psi); ++i)
        buf[size_t(i - held.begin)] = full[size_t(i)];
      bufs.push_back(std::move(buf));
      req.states.push_back({kNames[s], DType::f32, psi, held, bufs.back().data(),
                            write_range_of(m, r, psi)});
    }
    Checkpointer c(options(run, r, m.world(), &g));
    c.save_async(req);
    try {
      c.wait();
    } catch (const Error& e) {
      errors[size_t(r)] = e.what();
    }
  });
  return errors;
}

// Every rank of `m` loads what it holds and checks each element (zeros past Ψ_local).
void load_mesh_and_check(const std::string& dir, const Mesh& m, int64_t step) {
  const std::vector<TensorInfo> table = model_table();
  for (int r = 0; r < m.world(); ++r) {
    const TensorLayout layout = megatron_layout(table, m.tp_rank(r), m.tp);
    const int64_t psi = layout_numel(layout);
    std::vector<std::vector<float>> bufs(3);
    std::vector<StateTarget> targets;
    for (int s = 0; s < 3; ++s) {
      const Range held = held_range(m, r, s, psi);
      bufs[size_t(s)].assign(size_t(held.size()), -999.0f);
      targets.push_back({kNames[s], DType::f32, held, bufs[size_t(s)].data(), {}});
    }
    LoadOptions o;
    o.expected_tensors = table;
    o.layout = layout;
    load_checkpoint(dir, targets, o);
    for (int s = 0; s < 3; ++s) {
      const std::vector<float> full = expected_local(layout, s, step, table);
      const Range held = targets[size_t(s)].want;
      for (int64_t i = held.begin; i < held.end; ++i)
        ASSERT_EQ(bufs[size_t(s)][size_t(i - held.begin)], i < psi ? full[size_t(i)] : 0.0f)
            << kNames[s] << " local element " << i << " of rank " << r << " (" << m.str() << ")";
    }
  }
}

bool one_line(const std::string& s) { return !s.empty() && s.find('\n') == std::string::npos; }
bool has(const std::string& s, const std::string& needle) { return s.find(needle) != std::string::npos; }

}  // namespace

TEST(CkptTensorLayouts, RunsMatchBruteForce) {
  std::mt19937 gen(7);
  for (int trial = 0; trial < 400; ++trial) {
    const int d = int(gen() % 4);  // 0-d (a scalar) to 3-d
    Shape shape, ext;
    std::vector<int64_t> off;
    for (int j = 0; j < d; ++j) {
      shape.push_back(1 + int64_t(gen() % 5));
      off.push_back(int64_t(gen() % uint32_t(shape.back())));
      ext.push_back(int64_t(gen() % uint32_t(shape.back() - off.back() + 1)));
    }
    const int64_t n = numel(ext);
    const int64_t b = n ? int64_t(gen() % uint32_t(n + 1)) : 0;
    const int64_t e = b + (n - b ? int64_t(gen() % uint32_t(n - b + 1)) : 0);
    const TensorPiece p{"t", shape, off, ext, 0, true};
    int64_t next = b;
    for_each_run(shape, off, ext, {b, e}, [&](int64_t box_pos, int64_t global, int64_t count) {
      ASSERT_EQ(box_pos, next) << "runs must come in box order, without gaps";
      for (int64_t k = 0; k < count; ++k) ASSERT_EQ(global + k, global_pos(p, box_pos + k));
      next += count;
    });
    EXPECT_EQ(next, e);
  }
}

TEST(CkptTensorLayouts, ChunksAreBoxesOfGlobalTensors) {
  TempDir tmp;
  const Mesh m{2, 2, 1};
  for (const std::string& e : save_mesh(tmp.str(), m, 5)) ASSERT_EQ(e, "");
  const Manifest man = read_manifest(tmp.str() + "/ckpt/step-000005");
  EXPECT_EQ(man.version, 2);
  EXPECT_EQ(man.train.tp, 2);
  EXPECT_EQ(man.train.dp, 2);
  EXPECT_EQ(man.tensors.size(), 6u);
  bool column_box = false, mid_row = false, replica_written = false;
  for (const ShardInfo& sh : man.shards)
    for (const PieceInfo& p : sh.pieces) {
      if (p.tensor == "h.0.mlp.c_proj.weight" && p.extents == Shape{C, 2 * C}) column_box = true;
      if (p.extents.size() == 2 && p.flat.begin % p.extents[1] != 0) mid_row = true;
      // Replicated tensors come from tp rank 0 only (ranks 0 and 2).
      if (p.tensor == "h.0.ln_1.weight") replica_written |= sh.rank % 2 == 1;
    }
  EXPECT_TRUE(column_box);
  EXPECT_TRUE(mid_row) << "ZeRO write ranges should cut some box mid-row";
  EXPECT_FALSE(replica_written);
}

TEST(CkptTensorLayouts, AnyMeshLoadsAnyOther) {
  const std::vector<Mesh> saves = {{2, 2, 1}, {2, 1, 0}, {4, 1, 3}, {1, 3, 3}, {4, 2, 2}, {3, 1, 0}};
  const std::vector<Mesh> loads = {{1, 1, 0}, {4, 1, 0}, {2, 2, 3}, {1, 4, 3},
                                   {4, 2, 1}, {2, 3, 2}, {3, 2, 1}};
  int64_t step = 10;
  for (const Mesh& s : saves) {
    TempDir tmp;
    ++step;
    for (const std::string& e : save_mesh(tmp.str(), s, step)) ASSERT_EQ(e, "") << s.str();
    for (const Mesh& l : loads) {
      SCOPED_TRACE("saved at " + s.str() + ", loaded at " + l.str());
      load_mesh_and_check(tmp.str() + "/ckpt/" + step_dir_name(step), l, step);
    }
  }
}

TEST(CkptTensorLayouts, MissingCoverageIsNotCommitted) {
  TempDir tmp;
  const Mesh m{2, 1, 0};
  for (const std::string& e : save_mesh(tmp.str(), m, 5)) ASSERT_EQ(e, "");
  // No rank writes the bias of the MLP projection (every copy marked a replica).
  auto errors = save_mesh(tmp.str(), m, 6, [](int, TensorLayout& l) {
    for (TensorPiece& p : l)
      if (p.name == "h.0.mlp.c_proj.bias") p.primary = false;
  });
  EXPECT_TRUE(one_line(errors[0])) << errors[0];
  EXPECT_TRUE(has(errors[0], "'h.0.mlp.c_proj.bias' (8): no saved chunk holds elements [0]..[7]")) << errors[0];
  EXPECT_EQ(read_latest(tmp.str() + "/ckpt").value(), "step-000005");
  load_mesh_and_check(tmp.str() + "/ckpt/step-000005", {1, 1, 0}, 5);
}

TEST(CkptTensorLayouts, OverlappingChunksAreNotCommitted) {
  TempDir tmp;
  const Mesh m{2, 1, 0};
  // Both tp ranks claim to be the primary copy of a replicated norm weight.
  auto errors = save_mesh(tmp.str(), m, 6, [](int, TensorLayout& l) {
    for (TensorPiece& p : l) p.primary = true;
  });
  EXPECT_TRUE(one_line(errors[0])) << errors[0];
  EXPECT_TRUE(has(errors[0], "'h.0.ln_1.weight' (8): elements from [0] are saved twice")) << errors[0];
  EXPECT_TRUE(has(errors[0], "shard-00000-of-00002.bin") && has(errors[0], "shard-00001-of-00002.bin"))
      << errors[0];
  EXPECT_FALSE(read_latest(tmp.str() + "/ckpt").has_value());
}

TEST(CkptTensorLayouts, EditedManifestWithAGapIsRefusedNamingTheBox) {
  TempDir tmp;
  for (const std::string& e : save_mesh(tmp.str(), {2, 1, 0}, 5)) ASSERT_EQ(e, "");
  const std::string dir = tmp.str() + "/ckpt/step-000005";
  nlohmann::json j;
  std::ifstream(dir + "/manifest.json") >> j;
  // Drop rank 1's column box of the projection's exp_avg.
  nlohmann::json& pieces = j["shards"][1]["pieces"];
  for (size_t i = 0; i < pieces.size(); ++i)
    if (pieces[i]["state"] == "exp_avg" && pieces[i]["tensor"] == "h.0.mlp.c_proj.weight") {
      pieces.erase(i);
      break;
    }
  std::ofstream(dir + "/manifest.json") << j.dump();
  try {
    load_mesh_and_check(dir, {1, 1, 0}, 5);
    FAIL() << "loaded a checkpoint with a hole";
  } catch (const CorruptCheckpoint& e) {
    EXPECT_TRUE(one_line(e.what())) << e.what();
    EXPECT_TRUE(has(e.what(), "state 'exp_avg' tensor 'h.0.mlp.c_proj.weight' (8,32): no saved chunk "
                              "holds elements [0, 16]..[0, 31]"))
        << e.what();
  }
}

TEST(CkptTensorLayouts, WrongGlobalShapeIsAModelMismatch) {
  TempDir tmp;
  for (const std::string& e : save_mesh(tmp.str(), {2, 1, 0}, 5)) ASSERT_EQ(e, "");
  const std::string dir = tmp.str() + "/ckpt/step-000005";
  const std::vector<TensorInfo> other = model_table(3 * C);
  std::vector<float> buf(4096);
  const TensorLayout layout = megatron_layout(other, 0, 2);
  const std::vector<StateTarget> targets = {
      {"params", DType::f32, {0, layout_numel(layout)}, buf.data(), {}}};
  for (bool with_table : {true, false}) {
    LoadOptions o;
    if (with_table) o.expected_tensors = other;
    o.layout = layout;
    try {
      load_checkpoint(dir, targets, o);
      FAIL() << "loaded a checkpoint of another shape";
    } catch (const ModelMismatch& e) {
      EXPECT_TRUE(one_line(e.what())) << e.what();
      EXPECT_TRUE(has(e.what(), "'h.0.mlp.c_proj.weight' (8,32) in the checkpoint") ||
                  has(e.what(), "'h.0.mlp.c_proj.weight' is (8,32) in the checkpoint, (8,24) in this layout"))
          << e.what();
    }
  }
  // A save whose layout disagrees with its own table is refused before anything is written.
  Checkpointer c(options(tmp.str(), 0, 1, nullptr));
  SaveRequest req;
  req.step = 6;
  req.tensors = model_table();
  req.layout = layout;
  std::vector<float> data(size_t(layout_numel(layout)));
  req.states.push_back({"params", DType::f32, layout_numel(layout), {0, layout_numel(layout)}, data.data(), {}});
  try {
    c.save_async(req);
    FAIL() << "saved with an inconsistent layout";
  } catch (const Error& e) {
    EXPECT_TRUE(has(e.what(), "tensor 'h.0.mlp.c_proj.weight' is (8,24) in the layout, (8,32) in the table"))
        << e.what();
  }
  EXPECT_EQ(read_latest(tmp.str() + "/ckpt").value(), "step-000005");
}

TEST(CkptTensorLayouts, ExportAssemblesWholeTensorsFromAnyLayout) {
  TempDir tmp;
  for (const std::string& e : save_mesh(tmp.str(), {4, 2, 3}, 5)) ASSERT_EQ(e, "");
  const std::string out = tmp.str() + "/m.safetensors";
  ExportResult r = export_safetensors(tmp.str() + "/ckpt/step-000005", out);
  EXPECT_EQ(r.tensors, 6);
  const std::vector<TensorInfo> table = model_table();
  SafetensorsFile f = read_safetensors(out);
  ASSERT_EQ(f.tensors.size(), table.size());
  std::ifstream in(out, std::ios::binary);
  for (const SafetensorsTensor& t : f.tensors) {
    const int ti = tensor_index(table, t.name);
    ASSERT_GE(ti, 0) << t.name;
    EXPECT_EQ(t.shape, table[size_t(ti)].shape);
    std::vector<float> got(size_t(numel(t.shape)));
    in.seekg(f.data_start() + t.begin);
    in.read(reinterpret_cast<char*>(got.data()), int64_t(got.size()) * 4);
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], tvalue(0, 5, ti, int64_t(i))) << t.name << "[" << i << "]";
  }
}
