// octodiff-cli generate --x/--y: the comparison sheet's files (cells with metadata, the labelled
// sheet, the array) and a cell equal to the single run with its settings.
#include <gtest/gtest.h>

#include <cstring>

#include <nlohmann/json.hpp>

#include "io/npy.h"
#include "io/png.h"
#include "pipeline/metadata.h"
#include "cli_runner.h"
#include "test_support.h"

using namespace octodiff;
namespace fs = std::filesystem;

TEST(CliSheet, WritesCellsSheetAndArray) {
  const auto dir = test::temp_dir("cli_sheet");
  const test::CliRun r = test::run_cli(
      test::tiny_generate({"--prompt", "a red circle", "--steps", "2", "--x", "guidance=3,7.5", "--y", "seed=1,2",
                           "--out", "sheet.png", "--save-array", "cells.npy", "--json"}),
      dir);
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  std::printf("%s", r.err.c_str());
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["runs"], 2);
  ASSERT_EQ(j["cells"].size(), 4u);

  const Tensor cells = read_npy(dir / "cells.npy");
  ASSERT_EQ(cells.shape(), (Shape{1, 2, 2, 64, 64, 3}));
  const char* names[] = {"cell-1-x1-y1.png", "cell-2-x2-y1.png", "cell-3-x1-y2.png", "cell-4-x2-y2.png"};
  for (int i = 0; i < 4; ++i) {
    std::vector<PngText> texts;
    const Image8 png = read_png(dir / "sheet-cells" / names[i], &texts);
    const Image8 expected = to_uint8(cells.data() + int64_t{i} * 64 * 64 * 3, 64, 64);
    EXPECT_EQ(png.rgb, expected.rgb) << names[i];
    const auto meta = parse_png_metadata(texts);
    ASSERT_TRUE(meta.has_value()) << names[i];
    EXPECT_EQ(meta->seed, i < 2 ? 1 : 2);
    EXPECT_EQ(meta->guidance_scale, i % 2 ? 7.5 : 3.0);
    EXPECT_EQ(meta->devices, 1);
    EXPECT_EQ(meta->prompts[0], "a red circle");
  }
  std::vector<PngText> sheet_texts;
  const Image8 sheet = read_png(dir / "sheet.png", &sheet_texts);
  std::printf("[sheet] %d x %d\n", sheet.width, sheet.height);
  EXPECT_GT(sheet.width, 2 * 64);  // the cells, the gaps and the row labels
  EXPECT_GT(sheet.height, 2 * 64);
  ASSERT_EQ(sheet_texts.size(), 1u);
  EXPECT_NE(sheet_texts[0].text.find("\"guidance\""), std::string::npos);

  // The cell (guidance 7.5, seed 2) is the single run with those settings, bit for bit.
  const test::CliRun single = test::run_cli(
      test::tiny_generate({"--prompt", "a red circle", "--steps", "2", "--guidance", "7.5", "--seed", "2", "--out",
                           "single.png", "--save-array", "single.npy"}),
      dir);
  ASSERT_EQ(single.code, 0) << single.err << single.out;
  const Tensor one = read_npy(dir / "single.npy");
  ASSERT_EQ(one.numel(), 64 * 64 * 3);
  EXPECT_EQ(std::memcmp(one.data(), cells.data() + 3 * one.numel(), sizeof(float) * one.numel()), 0);
}

TEST(CliSheet, BadAxesAndGridOptionsAreRefused) {
  const auto dir = test::temp_dir("cli_sheet_errors");
  const test::CliRun unknown = test::run_cli(test::tiny_generate({"--prompt", "a", "--x", "colour=red"}), dir);
  EXPECT_NE(unknown.code, 0);
  EXPECT_NE(unknown.err.find("unknown sheet axis 'colour'"), std::string::npos) << unknown.err;
  const test::CliRun devices =
      test::run_cli(test::tiny_generate({"--prompt", "a", "--devices", "2", "--x", "seed=1,2"}), dir);
  EXPECT_NE(devices.code, 0);
  EXPECT_NE(devices.err.find("--devices does not go with a comparison sheet"), std::string::npos) << devices.err;
  const test::CliRun many = test::run_cli(
      test::tiny_generate({"--prompt", "a", "--x", "seed=1-10", "--y", "guidance=1,2,3,4,5,6,7"}), dir);
  EXPECT_NE(many.code, 0);
  EXPECT_NE(many.err.find("70 cells; at most 64"), std::string::npos) << many.err;
  EXPECT_FALSE(fs::exists(dir / "octodiff-sheet-0.png"));
}
