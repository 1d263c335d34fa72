// octodiff-cli subcommands. Each returns the process exit code and throws octodiff::Error for
// problems the user must fix (main prints them).
#pragma once

#include <string>
#include <vector>

namespace octodiff::cli {

int run_generate(const std::vector<std::string>& args);
int run_inspect(const std::vector<std::string>& args);
int run_metadata(const std::vector<std::string>& args);
int run_convert(const std::vector<std::string>& args);  // convert_command.cpp
extern const char* kGenerateUsage;

}  // namespace octodiff::cli
