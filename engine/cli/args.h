// A small command-line parser: --name value, --name=value, repeatable options and flags, with
// errors that name the offending option.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace octodiff::cli {

class Args {
 public:
  // `flags` take no value; `repeatable` may be given several times; every other option once.
  Args(const std::vector<std::string>& argv, const std::set<std::string>& options,
       const std::set<std::string>& flags, const std::set<std::string>& repeatable = {});

  bool has(const std::string& name) const;
  bool flag(const std::string& name) const { return has(name); }
  std::optional<std::string> get(const std::string& name) const;
  std::string get_or(const std::string& name, const std::string& fallback) const;
  std::vector<std::string> all(const std::string& name) const;
  int get_int(const std::string& name, int fallback, int lo, int hi) const;
  int64_t get_int64(const std::string& name, int64_t fallback) const;
  double get_double(const std::string& name, double fallback) const;
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  std::map<std::string, std::vector<std::string>> values_;
  std::vector<std::string> positional_;
};

}  // namespace octodiff::cli
