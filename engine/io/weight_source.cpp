#include "io/weight_source.h"

#include <cstring>

#include "core/error.h"

namespace octodiff {

namespace {

// The stored tensor is the asked-for one as it lies (no transform, the same shape): it can be
// read in place or converted straight into the caller's storage. (claim() has already checked the
// entry's shape; this is about the record behind it.)
bool stored_as_is(const WeightSource::Entry& e, const Shape& expected) {
  return !e.transform && e.record->shape == expected;
}

}  // namespace

void WeightSource::add(const std::string& name, Entry entry) {
  if (entries_.count(name))
    fail(description_, ": tensor '", name, "' is provided twice (", entries_[name].origin, " and ",
         entry.origin, ")");
  entries_[name] = std::move(entry);
}

void WeightSource::patch(const std::string& name, std::function<Tensor(const Tensor&)> fn) {
  auto it = entries_.find(name);
  if (it == entries_.end()) fail("tensor '", name, "' is missing from ", description_);
  Entry& e = it->second;
  if (e.transform) {
    e.transform = [inner = std::move(e.transform), fn = std::move(fn)](const Tensor& t) { return fn(inner(t)); };
  } else {
    // Stored in another shape only by 1×1 trailing dims (take() checks the result's shape).
    e.transform = [fn = std::move(fn), shape = e.shape](const Tensor& t) { return fn(t.reshaped(shape)); };
  }
  e.patched = true;
}

bool WeightSource::patched(const std::string& name) const {
  auto it = entries_.find(name);
  return it != entries_.end() && it->second.patched;
}

const Shape& WeightSource::shape_of(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) fail("tensor '", name, "' is missing from ", description_);
  return it->second.shape;
}

DType WeightSource::stored_dtype(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) fail("tensor '", name, "' is missing from ", description_);
  return it->second.record->dtype;
}

std::vector<std::string> WeightSource::names() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : entries_) out.push_back(k);
  return out;
}

void WeightSource::claim(const std::string& name, const Shape& expected) {
  auto it = entries_.find(name);
  if (it == entries_.end()) fail("tensor '", name, "' is missing from ", description_);
  if (it->second.shape != expected)
    fail("tensor '", name, "' in ", description_, " has shape ", shape_str(it->second.shape), ", expected ",
         shape_str(expected), " (does the config.json match the weights?)");
  taken_.insert(name);
}

Tensor WeightSource::take(const std::string& name, const Shape& expected) {
  claim(name, expected);
  const Entry& e = entries_.find(name)->second;
  Tensor t = e.file->to_f32(*e.record);
  e.file->release(*e.record);  // each weight is read once: keep the file out of memory
  if (e.transform) t = e.transform(t);
  if (t.shape() != expected)
    fail("internal: transform of '", name, "' gave ", shape_str(t.shape()));
  return t;
}

void WeightSource::take_into(const std::string& name, const Shape& expected, float* dst) {
  claim(name, expected);
  const Entry& e = entries_.find(name)->second;
  if (!stored_as_is(e, expected)) {
    const Tensor t = take(name, expected);
    std::memcpy(dst, t.data(), static_cast<size_t>(t.numel()) * sizeof(float));
    return;
  }
  e.file->to_f32_into(*e.record, dst);
  e.file->release(*e.record);
}

Tensor WeightSource::take_to_read(const std::string& name, const Shape& expected) {
  claim(name, expected);
  const Entry& e = entries_.find(name)->second;
  const float* data = stored_as_is(e, expected) ? e.file->f32_in_place(*e.record) : nullptr;
  if (!data) return take(name, expected);
  std::shared_ptr<const void> pages(data, [file = e.file, record = e.record](const void*) { file->release(*record); });
  return Tensor::wrap(expected, const_cast<float*>(data), std::move(pages));
}

Tensor WeightSource::take_if_present(const std::string& name, const Shape& expected) {
  if (!has(name)) return Tensor();
  return take(name, expected);
}

void WeightSource::finish() const {
  std::vector<std::string> left;
  for (const auto& [name, e] : entries_)
    if (!taken_.count(name) && !ignored_.count(name)) left.push_back(e.origin);
  if (left.empty()) return;
  std::string list;
  for (size_t i = 0; i < left.size() && i < 10; ++i) list += (i ? ", '" : "'") + left[i] + "'";
  if (left.size() > 10) list += cat(" and ", left.size() - 10, " more");
  fail(description_, " has ", left.size(), " unexpected tensor", left.size() == 1 ? "" : "s", ": ",
       list, " (is this a different model architecture than its config.json says?)");
}

void WeightSource::read_ahead() const {
  for (const auto& [name, e] : entries_) e.file->read_ahead();  // once per file (call_once)
}

std::shared_ptr<WeightSource> weights_from_safetensors(const std::vector<std::filesystem::path>& files,
                                                       const std::string& description) {
  auto src = std::make_shared<WeightSource>(description);
  for (const auto& path : files) {
    auto f = SafetensorsFile::open(path);
    for (const auto& rec : f->tensors()) {
      WeightSource::Entry e;
      e.file = f;
      e.record = &rec;
      e.shape = rec.shape;
      e.origin = rec.name;
      src->add(rec.name, e);
    }
  }
  return src;
}

}  // namespace octodiff
