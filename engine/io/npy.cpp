#include "io/npy.h"

#include <cstring>
#include <regex>
#include <string>

#include "core/error.h"
#include "core/half.h"
#include "io/files.h"

namespace octodiff {

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
  std::string header(reinterpret_cast<const char*>(p + start), header_len);

  std::smatch m;
  if (!std::regex_search(header, m, std::regex("'descr'\\s*:\\s*'([^']*)'")))
    fail("'", what, "': .npy header has no descr");
  const std::string descr = m[1];
  if (std::regex_search(header, m, std::regex("'fortran_order'\\s*:\\s*(True|False)")) && m[1] == "True")
    fail("'", what, "' is in Fortran order; save it with np.ascontiguousarray first");
  if (!std::regex_search(header, m, std::regex("'shape'\\s*:\\s*\\(([^)]*)\\)")))
    fail("'", what, "': .npy header has no shape");
  Shape shape;
  std::string dims = m[1];
  std::regex num("\\d+");
  for (auto it = std::sregex_iterator(dims.begin(), dims.end(), num); it != std::sregex_iterator(); ++it)
    shape.push_back(std::stoll(it->str()));

  size_t elem = 0;
  if (descr == "<f4" || descr == "=f4") elem = 4;
  else if (descr == "<f8" || descr == "=f8") elem = 8;
  else if (descr == "<f2" || descr == "=f2") elem = 2;
  else fail("'", what, "' holds dtype '", descr, "'; expected little-endian float32 ('<f4')");

  Tensor t = Tensor::empty(shape);
  const uint64_t data_bytes = static_cast<uint64_t>(t.numel()) * elem;
  const uint64_t data_start = start + header_len;
  if (size - data_start < data_bytes)
    fail("'", what, "' is truncated: shape ", shape_str(shape), " needs ", data_bytes,
         " bytes of data, the file has ", size - data_start);
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
