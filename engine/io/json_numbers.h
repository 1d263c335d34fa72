// Reading numbers out of JSON that strangers wrote (model configs, PNG metadata) without
// undefined behaviour.
//
// nlohmann's get<int>() converts with a plain cast: a JSON float such as 8.9e110 becomes an int by
// undefined behaviour (fuzz_configs found it), an integer such as 2^32 + 5 silently becomes 5 and
// passes every later range check, and get<float>() of 1e300 is undefined too. checked_get<T> is
// get<T> for every other T; for integer types — alone or as the elements of (nested) std::vectors
// — it accepts only JSON integers (or integral floats such as 4.0) that fit T, for float only
// numbers within its range, and otherwise throws nlohmann::json::type_error as get<T> does for a
// value of the wrong type, so callers that name the offending key keep doing so.
#pragma once

#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

namespace octodiff {

namespace json_detail {

template <typename T>
struct IsVector : std::false_type {};
template <typename T>
struct IsVector<std::vector<T>> : std::true_type {};

template <typename T>
T checked_integer(const nlohmann::json& v) {
  static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>);
  bool fits = false;
  if (v.is_number_float()) {  // 4.0 is 4 (configs written by scripts); 4.5 or 1e300 is no integer
    const double d = v.get<double>();
    fits = std::isfinite(d) && d == std::trunc(d) && d >= static_cast<double>(std::numeric_limits<T>::min()) &&
           d < std::ldexp(1.0, std::numeric_limits<T>::digits);
    if (fits) return static_cast<T>(d);
  } else if (v.is_number_unsigned()) {
    fits = v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max());
  } else if (v.is_number_integer()) {
    const int64_t i = v.get<int64_t>();
    if constexpr (std::is_signed_v<T>)
      fits = i >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
             i <= static_cast<int64_t>(std::numeric_limits<T>::max());
    else
      fits = i >= 0 && static_cast<uint64_t>(i) <= static_cast<uint64_t>(std::numeric_limits<T>::max());
  }
  if (!fits)
    throw nlohmann::json::type_error::create(
        302, "expected an integer between " + std::to_string(std::numeric_limits<T>::min()) + " and " +
                 std::to_string(std::numeric_limits<T>::max()) + ", got " + v.dump(),
        &v);
  return v.is_number_unsigned() ? static_cast<T>(v.get<uint64_t>()) : static_cast<T>(v.get<int64_t>());
}

}  // namespace json_detail

template <typename T>
T checked_get(const nlohmann::json& v) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    return json_detail::checked_integer<T>(v);
  } else if constexpr (std::is_same_v<T, float>) {
    // A double outside float's range converts by undefined behaviour too.
    const double d = v.get<double>();
    if (d > std::numeric_limits<float>::max() || d < -std::numeric_limits<float>::max())
      throw nlohmann::json::type_error::create(302, "number " + v.dump() + " does not fit a float", &v);
    return static_cast<float>(d);
  } else if constexpr (json_detail::IsVector<T>::value) {
    if constexpr (std::is_same_v<typename T::value_type, bool>) {
      return v.get<T>();
    } else {
      if (!v.is_array()) throw nlohmann::json::type_error::create(302, "expected a list, got " + v.dump(), &v);
      T out;
      out.reserve(v.size());
      for (const nlohmann::json& e : v) out.push_back(checked_get<typename T::value_type>(e));
      return out;
    }
  } else {
    return v.get<T>();
  }
}

// j[key] through checked_get when j has the key, else the fallback (nlohmann's value(), checked).
template <typename T>
T checked_value(const nlohmann::json& j, const char* key, T fallback) {
  const auto it = j.find(key);
  return it == j.end() ? fallback : checked_get<T>(*it);
}

}  // namespace octodiff
