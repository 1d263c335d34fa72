#include "io/config_json.h"

namespace octodiff {

nlohmann::json parse_config_object(const std::string& text, const std::string& what) {
  try {
    nlohmann::json j = nlohmann::json::parse(text);
    if (!j.is_object()) fail("'", what, "' is not a JSON object");
    return j;
  } catch (const nlohmann::json::exception& e) {
    fail("'", what, "' is not valid JSON: ", e.what());
  }
}

}  // namespace octodiff
