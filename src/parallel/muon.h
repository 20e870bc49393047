// Which parameters Muon updates, and which rank of a ZeRO group orthogonalises each.
//
// Muon takes the matrices of the blocks: attention q, k, v (GPT-2's fused c_attn is cut into
// its three (C, C) row blocks and each is orthogonalised alone, as Moonshot's Megatron
// implementation splits QKV: the three projections have their own spectra), the attention
// output, the MLP's (or SwiGLU's gate, up, down) matrices and each expert's matrices, one
// matrix per expert. AdamW keeps the rest: embeddings, an untied head, norms, biases and
// the routers (a router's rows are per-expert scores, not a linear map to orthogonalise).
//
// Under ZeRO 1-3 each matrix is orthogonalised whole by one rank of the data-parallel group,
// its owner: matrices go, largest Newton-Schulz cost first, to the rank with the least cost
// so far (ties: the lowest rank), so the owners are the same on every rank and the flops
// balance. Data_parallel.cc moves the matrices (docs/muon.md has the bytes).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/model_part.h"

namespace strata::parallel {

struct MuonMatrix {
  int64_t begin = 0;  // flat offset of element (0, 0)
  int rows = 0, cols = 0;  // this rank's
  int unit = 0;  // the table's unit (a pipeline stage's table keeps the one-process numbers)
  bool decay = true;
  // Under tensor parallelism: the axis along which the tp ranks' slices make the whole matrix
  // (0: rows, column-parallel; 1: columns, row-parallel; -1: this rank holds it whole), and
  // the ranks sharing it (each holds an equal slice, in tp-rank order).
  int tp_axis = -1, tp = 1;
  int64_t size() const { return int64_t(rows) * cols; }
  int64_t end() const { return begin + size(); }
  int full_rows() const { return tp_axis == 0 ? rows * tp : rows; }  // the whole matrix's
  int full_cols() const { return tp_axis == 1 ? cols * tp : cols; }
};

// Whether a view of the parameter table is (made of) Muon matrices.
bool is_muon_view(const model::ParamView& v);

// The Muon matrices of a parameter table, in flat order; with a tensor-parallel rank's layout
// (model/shard.h) and its group's size, each with the axis its slices split.
std::vector<MuonMatrix> muon_matrices(const std::vector<model::ParamView>& table);
std::vector<MuonMatrix> muon_matrices(const model::ModelPart& model);

// Owner of each matrix among `ranks` ranks (see above).
std::vector<int> muon_owners(const std::vector<MuonMatrix>& matrices, int ranks, int ns_steps);

// Elements of the table that Muon updates.
int64_t muon_numel(const std::vector<model::ParamView>& table);

// Elements of `matrices` inside [begin, end) of the flat space.
int64_t muon_elems_in(const std::vector<MuonMatrix>& matrices, int64_t begin, int64_t end);

// Bytes a rank's Muon step moves under ZeRO 1-3: each unit holding matrices is all-gathered
// and reduce-scattered whole, in fp32 (payload: 8 bytes per element of those units); 0 at
// stage 0, where every rank orthogonalises every matrix itself.
int64_t muon_bytes_per_step(const std::vector<MuonMatrix>& matrices,
                            const std::vector<std::pair<int64_t, int64_t>>& unit_ranges, int stage);

// Bytes of the tensor-parallel all-gathers a rank's Muon step makes: each matrix split over
// the tp group that the rank owns (muon_owners over `ranks`; ZeRO 0: ranks 1, all of them) is
// gathered whole, 4 bytes per element of the whole matrix.
int64_t muon_tp_bytes(const std::vector<MuonMatrix>& matrices, int ns_steps, int ranks, int rank);

// Newton-Schulz FLOPs of one step over `matrices` (cost::newton_schulz_flops each, on the whole
// matrix).
double muon_ns_flops(const std::vector<MuonMatrix>& matrices, int ns_steps);

}  // namespace strata::parallel
