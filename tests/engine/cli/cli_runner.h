// Runs the real octodiff-cli binary in a folder and captures what it printed (the CLI tests).
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "io/files.h"
#include "test_support.h"

namespace octodiff::test {

struct CliRun {
  int code = -1;    // exit status (-1: did not exit normally)
  std::string out;  // stdout
  std::string err;  // stderr
};

// The text as one single-quoted shell word.
inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// `PROGRAM ARGS…` run in `cwd` (stderr goes through cwd/stderr.txt).
inline CliRun run_program(const std::string& program, const std::vector<std::string>& args,
                          const std::filesystem::path& cwd) {
  std::string cmd = "cd " + shell_quote(cwd.string()) + " && " + shell_quote(program);
  for (const auto& a : args) cmd += " " + shell_quote(a);
  const std::filesystem::path err_file = cwd / "stderr.txt";
  cmd += " 2>" + shell_quote(err_file.string());
  CliRun r;
  FILE* p = popen(cmd.c_str(), "r");
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.err = read_text_file(err_file);
  return r;
}

// `octodiff-cli ARGS…` run in `cwd`.
inline CliRun run_cli(const std::vector<std::string>& args, const std::filesystem::path& cwd) {
  return run_program(OCTODIFF_CLI_PATH, args, cwd);
}

// `generate --model <tiny-sd>` followed by args.
inline std::vector<std::string> tiny_generate(std::vector<std::string> args) {
  args.insert(args.begin(), {"generate", "--model", tiny_sd_dir().string()});
  return args;
}

}  // namespace octodiff::test
