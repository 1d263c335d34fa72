// PNG files with text metadata, through libpng.
//
// Writing: RGB8, every text entry as an uncompressed iTXt chunk placed before the image data.
// The key "parameters" is what AUTOMATIC1111-style tools read; "octodiff" holds our JSON.
// Reading: any PNG (RGB, RGBA, gray, gray+alpha, palette; 1–16 bits) becomes RGB8 — alpha is
// dropped (no compositing, like PIL's convert("RGB")), 16-bit samples are rounded to 8 bits,
// no gamma or colour management is applied. tEXt, zTXt and iTXt entries are all returned.
//
// Strings in PngText are UTF-8. Keys are stored as Latin-1 (the PNG rule), so a key must be
// 1–79 Latin-1 characters, printable (U+0020–U+007E, U+00A1–U+00FF), without leading, trailing
// or doubled spaces. tEXt/zTXt text (Latin-1 in the file) is converted to UTF-8 on reading;
// iTXt text is returned as stored.
//
// Every failure is an octodiff::Error naming the file (or "PNG data") and the reason; corrupt,
// truncated or hostile files never crash and never allocate for absurd sizes (image.h limits).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "io/image.h"

namespace octodiff {

struct PngText {
  std::string key;
  std::string text;
};

// Atomic (temporary file + rename): on any failure nothing is left at `path` or beside it.
void write_png(const std::filesystem::path& path, const Image8& image, const std::vector<PngText>& text);
// The same PNG bytes in memory (clipboard, drag and drop).
std::vector<uint8_t> encode_png(const Image8& image, const std::vector<PngText>& text);

Image8 read_png(const std::filesystem::path& path, std::vector<PngText>* text = nullptr);
Image8 decode_png(const uint8_t* data, size_t size, std::vector<PngText>* text = nullptr);
// Only the text entries. The image data is still decompressed and checked (text chunks may
// follow it) but never stored, so this costs no image-sized memory.
std::vector<PngText> read_png_text(const std::filesystem::path& path);

}  // namespace octodiff
