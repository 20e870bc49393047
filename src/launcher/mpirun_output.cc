#include "launcher/mpirun_output.h"

#include <regex>

namespace strata::launcher {

bool mpirun_tag_prefix(const std::string& s) {
  static const std::regex head(R"(\[\d*|\[\d+,\d*|\[\d+,\d+\](.*))");
  std::smatch m;
  if (!std::regex_match(s, m, head)) return false;
  if (!m[1].matched) return true;
  const std::string rest = m[1].str();
  for (const std::string t : {"<stdout>:", "<stderr>:"})
    if (rest.size() < t.size() && t.compare(0, rest.size(), rest) == 0) return true;
  return false;
}

void MpirunOutput::feed(const char* data, size_t n, const Sink& sink) {
  raw_.append(data, n);
  parse(false, sink);
}

void MpirunOutput::finish(const Sink& sink) {
  parse(true, sink);
  for (auto& [rank, text] : partial_)
    if (!text.empty()) sink(rank, text, true);
  partial_.clear();
  current_ = -1;
}

// Walks raw_: text up to the next tag or newline belongs to the current rank; a tag switches
// the rank, a newline ends the line (the next one starts as mpirun's until a tag claims it).
// Unless at_end, a tag cut off at the end of what arrived is kept for the next bytes.
void MpirunOutput::parse(bool at_end, const Sink& sink) {
  static const std::regex tag(R"(\[\d+,(\d+)\]<std(?:out|err)>:?)");
  size_t pos = 0;
  while (pos < raw_.size()) {
    const size_t nl = raw_.find('\n', pos);
    const size_t line_end = nl == std::string::npos ? raw_.size() : nl;
    std::smatch m;
    if (std::regex_search(raw_.cbegin() + long(pos), raw_.cbegin() + long(line_end), m, tag)) {
      const size_t at = pos + size_t(m.position(0)), after = at + size_t(m.length(0));
      if (!at_end && after == raw_.size() && raw_.back() != ':') {  // its ':' may follow
        take(current_, raw_.substr(pos, at - pos), sink);
        pos = at;
        break;
      }
      take(current_, raw_.substr(pos, at - pos), sink);
      current_ = std::stoi(m[1].str());
      pos = after;
      continue;
    }
    if (nl != std::string::npos) {
      take(current_, raw_.substr(pos, nl + 1 - pos), sink);
      current_ = -1;
      pos = nl + 1;
      continue;
    }
    size_t keep = raw_.size();
    const size_t bracket = raw_.rfind('[');
    if (!at_end && bracket != std::string::npos && bracket >= pos && mpirun_tag_prefix(raw_.substr(bracket)))
      keep = bracket;
    take(current_, raw_.substr(pos, keep - pos), sink);
    pos = keep;
    break;
  }
  raw_.erase(0, pos);
}

// Adds text to the rank's unfinished line and hands out what is complete.
void MpirunOutput::take(int rank, const std::string& text, const Sink& sink) {
  if (text.empty()) return;
  std::string& line = partial_[rank];
  line += text;
  size_t start = 0, nl;
  while ((nl = line.find('\n', start)) != std::string::npos) {
    sink(rank, line.substr(start, nl - start), true);
    start = nl + 1;
  }
  line.erase(0, start);
  if (pass_progress_ && rank >= 0 && line.find('\r') != std::string::npos) {
    sink(rank, line, false);
    line.clear();
  }
}

}  // namespace strata::launcher
