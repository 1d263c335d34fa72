// libpng reports errors by longjmp. The rule here: every setjmp lives in a small function
// (encode_stream, read_header, read_pixels, skip_pixels) whose frame, like every frame up to
// the libpng callbacks, holds no object with a destructor, and those functions only return
// false on error. C++ containers and exceptions stay in the callers, outside the jump's path.
#include "io/png.h"

#include <fcntl.h>
#include <png.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "io/files.h"

namespace octodiff {
namespace {

// What the callbacks see: plain data only.
struct PngIo {
  const uint8_t* data = nullptr;  // reading
  size_t size = 0, pos = 0;
  std::vector<uint8_t>* out = nullptr;  // writing
  char message[256] = {};
  char warning[256] = {};  // the last one; often says what an error means ("exceeds user limit")
};

void on_error(png_structp png, png_const_charp message) {
  auto* io = static_cast<PngIo*>(png_get_error_ptr(png));
  std::snprintf(io->message, sizeof io->message, "%s", message ? message : "unknown libpng error");
  png_longjmp(png, 1);
}

// Warnings (e.g. a bad ancillary chunk CRC: the chunk is skipped) are not failures.
void on_warning(png_structp png, png_const_charp message) {
  auto* io = static_cast<PngIo*>(png_get_error_ptr(png));
  std::snprintf(io->warning, sizeof io->warning, "%s", message ? message : "");
}

void read_callback(png_structp png, png_bytep dst, size_t bytes) {
  auto* io = static_cast<PngIo*>(png_get_io_ptr(png));
  if (bytes > io->size - io->pos) png_error(png, "unexpected end of data (the file is truncated)");
  std::memcpy(dst, io->data + io->pos, bytes);
  io->pos += bytes;
}

void write_callback(png_structp png, png_bytep src, size_t bytes) {
  auto* io = static_cast<PngIo*>(png_get_io_ptr(png));
  bool ok = true;
  try {
    io->out->insert(io->out->end(), src, src + bytes);
  } catch (...) {
    ok = false;
  }
  if (!ok) png_error(png, "out of memory");  // outside the catch: no live exception to skip
}

void flush_callback(png_structp) {}

// libpng itself never needs much memory (rows are ours; text is capped at 8 MB by
// PNG_USER_CHUNK_MALLOC_MAX), but when a chunk's length is absurd it only warns and then tries
// to allocate (and zero) that length — up to 2 GB from a tiny file. A refused allocation turns
// into a clean libpng error or a skipped chunk instead.
constexpr png_alloc_size_t kLibpngAllocationLimit = 16u << 20;

png_voidp limited_malloc(png_structp, png_alloc_size_t bytes) {
  return bytes > kLibpngAllocationLimit ? nullptr : std::malloc(bytes);
}

void limited_free(png_structp, png_voidp p) {
  std::free(p);
}

// ---- text encodings -----------------------------------------------------------------------

// Decodes one UTF-8 sequence at s[i]; returns its length, or 0 if it is malformed (overlong,
// surrogate, beyond U+10FFFF, truncated).
int utf8_sequence(const std::string& s, size_t i, uint32_t* cp) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t c = b(i);
  int len;
  uint32_t v, min;
  if (c < 0x80) return *cp = c, 1;
  if ((c & 0xE0) == 0xC0)
    len = 2, v = c & 0x1F, min = 0x80;
  else if ((c & 0xF0) == 0xE0)
    len = 3, v = c & 0x0F, min = 0x800;
  else if ((c & 0xF8) == 0xF0)
    len = 4, v = c & 0x07, min = 0x10000;
  else
    return 0;
  if (i + len > s.size()) return 0;
  for (int k = 1; k < len; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
    v = (v << 6) | (b(i + k) & 0x3F);
  }
  if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
  *cp = v;
  return len;
}

void check_text(const PngText& entry) {
  for (size_t i = 0; i < entry.text.size();) {
    uint32_t cp = 0;
    const int n = utf8_sequence(entry.text, i, &cp);
    if (n == 0) fail("PNG text '", entry.key, "' is not valid UTF-8 (at byte ", i, ")");
    if (cp == 0) fail("PNG text '", entry.key, "' contains a NUL character (at byte ", i, ")");
    i += static_cast<size_t>(n);
  }
}

// A UTF-8 key -> the Latin-1 PNG keyword, enforcing the PNG keyword rules.
std::string latin1_keyword(const std::string& key) {
  std::string out;
  for (size_t i = 0; i < key.size();) {
    uint32_t cp = 0;
    const int n = utf8_sequence(key, i, &cp);
    if (n == 0) fail("PNG text key '", key, "' is not valid UTF-8");
    if (!((cp >= 0x20 && cp <= 0x7E) || (cp >= 0xA1 && cp <= 0xFF)))
      fail("PNG text key '", key, "' has a character PNG keywords cannot hold (U+", std::hex, cp,
           "); keys are printable Latin-1");
    out.push_back(static_cast<char>(cp));
    i += static_cast<size_t>(n);
  }
  if (out.empty() || out.size() > 79)
    fail("PNG text key '", key, "' has ", out.size(), " characters; PNG keys need 1 to 79");
  if (out.front() == ' ' || out.back() == ' ' || out.find("  ") != std::string::npos)
    fail("PNG text key '", key, "' has leading, trailing or consecutive spaces");
  return out;
}

std::string latin1_to_utf8(const char* s) {
  std::string out;
  for (; *s; ++s) {
    const auto c = static_cast<uint8_t>(*s);
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back(static_cast<char>(0xC0 | (c >> 6)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    }
  }
  return out;
}

// ---- libpng, setjmp side -------------------------------------------------------------------

bool encode_stream(png_structp png, png_infop info, int width, int height, png_textp texts, int num_texts,
                   png_bytepp rows) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_IHDR(png, info, static_cast<png_uint_32>(width), static_cast<png_uint_32>(height), 8,
               PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  if (num_texts > 0) png_set_text(png, info, texts, num_texts);
  png_write_info(png, info);
  png_write_image(png, rows);
  png_write_end(png, info);
  return true;
}

struct Header {
  png_uint_32 width = 0, height = 0;
  uint64_t file_bits_per_pixel = 0;  // as stored, before conversion
  size_t rowbytes = 0;               // after conversion
  int passes = 1;
};

// Reads up to the image data; with `to_rgb8` asks libpng to deliver RGB8 rows.
bool read_header(png_structp png, png_infop info, bool to_rgb8, Header* header) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_user_limits(png, kMaxImageSide, kMaxImageSide);
  png_read_info(png, info);
  header->file_bits_per_pixel = uint64_t{png_get_channels(png, info)} * png_get_bit_depth(png, info);
  if (to_rgb8) {
    const int color = png_get_color_type(png, info);
    const int depth = png_get_bit_depth(png, info);
    if (depth == 16) png_set_scale_16(png);
    if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if ((color & PNG_COLOR_MASK_COLOR) == 0) {
      if (depth < 8) png_set_expand_gray_1_2_4_to_8(png);
      png_set_gray_to_rgb(png);
    }
    png_set_strip_alpha(png);  // also drops the alpha a palette or tRNS chunk would expand to
  }
  header->passes = png_set_interlace_handling(png);
  png_read_update_info(png, info);
  header->width = png_get_image_width(png, info);
  header->height = png_get_image_height(png, info);
  header->rowbytes = png_get_rowbytes(png, info);
  if (to_rgb8 && (png_get_channels(png, info) != 3 || png_get_bit_depth(png, info) != 8))
    png_error(png, "cannot convert this PNG to 8-bit RGB");
  return true;
}

bool read_pixels(png_structp png, png_infop info, png_bytepp rows) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_read_image(png, rows);
  png_read_end(png, info);
  return true;
}

// Decompresses (and so checks) the image data into one scratch row, for the text-only read.
bool skip_pixels(png_structp png, png_infop info, const Header* header, png_bytep row) {
  if (setjmp(png_jmpbuf(png))) return false;
  for (int pass = 0; pass < header->passes; ++pass)
    for (png_uint_32 y = 0; y < header->height; ++y) png_read_row(png, row, nullptr);
  png_read_end(png, info);
  return true;
}

// ---- C++ side ------------------------------------------------------------------------------

class ReadStruct {
 public:
  explicit ReadStruct(PngIo* io) {
    png_ = png_create_read_struct_2(PNG_LIBPNG_VER_STRING, io, on_error, on_warning, nullptr, limited_malloc,
                                    limited_free);
    if (png_) info_ = png_create_info_struct(png_);
    if (!png_ || !info_) fail("cannot read PNG: libpng could not start (out of memory?)");
    png_set_read_fn(png_, io, read_callback);
  }
  ~ReadStruct() { png_destroy_read_struct(&png_, info_ ? &info_ : nullptr, nullptr); }
  ReadStruct(const ReadStruct&) = delete;
  ReadStruct& operator=(const ReadStruct&) = delete;
  png_structp png() const { return png_; }
  png_infop info() const { return info_; }

 private:
  png_structp png_ = nullptr;
  png_infop info_ = nullptr;
};

std::vector<PngText> collect_text(png_structp png, png_infop info) {
  png_textp texts = nullptr;
  const int n = png_get_text(png, info, &texts, nullptr);
  std::vector<PngText> out;
  for (int i = 0; i < n; ++i) {
    const bool itxt = texts[i].compression == PNG_ITXT_COMPRESSION_NONE ||
                      texts[i].compression == PNG_ITXT_COMPRESSION_zTXt;
    const char* text = texts[i].text ? texts[i].text : "";
    out.push_back({latin1_to_utf8(texts[i].key), itxt ? std::string(text) : latin1_to_utf8(text)});
  }
  return out;
}

// `what` names the source in messages. Fills `image` only when it is not null.
void decode(const uint8_t* data, size_t size, const std::string& what, Image8* image,
            std::vector<PngText>* text) {
  if (size < 8 || png_sig_cmp(data, 0, 8) != 0)
    fail(what, " is not a PNG file (it does not start with the PNG signature)");
  PngIo io;
  io.data = data;
  io.size = size;
  ReadStruct rs(&io);
  const auto libpng_failed = [&] {
    if (io.warning[0] && std::strcmp(io.warning, io.message) != 0)
      fail(what, " is corrupt or truncated: ", io.message, " (", io.warning, ")");
    fail(what, " is corrupt or truncated: ", io.message);
  };
  Header header;
  if (!read_header(rs.png(), rs.info(), image != nullptr, &header)) libpng_failed();
  check_image_size(static_cast<int>(header.width), static_cast<int>(header.height), what.c_str());
  // Deflate cannot compress better than 1032:1, so data too short for the image it claims is
  // refused here, before allocating for (or spending time on) the image.
  const uint64_t raw_bytes = header.height * (1 + (header.width * header.file_bits_per_pixel + 7) / 8);
  if (raw_bytes / 1032 > size)
    fail(what, " is truncated: a ", header.width, "x", header.height, " image needs at least ",
         raw_bytes / 1032, " bytes of compressed data, there are ", size);
  if (image) {
    if (header.rowbytes != size_t{header.width} * 3) fail(what, ": unexpected PNG row layout");
    image->width = static_cast<int>(header.width);
    image->height = static_cast<int>(header.height);
    image->rgb.assign(header.rowbytes * header.height, 0);
    std::vector<png_bytep> rows(header.height);
    for (png_uint_32 y = 0; y < header.height; ++y) rows[y] = &image->rgb[y * header.rowbytes];
    if (!read_pixels(rs.png(), rs.info(), rows.data())) libpng_failed();
  } else {
    std::vector<uint8_t> row(header.rowbytes);
    if (!skip_pixels(rs.png(), rs.info(), &header, row.data())) libpng_failed();
  }
  if (text) *text = collect_text(rs.png(), rs.info());
}

std::vector<uint8_t> read_whole_file(const std::filesystem::path& path) {
  const std::string name = path.string();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot read '", name, "': ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    fail("cannot read '", name, "': ", std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("cannot read '", name, "': not a regular file");
  }
  std::vector<uint8_t> bytes;
  try {
    bytes.resize(static_cast<size_t>(st.st_size));
  } catch (...) {
    ::close(fd);
    throw;
  }
  size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + got, bytes.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = errno;
      ::close(fd);
      fail("cannot read '", name, "': ", n == 0 ? "the file shrank while being read" : std::strerror(e));
    }
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  return bytes;
}

std::string quoted(const std::filesystem::path& path) {
  return cat("'", path.string(), "'");
}

}  // namespace

std::vector<uint8_t> encode_png(const Image8& image, const std::vector<PngText>& text) {
  check_image_size(image.width, image.height, "PNG");
  const size_t row_bytes = static_cast<size_t>(image.width) * 3;
  if (image.rgb.size() != row_bytes * image.height)
    fail("PNG: a ", image.width, "x", image.height, " RGB image needs ", row_bytes * image.height,
         " bytes, got ", image.rgb.size());
  std::vector<std::string> keys;  // Latin-1; png_text points into these and into `text`
  for (const PngText& entry : text) {
    keys.push_back(latin1_keyword(entry.key));
    check_text(entry);
  }
  std::vector<png_text> chunks(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    chunks[i] = png_text{};
    chunks[i].compression = PNG_ITXT_COMPRESSION_NONE;
    chunks[i].key = keys[i].data();
    chunks[i].text = const_cast<char*>(text[i].text.c_str());
    chunks[i].itxt_length = text[i].text.size();
  }
  std::vector<png_bytep> rows(static_cast<size_t>(image.height));
  for (size_t y = 0; y < rows.size(); ++y)
    rows[y] = const_cast<png_bytep>(&image.rgb[y * row_bytes]);  // libpng does not write to rows

  std::vector<uint8_t> out;
  out.reserve(image.rgb.size() / 2 + 1024);
  PngIo io;
  io.out = &out;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &io, on_error, on_warning);
  png_infop info = png ? png_create_info_struct(png) : nullptr;
  bool ok = false;
  if (png && info) {
    png_set_write_fn(png, &io, write_callback, flush_callback);
    ok = encode_stream(png, info, image.width, image.height, chunks.data(), static_cast<int>(chunks.size()),
                       rows.data());
  } else {
    std::snprintf(io.message, sizeof io.message, "libpng could not start (out of memory?)");
  }
  png_destroy_write_struct(png ? &png : nullptr, info ? &info : nullptr);
  if (!ok) fail("cannot encode PNG: ", io.message);
  return out;
}

void write_png(const std::filesystem::path& path, const Image8& image, const std::vector<PngText>& text) {
  std::vector<uint8_t> bytes;
  try {
    bytes = encode_png(image, text);
  } catch (const Error& e) {
    fail("cannot write ", quoted(path), ": ", e.what());
  }
  write_file_atomic(path, bytes.data(), bytes.size());  // its errors name the path and reason
}

Image8 decode_png(const uint8_t* data, size_t size, std::vector<PngText>* text) {
  Image8 image;
  decode(data, size, "PNG data", &image, text);
  return image;
}

Image8 read_png(const std::filesystem::path& path, std::vector<PngText>* text) {
  const std::vector<uint8_t> bytes = read_whole_file(path);
  Image8 image;
  decode(bytes.data(), bytes.size(), quoted(path), &image, text);
  return image;
}

std::vector<PngText> read_png_text(const std::filesystem::path& path) {
  const std::vector<uint8_t> bytes = read_whole_file(path);
  std::vector<PngText> text;
  decode(bytes.data(), bytes.size(), quoted(path), nullptr, &text);
  return text;
}

}  // namespace octodiff
