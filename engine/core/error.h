// Errors: everything the engine refuses is an octodiff::Error with a message a user can act on.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace octodiff {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Thrown from inside a computation when the user cancelled it; never an error to report.
class Cancelled : public Error {
 public:
  Cancelled() : Error("cancelled") {}
};

// Concatenates anything streamable: fail(cat("tensor '", name, "' has shape ", s)).
template <typename... Args>
std::string cat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

template <typename... Args>
[[noreturn]] void fail(const Args&... args) {
  throw Error(cat(args...));
}

}  // namespace octodiff
