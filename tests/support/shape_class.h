// Which shape a demo-model image shows: circle, square, triangle, star or ring — the rule of
// tools/demo-model/shape_class.py, re-implemented for the C++ statistics tests (issue 20.7: "a red
// star on a blue background" gave a red blob). tests/data/shape-class holds images and what the
// Python rule says of them (shape_class_test.cpp checks that both agree).
//
// The rule: the shape region R is measure.py's (RGB distance > 60 to the median border colour);
// F = R with its holes filled; for every class, a template of F's area at F's centroid (the
// dataset's own renderer, 2× supersampled, coverage ≥ 0.5; rotations −0.3 … 0.3) is compared with R
// by IoU; the best IoU wins (ties: the order above).
#pragma once

#include <array>
#include <optional>
#include <string>

#include "io/image.h"

namespace octodiff::test {

inline constexpr std::array<const char*, 5> kShapeClasses{"circle", "square", "triangle", "star", "ring"};

struct ShapeClassResult {
  std::optional<std::string> shape;  // nullopt: fewer than 20 region pixels (no shape found)
  std::array<double, 5> iou{};       // best IoU per class, in kShapeClasses' order
  double hole_fraction = 0;          // (|F| − |R|) / |F|
};

// img: a 64 × 64 demo-model image (the dataset's renderer draws at that size).
ShapeClassResult classify_shape(const Image8& img);

}  // namespace octodiff::test
