#include "run_record.h"

#include <cstring>

namespace octodiff::gui {

QString jobKindName(JobKind kind) {
  switch (kind) {
    case JobKind::Generate:
      return QStringLiteral("Generate");
    case JobKind::SeedComparison:
      return QStringLiteral("Seed comparison");
    case JobKind::SeedSweep:
      return QStringLiteral("Seed sweep");
    case JobKind::Sheet:
      return QStringLiteral("Sheet");
  }
  return {};
}

}  // namespace octodiff::gui
