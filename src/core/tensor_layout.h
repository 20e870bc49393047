// Where a rank's flat state lives in the global tensors of the model (PyTorch DCP's model).
//
// Terms. A *global tensor* has a name (GPT-2 naming, docs/model.md) and a shape that do not
// depend on the layout. A rank's flat buffers (parameters, gradients, optimizer moments) are
// one index space [0, Ψ_local). A *piece* is a box of one global tensor (offsets and extents
// per dimension) whose row-major flattening occupies [local_offset, local_offset + numel) of
// that flat space. One local tensor may be several pieces (a tensor-parallel qkv weight holds
// a block of q rows, one of k rows and one of v rows). A tensor that several ranks of a group
// hold identically (replicated over tp, say) marks all but one copy `primary = false`: saves
// write primary pieces only, loads fill every piece.
//
// Checkpoints save, per state and per rank, the intersection of the rank's write range with
// its primary pieces, as chunks (tensor, box, [flat_begin, flat_end) within the box's
// row-major order); loads map the saved chunks onto whatever pieces the new layout holds.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace strata {

struct TensorPiece {
  std::string name;              // global tensor name, e.g. "h.0.attn.c_attn.weight"
  Shape global_shape;            // shape of the whole tensor, the same in every layout
  std::vector<int64_t> offsets;  // per dimension: where the box starts in the global tensor
  Shape extents;                 // per dimension: the box's size
  int64_t local_offset = 0;      // element offset of the box in the rank's flat index space
  bool primary = true;           // false for a duplicate of a piece another rank writes
  int64_t numel() const { return strata::numel(extents); }
};

// A rank's whole flat space, in local_offset order, covering [0, Ψ_local) without gaps.
using TensorLayout = std::vector<TensorPiece>;

}  // namespace strata
