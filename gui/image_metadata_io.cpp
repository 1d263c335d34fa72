#include "image_metadata_io.h"

#include <QFileInfo>
#include <QRegularExpression>
#include <climits>

#include "core/error.h"
#include "io/png.h"
#include "pipeline/export.h"

namespace octodiff::gui {
namespace {

std::filesystem::path fsPath(const QString& path) {
  return std::filesystem::path(path.toStdString());
}

void checkIndex(const RunRecord& run, int index) {
  if (index < 0 || index >= run.imageCount()) fail("there is no image ", index + 1, " in this run");
}

ImageMetadata imageMetadata(const RunRecord& run, int index) {
  const int B = run.batch();
  return describe_image(run.request, run.result, *run.model, index / B, index % B);
}

}  // namespace

void saveGridPng(const QString& path, const RunRecord& run) {
  save_grid_png(fsPath(path), run.request, run.result, *run.model);
}

void saveImagePng(const QString& path, const RunRecord& run, int index) {
  checkIndex(run, index);
  write_png(fsPath(path), toImage8(run.images[index]), png_texts(imageMetadata(run, index)));
}

QStringList saveImagePngs(const QString& dir, const RunRecord& run) {
  QStringList out;
  for (const auto& p : save_image_pngs(fsPath(dir), run.request, run.result, *run.model))
    out << QString::fromStdString(p.string());
  return out;
}

QByteArray imagePngBytes(const RunRecord& run, int index) {
  checkIndex(run, index);
  const std::vector<uint8_t> bytes =
      encode_png(toImage8(run.images[index]), png_texts(imageMetadata(run, index)));
  return QByteArray(reinterpret_cast<const char*>(bytes.data()), static_cast<qsizetype>(bytes.size()));
}

QString suggestedGridName(const RunRecord& run) {
  return QStringLiteral("octodiff-%1.png").arg(run.seed());
}

QString suggestedImageName(const RunRecord& run, int index) {
  return QStringLiteral("octodiff-%1-%2.png").arg(run.seed()).arg(index + 1);
}

ImportedPng importPng(const QString& path) {
  if (!QFileInfo::exists(path)) fail("'", path.toStdString(), "' does not exist");
  std::vector<PngText> texts;
  const Image8 image = read_png(fsPath(path), &texts);
  auto meta = parse_png_metadata(texts);
  if (!meta)
    fail("'", QFileInfo(path).fileName().toStdString(),
         "' carries no generation settings (it was not made by Octodiff or a tool writing A1111 parameters)");
  return {*meta, toQImage(image), initSettingsFromPng(texts, *meta)};
}

InitImageSettings initSettingsFromPng(const std::vector<PngText>& texts, const ImageMetadata& m) {
  InitImageSettings s;
  s.strength = m.denoising_strength;
  for (const PngText& t : texts) {
    if (t.key != "parameters") continue;
    const QString text = QString::fromStdString(t.text);
    const QString params = text.section(QLatin1Char('\n'), -1);  // A1111's last line: "Key: value, …"
    auto field = [&](const QString& key) -> std::optional<QString> {
      const QRegularExpression re(QStringLiteral("(?:^|,\\s*)%1:\\s*([^,]*)").arg(QRegularExpression::escape(key)));
      const QRegularExpressionMatch match = re.match(params);
      if (!match.hasMatch()) return std::nullopt;
      return match.captured(1).trimmed();
    };
    bool ok = false;
    if (auto v = field(QStringLiteral("Mask blur")); v && (v->toInt(&ok), ok)) s.mask_blur = v->toInt();
    if (auto v = field(QStringLiteral("Inpaint area")))
      s.only_masked = v->compare(QStringLiteral("Only masked"), Qt::CaseInsensitive) == 0;
    if (auto v = field(QStringLiteral("Masked area padding")); v && (v->toInt(&ok), ok)) s.masked_padding = v->toInt();
    // A1111 writes "Inpaint area" only for "Only masked": a mask blur without it is the whole picture.
    if (s.mask_blur && !s.only_masked) s.only_masked = false;
  }
  return s;
}

InitImageSettings initSettingsFromRequest(const GenerationRequest& r) {
  InitImageSettings s;
  if (r.init_images.empty()) return s;
  s.strength = r.strength;
  if (r.masks.empty()) return s;
  s.mask_blur = r.mask_blur;
  s.only_masked = r.inpaint_only_masked;
  s.masked_padding = r.only_masked_padding;
  return s;
}

FormState formFromMetadata(const ImageMetadata& m, const FormState& current, QStringList* notes) {
  FormState f = current;
  GenerationRequest r = request_from_metadata(m);
  const int D = std::max(1, m.devices), B = std::max(1, m.batch_per_device);
  const int n = D * B;
  std::vector<std::string> prompts = m.prompts;
  if (prompts.empty()) prompts = {""};

  bool all_same = true, all_typed = true;
  for (const auto& p : prompts) {
    all_same = all_same && p == prompts[0];
    all_typed = all_typed && !QString::fromStdString(p).trimmed().isEmpty();
  }
  f.prompts.clear();
  if (m.is_grid() && static_cast<int>(prompts.size()) == n && n <= 8 && all_typed && !all_same) {
    for (const auto& p : prompts) f.prompts << QString::fromStdString(p);
    r.devices = 0;  // the fields set the device count again
  } else {
    f.prompts << QString::fromStdString(prompts[0]);
    r.devices = D;
    if (!all_same && notes)
      *notes
          << QObject::tr("the grid had %1 different prompts; only the first is restored").arg(prompts.size());
  }
  while (f.prompts.size() < 8) f.prompts << QString();
  r.batch_per_device = B;

  f.negative_prompt = m.negative_prompts.empty() ? QString() : QString::fromStdString(m.negative_prompts[0]);
  for (const auto& neg : m.negative_prompts)
    if (neg != m.negative_prompts[0] && notes) {
      *notes << QObject::tr("the images had different negative prompts; the first is restored");
      break;
    }
  if ((m.seed < 0 || m.seed > INT_MAX) && notes)
    *notes << QObject::tr("seed %1 is outside the seed box's range 0–%2").arg(m.seed).arg(INT_MAX);
  if (m.injected_latents && notes)
    *notes << QObject::tr("the image was made from injected latents, which the app cannot restore");
  if (notes)
    for (const std::string& n : m.not_applied) *notes << QString::fromStdString(n);
  r.threads = current.request.threads;  // a property of this machine, not of the image
  f.request = r;
  f.seed_locked = true;  // the restored seed is the point
  return f;
}

}  // namespace octodiff::gui
