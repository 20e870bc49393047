// Range-based (version 1) checkpoints, as strata wrote them before checkpoints described
// tensors: the fixture in data/v1 was written by `strata train` (data/make_v1.sh). They load
// into any layout and export; the expected values are read from the shard files here, with
// plain file reads at the offsets the version-1 manifest gives.
#include <sys/wait.h>

#include <fstream>

#include "ckpt/safetensors.h"
#include "layouts.h"

using namespace ckpt_test;

namespace {

const std::string kDir = std::string(STRATA_SOURCE_DIR) + "/tests/ckpt/data/v1/step-000002";

// Every state of the fixture as one flat fp32 vector, straight from the files.
std::map<std::string, std::vector<float>> raw_states() {
  nlohmann::json j;
  std::ifstream(kDir + "/manifest.json") >> j;
  EXPECT_EQ(j["version"], 1);
  std::map<std::string, std::vector<float>> out;
  for (const auto& s : j["states"]) out[s["name"]].resize(s["numel"].get<size_t>());
  for (const auto& sh : j["shards"]) {
    std::ifstream f(kDir + "/" + sh["file"].get<std::string>(), std::ios::binary);
    for (const auto& p : sh["pieces"]) {
      const int64_t b = p["range"][0], e = p["range"][1];
      f.seekg(p["offset"].get<int64_t>());
      f.read(reinterpret_cast<char*>(out[p["state"]].data() + b), (e - b) * 4);
      EXPECT_TRUE(f.good());
    }
  }
  return out;
}

}  // namespace

TEST(CkptV1, LoadsIntoTensorParallelLayouts) {
  const Manifest m = read_manifest(kDir);
  EXPECT_EQ(m.version, 1);
  EXPECT_EQ(m.train.tp, 1);  // not recorded by version 1
  EXPECT_EQ(m.train.world, 2);
  const auto raw = raw_states();
  for (int t : {1, 2, 4}) {
    for (int r = 0; r < t; ++r) {
      const TensorLayout layout = megatron_layout(m.tensors, r, t);
      const int64_t psi = layout_numel(layout);
      std::vector<std::vector<float>> bufs(3, std::vector<float>(size_t(psi) + 5, -1.0f));
      const char* names[] = {"params", "exp_avg", "exp_avg_sq"};
      std::vector<StateTarget> targets;
      for (int s = 0; s < 3; ++s)
        targets.push_back({names[s], DType::f32, {0, psi + 5}, bufs[size_t(s)].data(), {}});
      LoadOptions o;
      o.expected_tensors = m.tensors;
      o.layout = layout;
      load_checkpoint(kDir, targets, o);
      for (int s = 0; s < 3; ++s) {
        const std::vector<float>& flat = raw.at(names[s]);
        const std::vector<float> want = local_state(layout, [&](const std::string& name, int64_t pos) {
          return flat[size_t(m.tensors[size_t(tensor_index(m.tensors, name))].offset + pos)];
        });
        for (int64_t i = 0; i < psi + 5; ++i)
          ASSERT_EQ(bufs[size_t(s)][size_t(i)], i < psi ? want[size_t(i)] : 0.0f)
              << names[s] << " element " << i << " of tp rank " << r << " of " << t;
      }
    }
  }
}

TEST(CkptV1, ExportsWholeTensors) {
  TempDir tmp;
  const auto raw = raw_states();
  ExportResult r = export_safetensors(kDir, tmp.str() + "/m.safetensors");
  const Manifest m = read_manifest(kDir);
  EXPECT_EQ(r.tensors, int(m.tensors.size()));
  SafetensorsFile f = read_safetensors(tmp.str() + "/m.safetensors");
  std::ifstream in(tmp.str() + "/m.safetensors", std::ios::binary);
  for (const SafetensorsTensor& t : f.tensors) {
    const TensorInfo& ti = m.tensors[size_t(tensor_index(m.tensors, t.name))];
    std::vector<float> got(size_t(numel(t.shape)));
    in.seekg(f.data_start() + t.begin);
    in.read(reinterpret_cast<char*>(got.data()), int64_t(got.size()) * 4);
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_EQ(got[i], raw.at("params")[size_t(ti.offset) + i]) << t.name << "[" << i << "]";
  }
}

TEST(CkptV1, UnknownVersionIsOneLine) {
  TempDir tmp;
  fs::copy(kDir, tmp.str() + "/step-000002");
  nlohmann::json j;
  std::ifstream(tmp.str() + "/step-000002/manifest.json") >> j;
  j["version"] = 3;
  std::ofstream(tmp.str() + "/step-000002/manifest.json") << j.dump();
  try {
    read_manifest(tmp.str() + "/step-000002");
    FAIL() << "read a manifest of an unknown version";
  } catch (const CorruptCheckpoint& e) {
    EXPECT_NE(std::string(e.what()).find("manifest version 3, this build reads 1 and 2"), std::string::npos)
        << e.what();
  }
}

TEST(CkptV1, TrainingResumesBitExactFromIt) {
  // The fixture's run: step 3 continues from the step-2 checkpoint.
  nlohmann::json ref;
  std::ifstream(std::string(STRATA_SOURCE_DIR) + "/tests/ckpt/data/v1/reference.jsonl") >> ref;
  for (const char* layout : {"--nproc 2 --zero 1", "--nproc 1"}) {
    TempDir tmp;
    const std::string cmd = std::string(STRATA_BINARY) +
                            " train --model tiny --layers 1 --dim 4 --heads 2 --max-seq 8 --vocab 256 --steps 3"
                            " --batch 2 --eval-every 0 --sample-every 0 " + layout + " --resume " + kDir +
                            " --run-dir " + tmp.str() + "/run > " + tmp.str() + "/out.txt 2>&1";
    ASSERT_EQ(WEXITSTATUS(std::system(cmd.c_str())), 0) << cmd;
    std::ifstream out(tmp.str() + "/out.txt");
    const std::string text((std::istreambuf_iterator<char>(out)), std::istreambuf_iterator<char>());
    EXPECT_NE(text.find("resuming from step 2"), std::string::npos) << text;
    std::ifstream metrics(tmp.str() + "/run/metrics.jsonl");
    std::string line;
    nlohmann::json step3;
    while (std::getline(metrics, line)) {
      nlohmann::json j = nlohmann::json::parse(line);
      if (j.value("step", 0) == 3 && j.contains("loss")) step3 = j;
    }
    ASSERT_FALSE(step3.is_null()) << text;
    if (std::string(layout) == "--nproc 2 --zero 1") {  // the saving layout: bit for bit
      EXPECT_EQ(step3["loss"].get<double>(), ref["loss"].get<double>());
      EXPECT_EQ(step3["grad_norm"].get<double>(), ref["grad_norm"].get<double>());
    } else {  // another world size: the reduction order differs
      EXPECT_NEAR(step3["loss"].get<double>(), ref["loss"].get<double>(), 1e-5);
    }
  }
}

TEST(CkptV1, ResumeFromACheckpointWithAHoleIsOneLineAndTouchesNothing) {
  TempDir tmp;
  const std::string dir = tmp.str() + "/old/ckpt/step-000002";
  fs::create_directories(tmp.str() + "/old/ckpt");
  fs::copy(kDir, dir);
  nlohmann::json j;
  std::ifstream(dir + "/manifest.json") >> j;
  j["shards"][1]["pieces"].erase(0);  // rank 1's first range of params
  const std::string edited = j.dump();
  std::ofstream(dir + "/manifest.json") << edited;
  const std::string cmd = std::string(STRATA_BINARY) +
                          " train --model tiny --layers 1 --dim 4 --heads 2 --max-seq 8 --vocab 256 --steps 3"
                          " --batch 2 --eval-every 0 --sample-every 0 --resume " + dir + " --run-dir " +
                          tmp.str() + "/new > " + tmp.str() + "/out.txt 2>&1";
  EXPECT_EQ(WEXITSTATUS(std::system(cmd.c_str())), 1);
  std::ifstream out(tmp.str() + "/out.txt");
  const std::string text((std::istreambuf_iterator<char>(out)), std::istreambuf_iterator<char>());
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
  EXPECT_NE(text.find(dir + "/manifest.json: state 'params' tensor 'wte' (256,4): no saved chunk holds "
                      "elements"), std::string::npos) << text;
  EXPECT_EQ(text.find("step 1"), std::string::npos) << "trained before refusing: " << text;
  std::ifstream after(dir + "/manifest.json");
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(after)), std::istreambuf_iterator<char>()), edited);
  EXPECT_EQ(fs::file_size(dir + "/shard-00001-of-00002.bin"), fs::file_size(kDir + "/shard-00001-of-00002.bin"));
}
