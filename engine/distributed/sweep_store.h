// A sweep's output folder: one PNG per image as each item completes, an index, and resumption.
//
//   DIR/sweep.json    the sweep's settings (what every image depends on but its prompt and seed);
//                     a rerun with other settings is refused instead of mixing two sweeps
//   DIR/index.jsonl   one JSON line per finished item: item, prompt_index, prompt, seed, files,
//                     and whatever the writer adds (rank, host, seconds)
//   DIR/p0003-s42.png the item's images (sweep_item_file), written atomically (temp + rename)
//
// An item is finished when all its PNGs exist and decode completely; a rerun skips those. An
// image written just before an interruption whose index line was lost gets its line back when
// the folder is opened again.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "distributed/sweep.h"
#include "io/image.h"
#include "io/png.h"

namespace octodiff {

class SweepStore {
 public:
  // Creates the folder or opens an existing sweep in it; `settings_json` (a JSON object) must
  // equal the folder's sweep.json when there is one.
  SweepStore(std::filesystem::path dir, const std::string& settings_json, int batch);

  const std::filesystem::path& dir() const { return dir_; }
  bool is_finished(const SweepItem& item) const;
  // The items not yet finished, in order (after reconcile(): as it found them, without reading
  // the files again).
  std::vector<SweepItem> pending(const std::vector<SweepItem>& items) const;
  // Items found finished on disk when the store was opened (they are skipped).
  int finished_at_open() const { return finished_at_open_; }

  // Writes the item's images (one per batch slot, in order) atomically, then appends its index
  // line with `extra_json` (a JSON object, may be "{}") merged in. Returns the paths.
  std::vector<std::filesystem::path> write_item(const SweepItem& item, const std::vector<Image8>& images,
                                                const std::vector<std::vector<PngText>>& texts,
                                                const std::string& extra_json);

  // Call with every item of the sweep once: counts the finished ones and gives back lost index
  // lines. Throws when the index says an item's file was made from another prompt (the prompts
  // file was edited: p0003 is now another line).
  void reconcile(const std::vector<SweepItem>& items);

 private:
  bool file_complete(const std::filesystem::path& path) const;
  void append_index_line(const std::string& line);

  std::filesystem::path dir_;
  int batch_ = 1;
  std::map<std::string, std::string> indexed_;  // item stem → its prompt, for items with an index line
  int finished_at_open_ = 0;
  bool reconciled_ = false;
  std::map<std::string, bool> finished_;  // item stem → finished, as reconcile() found it
};

}  // namespace octodiff
