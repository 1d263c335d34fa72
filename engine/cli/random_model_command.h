// `octodiff-cli make-random-model`: writes a full-size SD 1.5 / 2.1 / XL model with deterministic random
// weights (benchmarks and load tests without downloading real weights).
#pragma once

#include <string>
#include <vector>

namespace octodiff {

// The subcommand's usage text (one entry of octodiff-cli's usage, plus option details).
const char* make_random_model_usage();

// args: everything after "make-random-model". Returns the process exit code (0 ok, 2 bad usage);
// failures while writing throw octodiff::Error.
int run_make_random_model(const std::vector<std::string>& args);

}  // namespace octodiff
