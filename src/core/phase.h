// What this process is doing right now (step, layer, phase). The training loop sets it;
// the communicator's flight recorder copies it into each operation it records, so a hang
// report can say "rank 3 is still in backward of layer 2". Process-wide: the communication
// thread reads what the compute thread set.
#pragma once
#include <atomic>
#include <cstdint>

namespace strata {

enum class PhaseKind : uint8_t { idle, data, forward, backward, optimizer, checkpoint, eval, other };

inline const char* phase_name(PhaseKind p) {
  switch (p) {
    case PhaseKind::idle: return "idle";
    case PhaseKind::data: return "data loading";
    case PhaseKind::forward: return "forward";
    case PhaseKind::backward: return "backward";
    case PhaseKind::optimizer: return "optimizer";
    case PhaseKind::checkpoint: return "checkpoint save";
    case PhaseKind::eval: return "eval";
    case PhaseKind::other: return "other";
  }
  return "?";
}

struct PhaseSnapshot {
  int64_t step = -1;
  int32_t layer = -1;  // -1: not inside a layer
  PhaseKind kind = PhaseKind::idle;
};

class PhaseState {
 public:
  void set(int64_t step, int32_t layer, PhaseKind kind) {
    step_.store(step, std::memory_order_relaxed);
    layer_.store(layer, std::memory_order_relaxed);
    kind_.store(kind, std::memory_order_release);
  }
  void set_layer(int32_t layer) { layer_.store(layer, std::memory_order_relaxed); }
  void set_kind(PhaseKind kind) { kind_.store(kind, std::memory_order_release); }
  PhaseSnapshot get() const {
    return {step_.load(std::memory_order_relaxed), layer_.load(std::memory_order_relaxed),
            kind_.load(std::memory_order_acquire)};
  }

 private:
  std::atomic<int64_t> step_{-1};
  std::atomic<int32_t> layer_{-1};
  std::atomic<PhaseKind> kind_{PhaseKind::idle};
};

inline PhaseState& current_phase() {
  static PhaseState state;
  return state;
}

// Sets the phase kind (and optionally layer) for a scope, restoring the previous on exit.
class PhaseScope {
 public:
  explicit PhaseScope(PhaseKind kind, int32_t layer = -1) : prev_(current_phase().get()) {
    current_phase().set(prev_.step, layer, kind);
  }
  ~PhaseScope() { current_phase().set(prev_.step, prev_.layer, prev_.kind); }
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  PhaseSnapshot prev_;
};

}  // namespace strata
