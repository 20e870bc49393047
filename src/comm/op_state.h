// The life of one recorded communication operation, as the flight recorder writes it
// (comm/flight_recorder.h) and the hang doctor reads it back (diag/flight_dump.h):
// scheduled (queued on the group) -> started (on the wire) -> completed | failed.
#pragma once
#include <cstdint>
#include <optional>
#include <string_view>

namespace strata::comm {

enum class OpState : uint8_t { scheduled, started, completed, failed };

inline constexpr OpState kOpStates[] = {OpState::scheduled, OpState::started, OpState::completed,
                                        OpState::failed};

// The name a dump carries: "scheduled", "started", "completed", "failed".
inline const char* op_state_name(OpState s) {
  switch (s) {
    case OpState::scheduled: return "scheduled";
    case OpState::started: return "started";
    case OpState::completed: return "completed";
    case OpState::failed: return "failed";
  }
  return "?";
}

// The state named `name`, or nothing for any other text.
inline std::optional<OpState> parse_op_state(std::string_view name) {
  for (OpState s : kOpStates)
    if (name == op_state_name(s)) return s;
  return std::nullopt;
}

}  // namespace strata::comm
