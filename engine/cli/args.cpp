#include "args.h"

#include <cmath>
#include <cstdlib>

#include "core/error.h"

namespace octodiff::cli {

Args::Args(const std::vector<std::string>& argv, const std::set<std::string>& options,
           const std::set<std::string>& flags, const std::set<std::string>& repeatable) {
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a.rfind("--", 0) != 0 || a == "--") {
      positional_.push_back(a);
      continue;
    }
    std::string name = a.substr(2), value;
    bool has_value = false;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    if (flags.count(name)) {
      if (has_value) fail("option --", name, " takes no value");
      values_[name].push_back("1");
      continue;
    }
    if (!options.count(name) && !repeatable.count(name)) fail("unknown option --", name, " (see --help)");
    if (!has_value) {
      if (i + 1 >= argv.size()) fail("option --", name, " needs a value");
      value = argv[++i];
    }
    if (!repeatable.count(name) && values_.count(name)) fail("option --", name, " given more than once");
    values_[name].push_back(value);
  }
}

bool Args::has(const std::string& name) const { return values_.count(name) != 0; }

std::optional<std::string> Args::get(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second.back();
}

std::string Args::get_or(const std::string& name, const std::string& fallback) const {
  return get(name).value_or(fallback);
}

std::vector<std::string> Args::all(const std::string& name) const {
  auto it = values_.find(name);
  return it == values_.end() ? std::vector<std::string>{} : it->second;
}

int64_t Args::get_int64(const std::string& name, int64_t fallback) const {
  auto v = get(name);
  if (!v) return fallback;
  char* end = nullptr;
  errno = 0;
  long long x = std::strtoll(v->c_str(), &end, 10);
  if (v->empty() || *end || errno == ERANGE) fail("--", name, " expects an integer, got '", *v, "'");
  return x;
}

int Args::get_int(const std::string& name, int fallback, int lo, int hi) const {
  if (!has(name)) return fallback;
  int64_t x = get_int64(name, fallback);
  if (x < lo || x > hi) fail("--", name, " must be between ", lo, " and ", hi, ", got ", x);
  return static_cast<int>(x);
}

double Args::get_double(const std::string& name, double fallback) const {
  auto v = get(name);
  if (!v) return fallback;
  char* end = nullptr;
  double x = std::strtod(v->c_str(), &end);
  if (v->empty() || *end || !std::isfinite(x)) fail("--", name, " expects a number, got '", *v, "'");
  return x;
}

}  // namespace octodiff::cli
