// The pipeline bubble in closed form: the share of a step a stage idles when P stages run M
// micro-batches of equal cost, and GPipe's makespan. parallel/pipeline/schedule.h names them
// per schedule (bubble_formula), parallel/pipeline/predict.h simulates the schedules that have
// no closed form (unequal stages, transfers) and checks itself against these.
//   gpipe, 1f1b    (P−1)/(M+P−1)
//   interleaved    (P−1)/(V·M+P−1)       V chunks per stage
//   zero-bubble    (P−1)/(3M+P−1)        ZB-H1 with F = B = W: the bubble is
//                                        (P−1)(F + B − W) against 3M units of work
//   gpipe makespan (M+P−1)(f+b) + 2(P−1)·c: the first micro-batch's forward and the last
//                  one's backward cross P−1 links of c seconds each
#pragma once

namespace strata::cost {

// gpipe and 1f1b (virt = 1), interleaved (virt chunks per stage).
inline double pipeline_bubble(int stages, int micro, int virt = 1) {
  const double P = stages, M = micro, V = virt;
  return (P - 1) / (V * M + P - 1);
}

inline double zero_bubble_bubble(int stages, int micro) {
  const double P = stages, M = micro;
  return (P - 1) / (3 * M + P - 1);
}

inline double gpipe_makespan(int stages, int micro, double f, double b, double transfer) {
  return (micro + stages - 1) * (f + b) + 2.0 * (stages - 1) * transfer;
}

}  // namespace strata::cost
