// octodiff-cli: the Qt-free command line over the engine.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/safetensors.h"

namespace {

int usage() {
  std::printf(
      "octodiff-cli %s — offline Stable Diffusion on the CPU\n\n"
      "usage:\n"
      "  octodiff-cli inspect FILE.safetensors   list the tensors in a weights file\n",
      OCTODIFF_VERSION);
  return 2;
}

int inspect(const std::vector<std::string>& args) {
  if (args.size() != 1) return usage();
  auto f = octodiff::SafetensorsFile::open(args[0]);
  for (const auto& [k, v] : f->metadata()) std::printf("# %s = %s\n", k.c_str(), v.c_str());
  for (const auto& t : f->tensors())
    std::printf("%-80s %-5s %s\n", t.name.c_str(), octodiff::dtype_name(t.dtype),
                octodiff::shape_str(t.shape).c_str());
  std::printf("%zu tensors\n", f->tensors().size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  std::string cmd = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  try {
    if (cmd == "inspect") return inspect(args);
    if (cmd == "--help" || cmd == "-h" || cmd == "help") {
      usage();
      return 0;
    }
    std::fprintf(stderr, "octodiff-cli: unknown command '%s'\n", cmd.c_str());
    return usage();
  } catch (const octodiff::Error& e) {
    std::fprintf(stderr, "octodiff-cli: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "octodiff-cli: internal error: %s\n", e.what());
    return 1;
  }
}
