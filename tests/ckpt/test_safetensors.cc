// safetensors export/import. The exported file is checked with a parser written here from the
// format's definition, independent of the library's reader.
#include <fstream>

#include "ckpt/safetensors.h"
#include "helpers.h"

using namespace ckpt_test;

namespace {

// A GPT-like table with a tied output embedding that views the same elements as wte.
std::vector<TensorInfo> tied_table() {
  return {{"wte", {8, 4}, 0}, {"wpe", {3, 4}, 32}, {"h.0.ln1.weight", {4}, 44},
          {"lm_head.weight", {8, 4}, 0}, {"ln_f.bias", {4}, 48}};
}

std::string save_run(const TempDir& tmp, bool bf16, int n = 2, int stage = 3) {
  FullStates f(52, 7, bf16);
  Group g(n);
  g.run([&](int r) {
    Checkpointer c(options(tmp.str(), r, n, &g));
    SaveRequest req = request(f, 7, r, n, stage);
    req.tensors = tied_table();
    c.save(req);
  });
  return tmp.str() + "/ckpt/step-000007";
}

}  // namespace

TEST(CkptSafetensors, ExportFollowsTheFormat) {
  TempDir tmp;
  const std::string dir = save_run(tmp, false);
  const std::string out = tmp.str() + "/model.safetensors";
  ExportResult r = export_safetensors(dir, out);
  EXPECT_EQ(r.tensors, 4);  // lm_head.weight aliases wte: exported once
  EXPECT_EQ(r.state, "params");
  ParsedSafetensors p = parse_safetensors(out);
  EXPECT_EQ(p.header_len % 8, 0u);
  EXPECT_EQ(p.header.at("__metadata__").at("step"), "7");
  EXPECT_FALSE(p.header.contains("lm_head.weight"));
  size_t total = 0;
  for (const TensorInfo& t : tied_table()) {
    if (t.name == "lm_head.weight") continue;
    const nlohmann::json& e = p.header.at(t.name);
    EXPECT_EQ(e.at("dtype"), "F32");
    EXPECT_EQ(e.at("shape").get<Shape>(), t.shape);
    const size_t b = e.at("data_offsets").at(0), en = e.at("data_offsets").at(1);
    ASSERT_EQ(en - b, size_t(numel(t.shape)) * 4);
    total += en - b;
    for (int64_t i = 0; i < numel(t.shape); ++i) {
      float v;
      std::memcpy(&v, p.data.data() + b + size_t(i) * 4, 4);
      ASSERT_EQ(v, value(0, 7, t.offset + i)) << t.name << "[" << i << "]";
    }
  }
  EXPECT_EQ(total, p.data.size());
}

TEST(CkptSafetensors, ExportsTheMasterCopyUnderBf16AndConverts) {
  TempDir tmp;
  const std::string dir = save_run(tmp, true, 3, 1);
  ExportResult r = export_safetensors(dir, tmp.str() + "/m.safetensors");
  EXPECT_EQ(r.state, "master");
  ParsedSafetensors p = parse_safetensors(tmp.str() + "/m.safetensors");
  EXPECT_EQ(p.header.at("wpe").at("dtype"), "F32");
  export_safetensors(dir, tmp.str() + "/b.safetensors", "BF16");
  ParsedSafetensors q = parse_safetensors(tmp.str() + "/b.safetensors");
  EXPECT_EQ(q.header.at("wpe").at("dtype"), "BF16");
  const size_t b = q.header.at("wpe").at("data_offsets").at(0);
  uint16_t h;
  std::memcpy(&h, q.data.data() + b + 2, 2);
  EXPECT_EQ(bf16_to_f32(h), value(3, 7, 33));  // master is state 3
  EXPECT_THROW(export_safetensors(dir, tmp.str() + "/x.safetensors", "F8"), Error);
}

TEST(CkptSafetensors, ImportRoundTripsAndRejectsOtherModels) {
  TempDir tmp;
  const std::string out = tmp.str() + "/model.safetensors";
  export_safetensors(save_run(tmp, false), out);
  std::vector<float> params(52, -1.f);
  EXPECT_EQ(import_safetensors(out, tied_table(), params.data(), 52), 4);
  for (const TensorInfo& t : tied_table())
    for (int64_t i = 0; i < numel(t.shape); ++i)
      ASSERT_EQ(params[size_t(t.offset + i)], value(0, 7, t.offset + i)) << t.name;

  std::vector<TensorInfo> other = tied_table();
  other[1].shape = {4, 3};
  try {
    import_safetensors(out, other, params.data(), 52);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'wpe' is (3,4), the model expects (4,3)"), std::string::npos) << e.what();
  }
  other = tied_table();
  other.push_back({"h.1.ln1.weight", {0}, 52});
  EXPECT_THROW(import_safetensors(out, other, params.data(), 52), Error);  // missing
  other = tied_table();
  other.erase(other.begin() + 2);
  EXPECT_THROW(import_safetensors(out, other, params.data(), 52), Error);  // unknown in file
}

TEST(CkptSafetensors, MalformedFilesAreRejectedWithTheReason) {
  TempDir tmp;
  const std::string good = tmp.str() + "/model.safetensors";
  export_safetensors(save_run(tmp, false), good);
  std::ifstream in(good, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto write = [&](const std::string& name, const std::string& data) {
    std::ofstream(tmp.str() + "/" + name, std::ios::binary) << data;
    return tmp.str() + "/" + name;
  };
  auto reason = [](const std::string& path) -> std::string {
    try {
      read_safetensors(path);
    } catch (const Error& e) {
      return e.what();
    }
    return "accepted";
  };
  EXPECT_NE(reason(write("short", "abc")).find("too short"), std::string::npos);
  EXPECT_NE(reason(write("trunc", bytes.substr(0, bytes.size() - 4))).find("outside the data section"),
            std::string::npos);
  std::string huge = bytes;
  huge[6] = 1;  // header length 2^48
  EXPECT_NE(reason(write("huge", huge)).find("does not fit"), std::string::npos);
  std::string notjson = bytes;
  notjson[8] = '[';
  EXPECT_NE(reason(write("notjson", notjson)).find("not a JSON object"), std::string::npos);
  EXPECT_NE(reason(write("trailing", bytes + "xxxx")).find("trailing"), std::string::npos);
  EXPECT_EQ(reason(good), "accepted");
}
