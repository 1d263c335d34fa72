// Reading a component's config.json: the text parsed into a JSON object, and optional keys read
// through checked_get, with errors that name the file (`what`) and the key.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "io/json_numbers.h"

namespace octodiff {

// The JSON object in `text`; throws octodiff::Error "'what' is not valid JSON: …" or "'what' is
// not a JSON object".
nlohmann::json parse_config_object(const std::string& text, const std::string& what);

// Reads j[key] into *out when present and not null; a value of the wrong type is an Error
// "'what': key 'key' has an unexpected value …".
template <typename T>
void read_config_key(const nlohmann::json& j, const char* key, T* out, const std::string& what) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return;
  try {
    *out = checked_get<T>(*it);
  } catch (const nlohmann::json::exception&) {
    fail("'", what, "': key '", key, "' has an unexpected value ", it->dump());
  }
}

// j[key] as read_config_key reads it, `fallback` when absent or null.
template <typename T>
T config_value_or(const nlohmann::json& j, const char* key, T fallback, const std::string& what) {
  read_config_key(j, key, &fallback, what);
  return fallback;
}

}  // namespace octodiff
