// What one pipeline run left behind, as the UI keeps it: the request (with the seed actually
// used), the engine's result, the model that made it (for PNG metadata) and the images as QImages.
#pragma once

#include <QDateTime>
#include <QImage>
#include <QMetaType>
#include <QString>
#include <memory>
#include <vector>

#include "io/image.h"
#include "pipeline/generation.h"
#include "qimage_convert.h"  // toQImage / toImage8, used with every run record
#include "pipeline/model.h"

namespace octodiff::gui {

using ModelPtr = std::shared_ptr<const StableDiffusionModel>;

// What the worker is asked to do: one run, or several runs that differ only in the seed. Sheet:
// a run of a comparison sheet (GenerationController::startSheet, sheet_runs.h), not a Job.
enum class JobKind { Generate, SeedComparison, SeedSweep, Sheet };

struct Job {
  JobKind kind = JobKind::Generate;
  GenerationRequest request;
  std::vector<int64_t> seeds;  // one run per seed, in order (Generate: request.seed only)
};

struct RunRecord {
  int number = 0;  // 1, 2, ... since the app started
  JobKind kind = JobKind::Generate;
  int index_in_job = 0, runs_in_job = 1;
  QDateTime finished_at;
  GenerationRequest request;
  GenerationResult result;
  ModelPtr model;
  std::vector<QImage> images;  // device-major, D·B

  int devices() const { return result.signature.devices; }
  int batch() const { return result.signature.batch; }
  int imageCount() const { return static_cast<int>(images.size()); }
  int64_t seed() const { return request.seed; }
  QString prompt(int i) const { return QString::fromStdString(result.prompts.at(i)); }
};

using RunPtr = std::shared_ptr<const RunRecord>;

QString jobKindName(JobKind kind);

}  // namespace octodiff::gui

Q_DECLARE_METATYPE(octodiff::gui::RunPtr)
