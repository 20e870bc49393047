#include "parallel/overlap.h"

#include <algorithm>

namespace strata::parallel {

std::vector<Interval> merge_intervals(std::vector<Interval> v) {
  std::erase_if(v, [](const Interval& i) { return i.end_ns <= i.begin_ns; });
  std::sort(v.begin(), v.end(),
            [](const Interval& a, const Interval& b) { return a.begin_ns < b.begin_ns; });
  std::vector<Interval> out;
  for (const Interval& i : v) {
    if (!out.empty() && i.begin_ns <= out.back().end_ns)
      out.back().end_ns = std::max(out.back().end_ns, i.end_ns);
    else
      out.push_back(i);
  }
  return out;
}

int64_t intersection_ns(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  int64_t total = 0;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const int64_t lo = std::max(a[i].begin_ns, b[j].begin_ns);
    const int64_t hi = std::min(a[i].end_ns, b[j].end_ns);
    if (hi > lo) total += hi - lo;
    if (a[i].end_ns < b[j].end_ns)
      ++i;
    else
      ++j;
  }
  return total;
}

static int64_t length_ns(const std::vector<Interval>& v) {
  int64_t t = 0;
  for (const Interval& i : v) t += i.end_ns - i.begin_ns;
  return t;
}

OverlapStats overlap_intervals(const std::vector<Interval>& comm,
                               const std::vector<Interval>& compute) {
  const std::vector<Interval> c = merge_intervals(comm), k = merge_intervals(compute);
  OverlapStats s;
  s.comm_spans = int(comm.size());
  s.comm_ns = length_ns(c);
  s.compute_ns = length_ns(k);
  s.hidden_ns = intersection_ns(c, k);
  return s;
}

OverlapFilter gradient_comm_filter() {
  OverlapFilter f;
  f.comm_name_prefixes = {"allreduce ", "reducescatter"};
  return f;
}

OverlapStats overlap(const std::vector<TraceEvent>& events, const OverlapFilter& f) {
  std::vector<Interval> comm, compute;
  for (const TraceEvent& e : events) {
    const Interval iv{e.start_ns, e.start_ns + e.dur_ns};
    if (e.cat == f.comm_cat) {
      bool match = f.comm_name_prefixes.empty();
      for (const std::string& p : f.comm_name_prefixes)
        match = match || e.name.compare(0, p.size(), p) == 0;
      if (match) comm.push_back(iv);
    } else if (std::find(f.compute_cats.begin(), f.compute_cats.end(), e.cat) !=
               f.compute_cats.end()) {
      compute.push_back(iv);
    }
  }
  return overlap_intervals(comm, compute);
}

}  // namespace strata::parallel
