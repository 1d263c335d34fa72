// WeightSource: one model component's weights, by diffusers parameter name, whatever file layout
// they came from (a diffusers folder's safetensors, sharded or not, or a single-file checkpoint
// through the key mapping in io/single_file.h).
//
// Models pull every parameter with `take(name, shape)`; a missing tensor or a wrong shape is an
// error naming the tensor and the file. When a model has taken all it needs, `finish()` turns any
// tensor nobody asked for into an error as well, so a checkpoint for a different architecture is
// never half-loaded silently.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/safetensors.h"

namespace octodiff {

class WeightSource {
 public:
  // Where a diffusers-named tensor physically lives, and how to turn it into that tensor.
  struct Entry {
    std::shared_ptr<SafetensorsFile> file;
    const TensorRecord* record = nullptr;
    Shape shape;                // the diffusers shape (after the transform)
    // Optional transform applied to the stored tensor (e.g. squeeze a 1×1 conv to a matrix, take
    // rows of a fused projection). Receives the stored tensor as float32.
    std::function<Tensor(const Tensor&)> transform;
    std::string origin;         // the stored name, for messages
    bool patched = false;       // changed by patch() (e.g. a LoRA merged in)
  };

  explicit WeightSource(std::string description) : description_(std::move(description)) {}

  void add(const std::string& name, Entry entry);
  // Applies `fn` to the tensor after the entry's own transform, every time it is taken, and marks
  // it patched (pipeline/lora.h merges LoRAs this way); several patches apply in order. `fn` gets
  // the tensor as float32 in the diffusers shape and returns the same shape.
  void patch(const std::string& name, std::function<Tensor(const Tensor&)> fn);
  bool patched(const std::string& name) const;
  // Names that may be present and are never needed (e.g. "text_model.embeddings.position_ids").
  void ignore(const std::string& name) { ignored_.insert(name); }

  const std::string& description() const { return description_; }
  bool has(const std::string& name) const { return entries_.count(name) != 0; }
  const Shape& shape_of(const std::string& name) const;
  DType stored_dtype(const std::string& name) const;
  std::vector<std::string> names() const;

  // The tensor as float32, checked against `expected`; marks it taken.
  Tensor take(const std::string& name, const Shape& expected);
  // As take(), converting straight into dst (room for the tensor's floats): for a tensor kept
  // as it is in weight storage, without a temporary copy.
  void take_into(const std::string& name, const Shape& expected, float* dst);
  // As take(), for a tensor only read, once, right away (packing): float32 data is then wrapped
  // where it lies in the file's mapping, not copied — writing to the result may fault. The
  // file's pages are dropped from memory when the tensor goes.
  Tensor take_to_read(const std::string& name, const Shape& expected);
  // Checks the tensor is present with the `expected` shape and marks it taken without reading it
  // (its packed form comes from the component's weight cache, io/weight_cache.h).
  void claim(const std::string& name, const Shape& expected);
  // As take(), but returns an undefined Tensor when absent.
  Tensor take_if_present(const std::string& name, const Shape& expected);

  // Throws if any tensor was never taken (lists up to 10 of them).
  void finish() const;

  // Starts reading every file the tensors come from into the page cache, in the background
  // (MappedFile::read_ahead): for a component about to be packed, not one served from its cache.
  void read_ahead() const;

 private:
  std::string description_;
  std::map<std::string, Entry> entries_;
  std::set<std::string> taken_, ignored_;
};

// All tensors of the given safetensors files under their stored names (a diffusers component:
// one file, or several shards).
std::shared_ptr<WeightSource> weights_from_safetensors(
    const std::vector<std::filesystem::path>& files, const std::string& description);

}  // namespace octodiff
