#include "distributed/sweep_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/files.h"

namespace octodiff {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

json parse_object(const std::string& text, const std::string& what) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) fail(what, " is not a JSON object");
  return j;
}

// The settings that differ between the folder's sweep and this one, e.g. "steps 2 vs 4".
std::string settings_difference(const json& was, const json& now) {
  std::string diff;
  for (const auto& [key, value] : now.items()) {
    const json old = was.contains(key) ? was[key] : json();
    if (old != value) diff += cat(diff.empty() ? "" : ", ", key, " ", old.dump(), " (now ", value.dump(), ")");
  }
  for (const auto& [key, value] : was.items())
    if (!now.contains(key)) diff += cat(diff.empty() ? "" : ", ", key, " ", value.dump(), " (now not set)");
  return diff;
}

}  // namespace

SweepStore::SweepStore(fs::path dir, const std::string& settings_json, int batch) : dir_(std::move(dir)), batch_(batch) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) fail("cannot create the sweep folder '", dir_.string(), "': ", ec.message());
  const json settings = parse_object(settings_json, "the sweep settings");
  const fs::path manifest = dir_ / "sweep.json";
  if (fs::exists(manifest)) {
    const json was = parse_object(read_text_file(manifest), cat("'", manifest.string(), "'"));
    if (was != settings)
      fail("'", dir_.string(), "' holds a sweep with other settings: ", settings_difference(was, settings),
           "; give another --out-dir, or delete the folder to start again");
  } else {
    const std::string text = settings.dump(2) + "\n";
    write_file_atomic(manifest, text.data(), text.size());
  }
  const fs::path index = dir_ / "index.jsonl";
  const std::string text = fs::exists(index) ? read_text_file(index) : std::string();
  if (!text.empty() && text.back() != '\n') append_index_line("");  // end a line cut by an interruption
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {  // a line cut by an interruption is ignored
    const json j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("prompt_index") || !j.contains("seed")) continue;
    const SweepItem item{0, j["prompt_index"].get<int>(), j["seed"].get<int64_t>(), j.value("prompt", "")};
    indexed_[sweep_item_stem(item)] = item.prompt;
  }
}

bool SweepStore::file_complete(const fs::path& path) const {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return false;
  try {
    read_png_text(path);  // decompresses and checks every chunk up to IEND
    return true;
  } catch (const Error&) {
    return false;
  }
}

bool SweepStore::is_finished(const SweepItem& item) const {
  for (int b = 0; b < batch_; ++b)
    if (!file_complete(dir_ / sweep_item_file(item, b, batch_))) return false;
  return true;
}

std::vector<SweepItem> SweepStore::pending(const std::vector<SweepItem>& items) const {
  std::vector<SweepItem> out;
  for (const SweepItem& item : items) {
    const auto known = finished_.find(sweep_item_stem(item));
    const bool finished = reconciled_ && known != finished_.end() ? known->second : is_finished(item);
    if (!finished) out.push_back(item);
  }
  return out;
}

void SweepStore::reconcile(const std::vector<SweepItem>& items) {
  finished_at_open_ = 0;
  reconciled_ = true;
  for (const SweepItem& item : items) {
    const auto known = indexed_.find(sweep_item_stem(item));
    if (known != indexed_.end() && known->second != item.prompt)
      fail("'", dir_.string(), "' holds ", sweep_item_stem(item), " made from the prompt \"", known->second,
           "\", but prompt ", item.prompt_index, " is now \"", item.prompt,
           "\"; give another --out-dir (or add new prompts at the end of the file)");
    const bool finished = is_finished(item);
    finished_[sweep_item_stem(item)] = finished;
    if (!finished) continue;
    ++finished_at_open_;
    if (known != indexed_.end()) continue;
    json line = {{"item", item.index}, {"prompt_index", item.prompt_index}, {"prompt", item.prompt},
                 {"seed", item.seed}, {"found_on_disk", true}};
    json files = json::array();
    for (int b = 0; b < batch_; ++b) files.push_back(sweep_item_file(item, b, batch_));
    line["files"] = files;
    append_index_line(line.dump());
    indexed_[sweep_item_stem(item)] = item.prompt;
  }
}

std::vector<fs::path> SweepStore::write_item(const SweepItem& item, const std::vector<Image8>& images,
                                             const std::vector<std::vector<PngText>>& texts,
                                             const std::string& extra_json) {
  if (static_cast<int>(images.size()) != batch_ || texts.size() != images.size())
    fail("item ", item.index, " has ", images.size(), " images; the sweep makes ", batch_, " per item");
  std::vector<fs::path> paths;
  json files = json::array();
  for (int b = 0; b < batch_; ++b) {
    const std::string name = sweep_item_file(item, b, batch_);
    write_png(dir_ / name, images[b], texts[b]);
    paths.push_back(dir_ / name);
    files.push_back(name);
  }
  json line = {{"item", item.index}, {"prompt_index", item.prompt_index}, {"prompt", item.prompt},
               {"seed", item.seed}, {"files", files}};
  line.update(parse_object(extra_json, "the index line's extra fields"));
  append_index_line(line.dump());
  indexed_[sweep_item_stem(item)] = item.prompt;
  finished_[sweep_item_stem(item)] = true;
  return paths;
}

void SweepStore::append_index_line(const std::string& line) {
  const fs::path path = dir_ / "index.jsonl";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) fail("cannot open '", path.string(), "' to append: ", std::strerror(errno));
  const std::string text = line + "\n";  // one write: an interruption leaves at most a cut last line
  const ssize_t n = ::write(fd, text.data(), text.size());
  const int err = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(text.size())) fail("cannot append to '", path.string(), "': ", std::strerror(err));
}

}  // namespace octodiff
