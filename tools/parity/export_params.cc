// Writes a GPT's initial parameters, as strata initialises them, in the tensor container
// that tools/parity/gen_reference.py reads:
//   "STRP" | u32 version 1 | u64 header bytes | JSON header | raw little-endian data
// The header holds {"config": {...}, "seed": S, "tensors": [{"name", "dtype", "shape",
// "offset"}]} with byte offsets into the data; one tensor per entry of the parameter table.
//
//   parity_export --layers 2 --dim 64 --heads 4 --seq 32 --vocab 64 --seed 1 --out FILE
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>

#include "core/error.h"
#include "model/gpt.h"
#include "nlohmann/json.hpp"

using strata::model::GPT;
using strata::model::GPTConfig;

static int run(int argc, char** argv) {
  GPTConfig c{strata::model::Arch::gpt2, 2, 64, 4, 0, 0, 32, 64, 64, 1e-5f, 10000.0f, true, {}, {}};
  uint64_t seed = 1;
  std::string out;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    STRATA_CHECK(i + 1 < argc, "flag ", a, " needs a value");
    const std::string v = argv[++i];
    if (a == "--layers")
      c.layers = std::stoi(v);
    else if (a == "--dim")
      c.dim = std::stoi(v);
    else if (a == "--heads")
      c.heads = std::stoi(v);
    else if (a == "--seq")
      c.seq = std::stoi(v);
    else if (a == "--vocab")
      c.vocab = c.padded_vocab = std::stoi(v);
    else if (a == "--padded-vocab")
      c.padded_vocab = std::stoi(v);
    else if (a == "--seed")
      seed = std::stoull(v);
    else if (a == "--out")
      out = v;
    else
      strata::fail("unknown flag ", a);
  }
  STRATA_CHECK(!out.empty(), "--out FILE is required");
  GPT model(c, 1);
  model.init(seed);
  nlohmann::json h;
  h["config"] = {{"layers", c.layers}, {"dim", c.dim},     {"heads", c.heads},
                 {"seq", c.seq},       {"vocab", c.vocab}, {"padded_vocab", c.padded_vocab}};
  h["seed"] = seed;
  h["tensors"] = nlohmann::json::array();
  for (const auto& v : model.param_table())
    h["tensors"].push_back(
        {{"name", v.name}, {"dtype", "f32"}, {"shape", v.shape}, {"offset", v.offset * 4}});
  const std::string text = h.dump();
  std::ofstream f(out, std::ios::binary);
  STRATA_CHECK(f, "cannot write ", out);
  const uint32_t version = 1;
  const uint64_t len = text.size();
  f.write("STRP", 4);
  f.write(reinterpret_cast<const char*>(&version), 4);
  f.write(reinterpret_cast<const char*>(&len), 8);
  f.write(text.data(), std::streamsize(len));
  f.write(reinterpret_cast<const char*>(model.params()), std::streamsize(model.num_params() * 4));
  STRATA_CHECK(f.good(), "write to ", out, " failed");
  return 0;
}

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "parity_export: error: " << e.what() << "\n";
    return 1;
  }
}
