// strata.ckpt's C++ side: the listing `strata ckpt ls` prints, random access to one
// checkpoint's global tensors (only the byte ranges that hold a tensor are read, the blocks
// they touch verified), and the Hugging Face (GPT-2, Llama) export. Errors are strata::Error, which the
// module turns into ValueError.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <filesystem>

#include "bindings.h"
#include "ckpt/fsutil.h"
#include "ckpt/hf.h"
#include "ckpt/listing.h"
#include "ckpt/load.h"

namespace py = pybind11;

namespace strata::python {
namespace {

const char* dtype_key(DType t) { return t == DType::bf16 ? "bf16" : t == DType::f32 ? "f32" : dtype_name(t); }

py::dict entry_dict(const ckpt::CheckpointEntry& e) {
  py::dict d;
  d["step"] = e.step;
  d["dir"] = e.dir;
  d["name"] = e.name;
  d["bytes"] = e.bytes;
  d["shards"] = e.shards;
  d["latest"] = e.latest;
  d["status"] = e.ok ? "ok" : "damaged";
  d["problem"] = e.problem.empty() ? py::object(py::none()) : py::object(py::str(e.problem));
  if (e.ok) {
    const ckpt::TrainState& t = e.train;
    d["world"] = t.world, d["tp"] = t.tp, d["dp"] = e.dp(), d["pp"] = t.pp, d["cp"] = t.cp, d["ep"] = t.ep;
    d["zero"] = t.zero_stage;
    d["precision"] = t.precision;
    d["version"] = e.version;
  } else {
    for (const char* k : {"world", "tp", "dp", "pp", "cp", "ep", "zero", "precision", "version"}) d[k] = py::none();
  }
  return d;
}

py::dict list_checkpoints(const std::string& path) {
  const ckpt::CheckpointListing l = ckpt::list_checkpoints(path);
  py::dict out;
  out["root"] = l.root;
  out["latest"] = l.latest.empty() ? py::object(py::none()) : py::object(py::str(l.latest));
  out["latest_error"] = l.latest_error.empty() ? py::object(py::none()) : py::object(py::str(l.latest_error));
  py::list entries;
  for (const ckpt::CheckpointEntry& e : l.entries) entries.append(entry_dict(e));
  out["checkpoints"] = entries;
  py::list incomplete;
  for (const ckpt::IncompleteSave& s : l.incomplete) incomplete.append(py::make_tuple(s.name, s.bytes));
  out["incomplete"] = incomplete;
  return out;
}

// The step directory a path names: itself, or the newest committed checkpoint of a run or
// ckpt directory (also one newer than the step `latest` names, as a resume takes it).
std::string step_dir(const std::string& path) {
  const ckpt::CkptLocation loc = ckpt::locate(path);
  if (!loc.step_dir.empty()) return loc.step_dir;
  for (const std::string& d : ckpt::candidate_dirs(loc.root, nullptr))
    if (std::error_code ec; std::filesystem::is_directory(d, ec)) return d;
  fail(path, ": no checkpoints in ", loc.root);
}

// One checkpoint directory, its manifest read once: reads of several tensors share it and the
// shard files it has opened.
class Checkpoint {
 public:
  explicit Checkpoint(const std::string& path) : reader_(step_dir(path)) {}
  const std::string& dir() const { return reader_.dir(); }
  int64_t step() const { return reader_.manifest().step; }
  int64_t bytes_read() const { return reader_.bytes_read(); }
  std::string model_state() const { return ckpt::model_state(reader_.manifest(), dir()).name; }
  py::list tensors() const {
    py::list out;
    for (const ckpt::TensorInfo& t : reader_.manifest().tensors)
      out.append(py::make_tuple(t.name, py::tuple(py::cast(t.shape))));
    return out;
  }
  py::list states() const {
    py::list out;
    for (const ckpt::StateInfo& s : reader_.manifest().states) out.append(py::make_tuple(s.name, dtype_key(s.dtype)));
    return out;
  }
  // The global tensor `name` of `state` ("" = the model's weights) as f32 (a float32 array) or
  // bf16 (a uint16 array of the bit patterns); dtype "" keeps the saved one.
  py::array read(const std::string& name, const std::string& state, const std::string& dtype) {
    const ckpt::Manifest& m = reader_.manifest();
    const int index = m.find_tensor(name);
    if (index < 0) {
      std::string some;
      for (size_t i = 0; i < m.tensors.size() && i < 4; ++i) some += (i ? ", " : "") + m.tensors[i].name;
      fail(dir(), ": no tensor '", name, "' (it has ", m.tensors.size(), ": ", some, m.tensors.size() > 4 ? ", ..." : "",
           ")");
    }
    const std::string st = state.empty() ? model_state() : state;
    const ckpt::StateInfo* info = m.find_state(st);
    if (!info) {
      std::string saved;
      for (const ckpt::StateInfo& s : m.states) saved += (saved.empty() ? "" : ", ") + s.name;
      fail(dir(), ": state '", st, "' was not saved (saved: ", saved, ")");
    }
    DType as = info->dtype;
    if (dtype == "f32" || dtype == "float32") as = DType::f32;
    else if (dtype == "bf16" || dtype == "bfloat16") as = DType::bf16;
    else if (!dtype.empty()) fail("dtype '", dtype, "': expected f32 or bf16");
    const ckpt::TensorInfo& t = m.tensors[size_t(index)];
    std::vector<py::ssize_t> shape(t.shape.begin(), t.shape.end());
    py::array out = as == DType::f32 ? py::array(py::dtype::of<float>(), shape) : py::array(py::dtype::of<uint16_t>(), shape);
    void* data = out.mutable_data();
    {
      py::gil_scoped_release unlocked;
      reader_.read_tensor(st, t, as, data);
    }
    return out;
  }

 private:
  ckpt::CheckpointReader reader_;
};

py::dict export_hf(const std::string& path, const std::string& out_dir, const std::string& dtype) {
  const std::string dir = step_dir(path);
  ckpt::HfExportResult r;
  {
    py::gil_scoped_release unlocked;
    r = ckpt::export_hf(dir, out_dir, dtype, "out_dir");
  }
  py::dict d;
  d["source_dir"] = r.source_dir, d["state"] = r.state, d["tensors"] = r.tensors, d["bytes"] = r.bytes;
  d["arch"] = r.arch;
  d["out_dir"] = out_dir;
  return d;
}

}  // namespace

void bind_ckpt(py::module_& m) {
  m.def("ckpt_list", &list_checkpoints, py::arg("path"));
  m.def("ckpt_step_dir", &step_dir, py::arg("path"));
  m.def("ckpt_export_hf", &export_hf, py::arg("path"), py::arg("out_dir"), py::arg("dtype") = "");
  py::class_<Checkpoint>(m, "Checkpoint")
      .def(py::init<const std::string&>(), py::arg("path"))
      .def_property_readonly("dir", &Checkpoint::dir)
      .def_property_readonly("step", &Checkpoint::step)
      .def_property_readonly("bytes_read", &Checkpoint::bytes_read)
      .def("model_state", &Checkpoint::model_state)
      .def("tensors", &Checkpoint::tensors)
      .def("states", &Checkpoint::states)
      .def("read", &Checkpoint::read, py::arg("name"), py::arg("state") = "", py::arg("dtype") = "");
}

}  // namespace strata::python
