// octodiff-cli: the Qt-free command line over the engine.
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/random_model_command.h"
#include "commands.h"
#include "core/error.h"
#include "io/png.h"
#include "io/flax_msgpack.h"
#include "io/safetensors.h"
#include "pipeline/metadata.h"

namespace octodiff::cli {

int run_inspect(const std::vector<std::string>& args) {
  if (args.size() != 1) fail("usage: octodiff-cli inspect FILE.safetensors|FILE.msgpack");
  const bool flax = std::filesystem::path(args[0]).extension() == ".msgpack";
  auto f = flax ? open_flax_msgpack(args[0]) : SafetensorsFile::open(args[0]);
  for (const auto& [k, v] : f->metadata()) std::printf("# %s = %s\n", k.c_str(), v.c_str());
  for (const auto& t : f->tensors())
    std::printf("%-80s %-5s %s\n", t.name.c_str(), dtype_name(t.dtype), shape_str(t.shape).c_str());
  std::printf("%zu tensors\n", f->tensors().size());
  return 0;
}

int run_metadata(const std::vector<std::string>& args) {
  if (args.size() != 1) fail("usage: octodiff-cli metadata IMAGE.png");
  auto texts = read_png_text(args[0]);
  if (texts.empty()) std::printf("(no text chunks)\n");
  for (const auto& t : texts) std::printf("[%s]\n%s\n\n", t.key.c_str(), t.text.c_str());
  const auto m = parse_png_metadata(texts);
  if (m && !m->not_applied.empty()) {  // another tool's image: what a run of these settings here differs in
    std::printf("[not applied here]\n");
    for (const std::string& n : m->not_applied) std::printf("- %s\n", n.c_str());
  }
  return m ? 0 : 1;
}

}  // namespace octodiff::cli

namespace {

int usage(FILE* out) {
  std::fprintf(out,
               "octodiff-cli %s — offline Stable Diffusion on the CPU, the way diffusers' Flax pipeline runs it\n\n"
               "usage:\n"
               "  octodiff-cli generate [options]          text to image (see: generate --help)\n"
               "  octodiff-cli metadata IMAGE.png          print the settings stored in an image\n"
               "  octodiff-cli inspect FILE.safetensors    list the tensors in a weights file\n"
               "  octodiff-cli convert --to safetensors|flax SRC DST   a diffusers folder in the other weights format\n\n"
               "developer tools:\n%s",
               OCTODIFF_VERSION, octodiff::make_random_model_usage());
  return out == stderr ? 2 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage(stderr);
  const std::string cmd = argv[1];
  const std::vector<std::string> args(argv + 2, argv + argc);
  try {
    if (cmd == "generate") return octodiff::cli::run_generate(args);
    if (cmd == "inspect") return octodiff::cli::run_inspect(args);
    if (cmd == "metadata") return octodiff::cli::run_metadata(args);
    if (cmd == "convert") return octodiff::cli::run_convert(args);
    if (cmd == "make-random-model") return octodiff::run_make_random_model(args);
    if (cmd == "--help" || cmd == "-h" || cmd == "help") return usage(stdout);
    std::fprintf(stderr, "octodiff-cli: unknown command '%s'\n\n", cmd.c_str());
    return usage(stderr);
  } catch (const octodiff::Cancelled&) {
    std::fprintf(stderr, "octodiff-cli: cancelled\n");
    return 130;
  } catch (const octodiff::Error& e) {
    std::fprintf(stderr, "octodiff-cli: error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "octodiff-cli: error: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "octodiff-cli: internal error: %s\n", e.what());
    return 1;
  }
}
