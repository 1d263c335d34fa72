#include "io/npy.h"

#include <charconv>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "core/error.h"
#include "core/half.h"
#include "io/files.h"

namespace octodiff {
namespace {

// NumPy refuses headers longer than this unless told otherwise (numpy.lib.format's
// max_header_size); a float array's header is under 128 bytes.
constexpr uint64_t kMaxHeaderBytes = 10000;

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'; }

// The text after the first `'key'<spaces>:<spaces>` of the header dict whose value `rest` accepts
// (rest: the value's text → its length, or npos when it is not such a value); nullopt when none.
template <typename Rest>
std::optional<std::string_view> dict_value(std::string_view header, std::string_view key, Rest&& rest) {
  std::string quoted(1, '\'');  // (not "'" + key + "'": GCC 12 gives a false -Wrestrict on that)
  quoted.append(key).push_back('\'');
  for (size_t at = header.find(quoted); at != std::string_view::npos; at = header.find(quoted, at + 1)) {
    size_t i = at + quoted.size();
    while (i < header.size() && is_space(header[i])) ++i;
    if (i == header.size() || header[i] != ':') continue;
    ++i;
    while (i < header.size() && is_space(header[i])) ++i;
    const std::string_view value = header.substr(i);
    if (const size_t n = rest(value); n != std::string_view::npos) return value.substr(0, n);
  }
  return std::nullopt;
}

// A value enclosed in `open` … `close` (no `close` inside): its length with both.
size_t enclosed(std::string_view v, char open, char close) {
  if (v.empty() || v[0] != open) return std::string_view::npos;
  const size_t end = v.find(close, 1);
  return end == std::string_view::npos ? end : end + 1;
}

// The dimensions: every run of digits inside the shape's parentheses.
Shape parse_dims(std::string_view dims, const std::string& what) {
  Shape shape;
  for (size_t i = 0; i < dims.size();) {
    if (dims[i] < '0' || dims[i] > '9') {
      ++i;
      continue;
    }
    int64_t d = 0;
    const auto [end, ec] = std::from_chars(dims.data() + i, dims.data() + dims.size(), d);
    if (ec != std::errc()) fail("'", what, "': .npy shape has a dimension too large (", dims, ")");
    shape.push_back(d);
    i = static_cast<size_t>(end - dims.data());
  }
  return shape;
}

}  // namespace

Tensor read_npy(const std::filesystem::path& path) {
  MappedFile file(path);
  const uint8_t* p = file.data();
  const uint64_t size = file.size();
  const std::string what = path.string();
  if (size < 10 || std::memcmp(p, "\x93NUMPY", 6) != 0) fail("'", what, "' is not a .npy file");
  const int major = p[6];
  uint64_t header_len = 0, start = 0;
  if (major == 1) {
    header_len = p[8] | (p[9] << 8);
    start = 10;
  } else if (major == 2 || major == 3) {
    if (size < 12) fail("'", what, "' is truncated");
    header_len = p[8] | (p[9] << 8) | (uint64_t(p[10]) << 16) | (uint64_t(p[11]) << 24);
    start = 12;
  } else {
    fail("'", what, "' uses unsupported .npy version ", major);
  }
  if (start + header_len > size) fail("'", what, "' is truncated (header)");
  if (header_len > kMaxHeaderBytes)
    fail("'", what, "': .npy header of ", header_len, " bytes (NumPy itself reads at most ", kMaxHeaderBytes, ")");
  const std::string_view header(reinterpret_cast<const char*>(p + start), header_len);

  const auto descr_value = dict_value(header, "descr", [](std::string_view v) { return enclosed(v, '\'', '\''); });
  if (!descr_value) fail("'", what, "': .npy header has no descr");
  const std::string descr(descr_value->substr(1, descr_value->size() - 2));
  const auto fortran = dict_value(header, "fortran_order", [](std::string_view v) {
    return v.rfind("True", 0) == 0 ? size_t{4} : v.rfind("False", 0) == 0 ? size_t{5} : std::string_view::npos;
  });
  if (fortran == "True") fail("'", what, "' is in Fortran order; save it with np.ascontiguousarray first");
  const auto dims = dict_value(header, "shape", [](std::string_view v) { return enclosed(v, '(', ')'); });
  if (!dims) fail("'", what, "': .npy header has no shape");
  const Shape shape = parse_dims(*dims, what);

  size_t elem = 0;
  if (descr == "<f4" || descr == "=f4") elem = 4;
  else if (descr == "<f8" || descr == "=f8") elem = 8;
  else if (descr == "<f2" || descr == "=f2") elem = 2;
  else fail("'", what, "' holds dtype '", descr, "'; expected little-endian float32 ('<f4')");

  // The data must be there before anything is allocated for it (numel × elem checked by division:
  // a product could wrap around 2^64).
  const uint64_t numel = static_cast<uint64_t>(shape_numel(shape));
  const uint64_t data_start = start + header_len;
  if (numel > (size - data_start) / elem)
    fail("'", what, "' is truncated: shape ", shape_str(shape), " needs ", numel, " × ", elem,
         " bytes of data, the file has ", size - data_start);
  Tensor t = Tensor::empty(shape);
  const uint8_t* d = p + data_start;
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (elem == 4) {
      std::memcpy(&t[i], d + 4 * i, 4);
    } else if (elem == 8) {
      double v;
      std::memcpy(&v, d + 8 * i, 8);
      t[i] = static_cast<float>(v);
    } else {
      uint16_t h;
      std::memcpy(&h, d + 2 * i, 2);
      t[i] = f16_to_f32(h);
    }
  }
  return t;
}

void write_npy(const std::filesystem::path& path, const Tensor& t) {
  std::string shape = "(";
  for (int i = 0; i < t.rank(); ++i) shape += std::to_string(t.dim(i)) + (t.rank() == 1 ? ",)" : i + 1 < t.rank() ? ", " : ")");
  if (t.rank() == 0) shape += ")";
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }";
  // Pad with spaces so that magic + len + header + '\n' is a multiple of 64.
  while ((10 + header.size() + 1) % 64) header.push_back(' ');
  header.push_back('\n');
  std::string prefix("\x93NUMPY\x01\x00", 8);
  prefix.push_back(static_cast<char>(header.size() & 0xff));
  prefix.push_back(static_cast<char>(header.size() >> 8));
  AtomicFile out(path);
  out.write(prefix.data(), prefix.size());
  out.write(header.data(), header.size());
  out.write(t.data(), sizeof(float) * static_cast<size_t>(t.numel()));
  out.commit();
}

}  // namespace octodiff
