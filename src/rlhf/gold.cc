// The gold rule and preference pairs (gold.h).
#include "rlhf/gold.h"

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/files.h"
#include "core/rng.h"

namespace strata::rlhf {

GoldRule::GoldRule(uint64_t seed, int vocab) : seed_(seed), in_a_(size_t(vocab)) {
  for (int t = 0; t < vocab; ++t) in_a_[size_t(t)] = philox4x32(seed, 0x601D, uint64_t(t))[0] & 1;
}

double GoldRule::score(const int32_t* r, int R) const {
  if (R <= 0) return 0;
  double a = 0, rep = 0;
  for (int t = 0; t < R; ++t) {
    a += in_a(r[t]);
    if (t > 0) rep += r[t] == r[t - 1];
  }
  return a / R - (R > 1 ? rep / (R - 1) : 0.0);
}

PairSet PairSet::slice(int64_t begin, int64_t end) const {
  PairSet s;
  s.P = P;
  s.R = R;
  s.prompts.assign(prompts.begin() + begin * P, prompts.begin() + end * P);
  s.chosen.assign(chosen.begin() + begin * R, chosen.begin() + end * R);
  s.rejected.assign(rejected.begin() + begin * R, rejected.begin() + end * R);
  return s;
}

void synthetic_prompt(uint64_t seed, int64_t i, int P, int vocab, int32_t* out) {
  Rng rng(seed, 0x9A1E, uint64_t(i) * uint64_t(P));
  for (int t = 0; t < P; ++t) out[t] = int32_t(rng.below(uint64_t(vocab)));
}

PairSet read_pairs(const std::string& path, int vocab) {
  std::ifstream in(path);
  STRATA_CHECK(in, "--pairs ", path, ": cannot open");
  PairSet s;
  std::string line;
  int64_t lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    std::vector<int32_t> part[3];
    std::istringstream fields(line);
    std::string field;
    int n = 0;
    while (std::getline(fields, field, '|')) {
      STRATA_CHECK(n < 3, "--pairs ", path, ":", lineno, ": more than 3 '|'-separated fields");
      std::istringstream words(field);
      for (std::string w; words >> w;) {
        size_t used = 0;
        long long v = -1;
        try {
          v = std::stoll(w, &used);
        } catch (...) {
          used = 0;
        }
        STRATA_CHECK(used == w.size() && v >= 0 && v < vocab, "--pairs ", path, ":", lineno,
                     ": ", quote_input(w), " is not a token id in [0, ", vocab, ")");
        part[n].push_back(int32_t(v));
      }
      ++n;
    }
    STRATA_CHECK(n == 3 && !part[0].empty() && !part[1].empty() && !part[2].empty(), "--pairs ",
                 path, ":", lineno, ": expected 'PROMPT | CHOSEN | REJECTED' with tokens in each");
    STRATA_CHECK(part[1].size() == part[2].size(), "--pairs ", path, ":", lineno, ": chosen has ",
                 part[1].size(), " tokens, rejected ", part[2].size());
    if (s.P == 0) {
      s.P = int(part[0].size());
      s.R = int(part[1].size());
    }
    STRATA_CHECK(int(part[0].size()) == s.P && int(part[1].size()) == s.R, "--pairs ", path, ":",
                 lineno, ": prompt/response of ", part[0].size(), "/", part[1].size(),
                 " tokens, earlier lines have ", s.P, "/", s.R);
    s.prompts.insert(s.prompts.end(), part[0].begin(), part[0].end());
    s.chosen.insert(s.chosen.end(), part[1].begin(), part[1].end());
    s.rejected.insert(s.rejected.end(), part[2].begin(), part[2].end());
  }
  STRATA_CHECK(s.size() > 0, "--pairs ", path, ": no pairs in the file");
  return s;
}

void write_pairs(const std::string& path, const PairSet& s) {
  std::ostringstream out;
  for (int64_t i = 0; i < s.size(); ++i) {
    auto put = [&](const std::vector<int32_t>& v, int n) {
      for (int t = 0; t < n; ++t) out << (t ? " " : "") << v[size_t(i * n + t)];
    };
    put(s.prompts, s.P);
    out << " | ";
    put(s.chosen, s.R);
    out << " | ";
    put(s.rejected, s.R);
    out << "\n";
  }
  atomic_write_file(path, out.str());  // a device or FIFO target is refused, /dev/full fails
}

}  // namespace strata::rlhf
