#include "pipeline/a1111_fields.h"

#include <algorithm>

namespace octodiff {
namespace {

constexpr size_t npos = std::string_view::npos;

bool is_letter(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); }
bool in_settings_key(char c) { return is_letter(c) || (c >= '0' && c <= '9') || c == ' ' || c == '+'; }
bool in_controlnet_key(char c) { return is_letter(c) || c == ' '; }

// The first key at or after `from` followed by ": " (a letter, then characters in_key accepts; the
// key is the whole run, as a greedy pattern takes it): its start, and its end in *key_end; npos
// when there is none. A key starting inside a run ends where the run does, so a run that is not
// followed by ": " is skipped whole (linear time).
template <typename InKey>
size_t next_key(std::string_view s, size_t from, InKey in_key, size_t* key_end) {
  for (size_t i = from; i < s.size();) {
    if (!is_letter(s[i])) {
      ++i;
      continue;
    }
    size_t end = i + 1;
    while (end < s.size() && in_key(s[end])) ++end;
    if (end + 1 < s.size() && s[end] == ':' && s[end + 1] == ' ') {
      *key_end = end;
      return i;
    }
    i = end;
  }
  return npos;
}

}  // namespace

TextFields a1111_settings_fields(std::string_view s) {
  TextFields fields;
  size_t key_end = 0;
  for (size_t at = next_key(s, 0, in_settings_key, &key_end); at != npos;
       at = next_key(s, at, in_settings_key, &key_end)) {
    const size_t v = key_end + 2;
    size_t end = npos;  // the value's end
    if (v < s.size() && s[v] == '"') {
      const size_t close = s.find('"', v + 1);
      if (close != npos && (close + 1 == s.size() || s[close + 1] == ',')) end = close + 1;
    }
    if (end == npos) end = std::min(s.find(',', v), s.size());
    fields.emplace_back(std::string(s.substr(at, key_end - at)), std::string(s.substr(v, end - v)));
    at = end < s.size() ? end + 1 : end;  // past the ','
  }
  return fields;
}

TextFields controlnet_fields(std::string_view s) {
  TextFields fields;
  size_t key_end = 0;
  size_t comma = 0;  // the first ',' at or after some earlier value's start (npos: none left)
  bool comma_known = false;
  for (size_t at = next_key(s, 0, in_controlnet_key, &key_end); at != npos;
       at = next_key(s, at, in_controlnet_key, &key_end)) {
    const size_t v = key_end + 2;
    if (!comma_known || (comma != npos && comma < v)) {
      comma = s.find(',', v);
      comma_known = true;
    }
    if (comma == npos) {  // the value runs to the end
      fields.emplace_back(std::string(s.substr(at, key_end - at)), std::string(s.substr(v)));
      break;
    }
    if (comma + 1 < s.size() && s[comma + 1] == ' ') {
      fields.emplace_back(std::string(s.substr(at, key_end - at)), std::string(s.substr(v, comma - v)));
      at = comma + 2;
    } else {
      at = key_end;  // ',' without ' ': no field starts in this key; look after it
    }
  }
  return fields;
}

}  // namespace octodiff
