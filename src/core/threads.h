// The CPU time of this process's threads, by name (Tracer::name_thread names them): what a
// run's background threads (checkpoint copies, replicas, communication progress, the data
// loader) cost next to its compute, in summary.json's "cpu_s".
#pragma once
#include <map>
#include <string>

namespace strata {

// Seconds of user + system time per thread name, summed over threads of one name, from
// /proc/self/task: the main thread is "main"; threads that already ended are "ended threads"
// (the process's total less the living threads'). Empty where /proc cannot be read.
std::map<std::string, double> cpu_seconds_by_thread();

}  // namespace strata
