// What each Hugging Face architecture contributes to ckpt/hf.h (hf_gpt2.cc, hf_llama.cc):
// config.json in and out, and the name of every tensor. The directory, index and safetensors
// handling, the checks and the copies are shared (hf.cc).
#pragma once
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/hf.h"
#include "nlohmann/json.hpp"

namespace strata::ckpt::hf {

// One tensor: strata's name, Hugging Face's, whether HF stores the transpose (Conv1D), and
// whether its rows are the vocabulary (strata pads them; HF has vocab_size rows).
struct Name {
  std::string strata, hf;
  bool transpose = false;
  bool vocab_rows = false;
};

// Collects the problems of a config.json, one line each, for one Error at the end.
struct Problems {
  std::string path;  // "--init-from DIR/config.json"
  std::vector<std::string> lines;
  template <typename... A>
  void add(A&&... parts) {
    lines.push_back(cat(path, ": ", std::forward<A>(parts)...));
  }
  // An integer key >= 1 (0 and a problem when absent or not one).
  int64_t positive(const nlohmann::json& c, const char* key);
  // The integer keys (each >= 1) into the fields of `m` they name, with model_type `arch`.
  HfModel sizes(const nlohmann::json& c, const char* arch,
                std::initializer_list<std::pair<const char*, int64_t HfModel::*>> keys);
  // A number key, or `fallback` when absent.
  double number(const nlohmann::json& c, const char* key, double fallback);
  // A string key, or `fallback` when absent.
  std::string text(const nlohmann::json& c, const char* key, const std::string& fallback);
  // A key that must be absent or hold `want` (as JSON: true, false, null, "silu", ...).
  void must_be(const nlohmann::json& c, const char* key, const nlohmann::json& want,
               const std::string& why);
  void throw_if_any() const;
};

HfModel gpt2_model(const nlohmann::json& config, Problems& p);
HfModel llama_model(const nlohmann::json& config, Problems& p);
nlohmann::json gpt2_config(const HfModel& m);
nlohmann::json llama_config(const HfModel& m);
std::vector<Name> gpt2_names(const HfModel& m);
std::vector<Name> llama_names(const HfModel& m);
// A file's tensor name as *_names spells it, or "" for one to skip (attention-mask and
// rotary buffers of older files, a tied head stored anyway).
std::string gpt2_key(const std::string& file_name, const HfModel& m);
std::string llama_key(const std::string& file_name, const HfModel& m);

// The shortest decimal that reads back as the same float (1e-05, not 9.99999974737875e-06):
// strata keeps eps and theta as floats, config.json as the numbers people write.
double float_decimal(double v);

}  // namespace strata::ckpt::hf
