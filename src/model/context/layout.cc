#include "model/context/layout.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "cost/shapes.h"
#include "model/parallel_rules.h"

namespace strata::model {

CpMode parse_cp_mode(const std::string& s) {
  const std::optional<CpMode> m = cp_mode_from_name(s);
  if (!m) fail_setting(setting("cp-mode"), " ", s, ": must be ring or ulysses");
  return *m;
}

CpChunks parse_cp_chunks(const std::string& s) {
  if (s == "zigzag") return CpChunks::zigzag;
  if (s == "contiguous") return CpChunks::contiguous;
  fail_setting(setting("cp-chunks"), " ", s, ": must be zigzag or contiguous");
}

const char* cp_chunks_name(CpChunks c) { return c == CpChunks::zigzag ? "zigzag" : "contiguous"; }

void check_context_parallel(const GPTConfig& cfg, int tp, int cp, const CpOptions& o, int seq) {
  STRATA_CHECK_SETTING(cp >= 1, setting("cp"), " must be at least 1 (got ", cp, ")");
  if (cp == 1) return;
  STRATA_CHECK_SETTING(cp <= seq, setting("cp"), " ", cp, " is larger than the sequence (",
                       setting("seq"), " ", seq, "): every cp rank needs tokens");
  const int parts = o.chunks == CpChunks::zigzag ? 2 * cp : cp;
  STRATA_CHECK_SETTING(
      seq % parts == 0, setting("seq"), " ", seq, " must be divisible by ",
      o.chunks == CpChunks::zigzag ? "2 x " : "", setting("cp"), " = ", parts,
      o.chunks == CpChunks::zigzag
          ? std::string(" (zigzag chunks: rank r holds chunks r and 2C-1-r)") +
                (seq % cp == 0
                     ? cat("; ", setting("cp-chunks"),
                           " contiguous runs it (attention work less even across the cp ranks)")
                     : "")
          : std::string(" (contiguous chunks)"));
  if (o.mode == CpMode::ulysses) {
    const int local_heads = cfg.heads / std::max(1, tp);
    STRATA_CHECK_SETTING(ulysses_splits_heads(cfg.heads, std::max(1, tp), cp), setting("cp-mode"),
                         " ulysses needs the heads",
                         tp > 1 ? cat(" per tensor-parallel rank (", cfg.heads, " / ",
                                      setting("tp"), " ", tp, " = ", local_heads, ")")
                                : cat(" (", cfg.heads, ")"),
                         " divisible by ", setting("cp"), " ", cp, "; use ", setting("cp-mode"),
                         " ring or a ", setting("cp"), " that divides them");
    // Key/value heads per tp rank (one replicated head when fewer than tp), split over cp or
    // each replicated on the cp ranks whose query heads share it.
    const int64_t kv = cost::tp_kv_heads(cfg.kv(), std::max(1, tp));
    STRATA_CHECK_SETTING(splits_kv_heads(kv, cp), setting("cp-mode"), " ulysses needs ",
                         setting("cp"), " ", cp, " to divide the key/value heads",
                         tp > 1 ? cat(" per tensor-parallel rank (", kv, ")") : cat(" (", kv, ")"),
                         " or be a multiple of them; use ", setting("cp-mode"), " ring or another ",
                         setting("cp"));
  }
}

}  // namespace strata::model
