// Hugging Face safetensors interop: export a checkpoint's model parameters, import weights.
//
// Format: an 8-byte little-endian header length H, then H bytes of JSON
//   {"__metadata__": {...strings...}, "<name>": {"dtype": "F32", "shape": [..],
//    "data_offsets": [begin, end]}, ...}
// then the raw little-endian data; offsets are relative to the end of the header. strata pads
// the header with spaces to a multiple of 8 so the data is aligned.
//
// Tensor names are those of the model's parameter table ("wte", "wpe", "h.0.ln1.weight", ...).
// The tied input/output embedding is one view of the flat buffer, exported once; a table
// that names the same elements twice is exported once under its first name.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ckpt/manifest.h"

namespace strata::ckpt {

struct SafetensorsTensor {
  std::string name;
  std::string dtype;   // "F32", "BF16", "F16", "F64", "I32", "I64", "U8", ...
  Shape shape;
  int64_t begin = 0;   // byte offsets relative to the data section
  int64_t end = 0;
};

struct SafetensorsFile {
  std::string path;
  int64_t header_bytes = 0;
  int64_t file_bytes = 0;
  std::vector<SafetensorsTensor> tensors;  // in data order
  nlohmann::json metadata = nlohmann::json::object();
  int64_t data_start() const { return 8 + header_bytes; }
};

// Parses and validates the header: length within the file, JSON, known dtypes, shapes that
// match their byte counts, offsets inside the file and not overlapping. Throws naming the
// file and the problem.
SafetensorsFile read_safetensors(const std::string& path);

// A tensor of a file being written: its data follows the previous tensor's.
struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // "F32" or "BF16"
  Shape shape;
  int64_t bytes = 0;
};

// The dtype an export of state `st` of checkpoint `dir` writes: `dtype` "" keeps the saved
// one, else "F32" or "BF16" (either case). Throws for another name or a state of another dtype.
DType export_dtype(const StateInfo& st, const std::string& dtype, const std::string& dir);

// The first bytes of a safetensors file holding `tensors` in this order: the 8-byte length
// and the JSON header, padded with spaces so the data starts 8-byte aligned.
std::string safetensors_header(const std::vector<SafetensorsEntry>& tensors, const nlohmann::json& metadata);

struct ExportResult {
  std::string source_dir;  // the checkpoint exported
  std::string state;       // "master" or "params"
  int tensors = 0;
  int64_t bytes = 0;       // of the output file
};

// Writes the parameters of a checkpoint (the fp32 master copy when saved, else "params") as
// a safetensors file, atomically. `dir` is a step directory. dtype: "" keeps the saved one,
// or "F32" / "BF16".
ExportResult export_safetensors(const std::string& dir, const std::string& out_path,
                                const std::string& dtype = "");

// The elements of tensor `s` of file `f` (read_safetensors) as fp32: F32, BF16 and F16 are
// accepted; another dtype or a failed read throws naming the file and the tensor.
std::vector<float> read_tensor_f32(const SafetensorsFile& f, const SafetensorsTensor& s);

// Fills the flat fp32 parameter buffer (numel elements laid out by `table`) from a
// safetensors file: every table tensor must be present with the same shape; F32, BF16 and F16
// are accepted. A file tensor the table does not know is an error (a different model).
// Returns the number of tensors loaded.
int import_safetensors(const std::string& path, const std::vector<TensorInfo>& table,
                       float* params, int64_t numel);

}  // namespace strata::ckpt
