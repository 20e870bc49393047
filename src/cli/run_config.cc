#include "cli/run_config.h"

#include <toml++/toml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <deque>
#include <map>
#include <sstream>

#include "cli/command.h"
#include "cli/flags/family.h"
#include "core/error.h"
#include "core/files.h"

namespace strata::cli {
namespace {

// Commands' own sections: a config may hold them for another command.
bool is_command_section(const std::string& s) {
  return s == "plan" || s == "ppo" || s == "grpo" || s == "rloo" || s == "dpo" || s == "fed";
}

// The family section of a key some command's family declares, else the command's own.
std::string section_of_key(const std::string& key, const std::string& own) {
  const auto it = family_keys().find(key);
  return it == family_keys().end() ? own : it->second;
}

bool is_flag(const CLI::Option* o) { return o->get_expected_min() == 0; }
bool wants_integer(const CLI::Option* o) {
  const std::string t = o->get_type_name();
  return t.rfind("INT", 0) == 0 || t.rfind("UINT", 0) == 0;
}
bool wants_number(const CLI::Option* o) { return o->get_type_name().rfind("FLOAT", 0) == 0; }
bool takes_many(const CLI::Option* o) { return o->get_items_expected_max() > 1; }

// The shortest text that reads back to the same double ("0.0001", "1e-05", "inf").
std::string shortest(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

std::string toml_string(const std::string& s) {
  std::ostringstream o;
  o << '"';
  for (const unsigned char c : s) {
    if (c == '"' || c == '\\') {
      o << '\\' << c;
    } else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", c);
      o << b;
    } else {
      o << c;
    }
  }
  o << '"';
  return o.str();
}

// One option value as TOML: numbers bare (floats shortest), flags true/false, text quoted.
std::string toml_value(const CLI::Option* o, const std::string& text) {
  if (is_flag(o)) return text == "false" || text == "0" ? "false" : "true";
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  const bool numeric = !text.empty() && *end == '\0';
  if (wants_integer(o) && numeric && std::floor(v) == v && std::abs(v) < 9e15) return text;
  if (wants_number(o) && numeric) return shortest(v);
  // A text flag holding a plain integer ("zero = 1") reads back the same either way.
  if (numeric && text == std::to_string(static_cast<long long>(v)) && std::abs(v) < 9e15) return text;
  return toml_string(text);
}

// One key of a config: the flag, its values as text, and "FILE line N: key 'K'".
struct Item {
  std::string name, where;
  std::vector<std::string> inputs;
};

// Reads a run config into items for one command's app.
class TomlReader {
 public:
  TomlReader(const CLI::App* app, std::string own) : app_(app), own_(std::move(own)) {}

  std::vector<Item> read(const std::string& path) const {
    const std::string text = read_regular_file(path, "--config");
    toml::table root;
    try {
      root = toml::parse(text, path);
    } catch (const toml::parse_error& e) {
      fail(path, " line ", e.source().begin.line, ": not TOML: ", std::string(e.description()));
    }
    std::vector<std::string> lines;
    std::istringstream in(text);
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    std::vector<Item> items;
    for (auto&& [key, node] : root) {
      const std::string section(key.str());
      const auto line = key.source().begin.line;
      if (!node.is_table()) {
        const std::string want = section_of_key(section, own_);
        fail(path, " line ", line, ": key '", section, "' is outside a section (put it under [", want, "])");
      }
      const bool shared = std::count(family_sections().begin(), family_sections().end(), section) > 0;
      if (!shared && section != own_) {
        if (is_command_section(section)) continue;  // another command's keys
        fail(path, " line ", line, ": unknown section [", section, "]");
      }
      for (auto&& [k, v] : *node.as_table())
        read_key(path, lines, section, std::string(k.str()), k.source().begin.line, v, items);
    }
    return items;
  }

 private:
  void read_key(const std::string& path, const std::vector<std::string>& lines, const std::string& section,
                const std::string& key, uint32_t line, const toml::node& v, std::vector<Item>& items) const {
    const CLI::Option* o = app_->get_option_no_throw("--" + key);
    const std::string where = cat(path, " line ", line, ": key '", key, "'");
    if (!o || key == "config" || key == "print-config" || key == "help") {
      // Another command's flag in a shared section applies there; a name no command has is a typo.
      if (section != own_ && family_keys().count(key)) return;
      fail(where, " in [", section, "] is not a flag of this command");
    }
    const std::string want = section_of(*o, own_);
    if (want != section) {
      // A family's flag of that name, in its section: this command's own flag of the name means
      // something else (PPO's --top-k samples tokens; the model family's routes to experts).
      if (section_of_key(key, "") == section) return;
      fail(where, " belongs in [", want, "], not [", section, "]");
    }
    Item item;
    item.name = key;
    item.where = where;
    if (const toml::array* arr = v.as_array()) {
      if (!takes_many(o)) fail(where, " takes one value, not an array");
      for (const toml::node& e : *arr) item.inputs.push_back(scalar(where, lines, o, e));
    } else {
      item.inputs.push_back(scalar(where, lines, o, v));
    }
    items.push_back(std::move(item));
  }

  static std::string scalar(const std::string& where, const std::vector<std::string>& lines, const CLI::Option* o,
                            const toml::node& v) {
    if (is_flag(o)) {
      if (!v.is_boolean()) fail(where, " is a switch: true or false (got ", kind(v), ")");
      return *v.value<bool>() ? "true" : "false";
    }
    if (wants_integer(o)) {
      if (!v.is_integer()) fail(where, " must be an integer (got ", kind(v), ")");
      return std::to_string(*v.value<int64_t>());
    }
    if (wants_number(o)) {
      if (v.is_integer()) return std::to_string(*v.value<int64_t>());
      if (!v.is_floating_point()) fail(where, " must be a number (got ", kind(v), ")");
      // The text as typed, for the flag's own check (core/finite.h): toml++ reads 1e-400 as 0.
      return as_typed(lines, v);
    }
    // Text flags take any scalar as its text ("zero = 1", "mtbf = \"4h\""); the flag's own
    // check then judges it.
    if (v.is_string()) return *v.value<std::string>();
    if (v.is_integer()) return std::to_string(*v.value<int64_t>());
    if (v.is_floating_point()) return as_typed(lines, v);
    fail(where, " must be a value (got ", kind(v), ")");
  }

  // A float's text in the file, without TOML's digit separators (1_000.5), or its value's
  // shortest text where the source does not locate it.
  static std::string as_typed(const std::vector<std::string>& lines, const toml::node& v) {
    const toml::source_region& r = v.source();
    const std::string fallback = shortest(*v.value<double>());
    if (r.begin.line != r.end.line || r.begin.line == 0 || r.begin.line > lines.size() || r.end.column <= r.begin.column)
      return fallback;
    const std::string& line = lines[r.begin.line - 1];
    if (r.end.column - 1 > line.size()) return fallback;
    std::string text = line.substr(r.begin.column - 1, r.end.column - r.begin.column);
    text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
    return text;
  }

  static std::string kind(const toml::node& v) {
    if (v.is_string()) return "a string";
    if (v.is_integer()) return "an integer";
    if (v.is_floating_point()) return "a float";
    if (v.is_boolean()) return "a boolean";
    if (v.is_array()) return "an array";
    if (v.is_table()) return "a table";
    return "a date or time";
  }

  const CLI::App* app_;
  std::string own_;
};

}  // namespace

RunConfigFlags& add_run_config(CLI::App& app, const std::string& own_section) {
  static std::deque<RunConfigFlags> flags;  // one per command that reads configs, alive as long as main
  RunConfigFlags& f = flags.emplace_back();
  // Applied once parsing is complete. CLI11 checks required flags before that point, so the
  // check moves here, after the files: a config can give them too.
  for (CLI::Option* o : app.get_options())
    if (o->get_required()) {
      f.required.push_back(o);
      o->required(false);
    }
  app.parse_complete_callback([&app, &f, own_section] {
    apply_run_config(app, f, own_section);
    for (const CLI::Option* o : f.required)
      if (o->count() == 0) throw CLI::RequiredError(o->get_name());
  });
  app.add_option("--config", f.files, "Read flags from TOML run configs (docs/config.md); flags given here win, "
                                      "then the later file")
      ->check(plain_path(false));
  app.add_flag("--print-config", f.print, "Print the resolved run config as TOML and exit");
  return f;
}

void apply_run_config(CLI::App& app, const RunConfigFlags& f, const std::string& own_section) {
  const TomlReader reader(&app, own_section);
  for (auto file = f.files.rbegin(); file != f.files.rend(); ++file)
    for (const Item& item : reader.read(*file)) {
      CLI::Option* o = app.get_option("--" + item.name);
      if (o->count() > 0) continue;  // given on the command line (or by a later file)
      o->add_result(item.inputs);
      try {
        o->run_callback();
      } catch (const CLI::ParseError& e) {
        fail(item.where, ": ", e.what());
      }
    }
}

std::string resolved_config(const CLI::App& app, const std::string& own_section) {
  std::vector<std::string> order = family_sections();
  if (std::count(order.begin(), order.end(), own_section) == 0) order.push_back(own_section);
  std::map<std::string, std::string> body;
  for (const CLI::Option* o : app.get_options()) {
    if (o->get_lnames().empty()) continue;  // positional
    const std::string name = o->get_lnames()[0];
    if (name == "help" || name == "config" || name == "print-config") continue;  // not part of the run
    if (o->get_group() == kOldSpellings) continue;  // the new name carries the value
    std::string& out = body[section_of(*o, own_section)];
    if (o->count() > 0) {
      const std::vector<std::string>& r = o->results();
      if (takes_many(o)) {
        out += name + " = [";
        for (size_t i = 0; i < r.size(); ++i) out += (i ? ", " : "") + toml_value(o, r[i]);
        out += "]\n";
      } else {
        out += name + " = " + toml_value(o, r.empty() ? "true" : r.back()) + "\n";
      }
    } else if (is_flag(o)) {
      out += "# " + name + " = false\n";
    } else if (!o->get_default_str().empty()) {
      out += "# " + name + " = " + toml_value(o, o->get_default_str()) + "\n";
    } else {
      out += "# " + name + " (unset)\n";
    }
  }
  std::string text = "# strata " + app.get_name() + " run config: set keys, then defaults as comments\n";
  for (const std::string& s : order)
    if (body.count(s)) text += "\n[" + s + "]\n" + body[s];
  return text;
}

}  // namespace strata::cli
