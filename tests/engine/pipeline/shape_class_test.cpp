// The C++ shape-class rule (tests/support/shape_class.*) against tools/demo-model/shape_class.py on
// the images of tests/data/shape-class (made by tools/demo-model/make_shape_class_cases.py): 40
// ground-truth renders the model never trained on, 12 of them blurred as soft as a VAE makes edges,
// and 8 images the shipped demo model made. Both rules must pick the same class for every image
// and agree on every IoU (to a pixel's worth: a template sample on a class boundary could round the
// other way if numpy's and glibc's trigonometry differ in the last bit).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "io/files.h"
#include "io/png.h"
#include "shape_class.h"
#include "test_support.h"

using namespace octodiff;

namespace {

std::filesystem::path cases_dir() { return test::data_dir() / "shape-class"; }

TEST(ShapeClass, AgreesWithThePythonRuleOnEveryImage) {
  const auto cases = nlohmann::json::parse(read_text_file(cases_dir() / "cases.json"));
  ASSERT_EQ(cases.size(), 60u);
  double worst_iou = 0;
  int rendered = 0, recognised = 0;
  for (const auto& c : cases) {
    const std::string file = c["file"];
    const test::ShapeClassResult got = test::classify_shape(read_png(cases_dir() / file));
    ASSERT_TRUE(got.shape.has_value()) << file;
    EXPECT_EQ(*got.shape, c["shape"].get<std::string>()) << file;
    for (size_t k = 0; k < test::kShapeClasses.size(); ++k) {
      const double want = c["iou"][test::kShapeClasses[k]].get<double>();
      worst_iou = std::max(worst_iou, std::fabs(got.iou[k] - want));
      EXPECT_NEAR(got.iou[k], want, 2e-3) << file << " " << test::kShapeClasses[k];
    }
    EXPECT_NEAR(got.hole_fraction, c["hole_fraction"].get<double>(), 1e-12) << file;
    if (!c["rendered"].is_null()) {
      ++rendered;
      recognised += *got.shape == c["rendered"].get<std::string>();
    }
  }
  std::printf("[shape-class] %zu images: classes as shape_class.py's, IoU max diff %.3g; rendered shapes recognised %d/%d\n",
              cases.size(), worst_iou, recognised, rendered);
  EXPECT_EQ(recognised, rendered);  // the rule itself: every ground-truth shape, sharp or soft
}

TEST(ShapeClass, NoShapeAndWrongSizesAreSaidSo) {
  Image8 flat{64, 64, std::vector<uint8_t>(64 * 64 * 3, 128)};
  EXPECT_FALSE(test::classify_shape(flat).shape.has_value());
  Image8 small{32, 32, std::vector<uint8_t>(32 * 32 * 3, 128)};
  EXPECT_THROW(test::classify_shape(small), std::invalid_argument);
}

}  // namespace
