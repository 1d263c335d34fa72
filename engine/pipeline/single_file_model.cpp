#include "pipeline/single_file_model.h"

#include "core/error.h"

namespace octodiff {

// Temporary: replaced by the ldm key mapping (io/single_file) as soon as it lands.
SingleFileParts load_single_file_parts(const std::filesystem::path& file, const ModelLoadOptions&) {
  fail("'", file.string(), "': single-file checkpoints are not supported by this build yet");
}

}  // namespace octodiff
