// Backend configuration: the four input forms and the typed schemas.
#include "attnkit/select/config.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <set>

#include "attnkit/select/selector.hpp"
#include "core/text_file.hpp"
#include "select/json_text.hpp"
#include "select/text_util.hpp"

namespace attnkit::select {

std::string_view config_value_type(const ConfigValue& v) {
  switch (v.index()) {
    case 0: return "bool";
    case 1: return "int";
    case 2: return "float";
    case 3: return "string";
    default: return "int list";
  }
}

std::string config_value_text(const ConfigValue& v) {
  if (const bool* b = std::get_if<bool>(&v)) return *b ? "true" : "false";
  if (const auto* i = std::get_if<std::int64_t>(&v)) return std::to_string(*i);
  if (const double* d = std::get_if<double>(&v)) {
    return fmt::format("{}", *d);
  }
  if (const auto* s = std::get_if<std::string>(&v)) return *s;
  std::string out;
  for (std::int64_t x : std::get<std::vector<std::int64_t>>(v)) out += (out.empty() ? "" : ",") + std::to_string(x);
  return out;
}

std::string_view config_form_name(ConfigForm f) {
  switch (f) {
    case ConfigForm::empty: return "empty";
    case ConfigForm::json_file: return "JSON file";
    case ConfigForm::yaml_file: return "YAML file";
    case ConfigForm::json_string: return "JSON string";
    case ConfigForm::pairs: return "k=v pairs";
  }
  return "?";
}

std::string_view key_type_name(KeyType t) {
  switch (t) {
    case KeyType::boolean: return "bool";
    case KeyType::integer: return "int";
    case KeyType::number: return "float";
    case KeyType::string: return "string";
    case KeyType::path: return "path";
    case KeyType::choice: return "one of";
    case KeyType::backend_choice: return "backend";
    case KeyType::layer_list: return "layer list";
    case KeyType::int_list: return "int list";
  }
  return "?";
}

namespace {

Diagnostic malformed(std::string_view form, std::string_view detail) {
  return diagnose("AK3106", {{"form", std::string(form)}, {"detail", std::string(detail)}});
}

// A scalar written as text (k=v pairs, YAML scalars): bool (true / false in
// any case, as Python writes True), int, float, else string.
ConfigValue infer_scalar(const std::string& s) {
  std::string lower = s;
  for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (lower == "true") return true;
  if (lower == "false") return false;
  const bool digits = !s.empty() && std::all_of(s.begin() + (s[0] == '-' ? 1 : 0), s.end(),
                                                [](char c) { return std::isdigit(static_cast<unsigned char>(c)) || c == '.'; });
  const auto dots = std::count(s.begin(), s.end(), '.');
  if (digits && s != "-" && dots <= 1 && s.find_first_of("0123456789") != std::string::npos) {
    try {
      if (dots == 0) return static_cast<std::int64_t>(std::stoll(s));
      return std::stod(s);
    } catch (...) {
    }
  }
  return s;
}

Result<ConfigValue> config_value_from_json(const std::string& key, const nlohmann::json& j) {
  if (j.is_boolean()) return ConfigValue(j.get<bool>());
  // Integers past int64 (nlohmann keeps them as uint64) stay numbers, as doubles, rather than wrap.
  if (j.is_number_unsigned() && j.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX))
    return ConfigValue(j.get<double>());
  if (j.is_number_integer()) return ConfigValue(j.get<std::int64_t>());
  if (j.is_number_float()) return ConfigValue(j.get<double>());
  if (j.is_string()) return ConfigValue(j.get<std::string>());
  if (j.is_array()) {
    std::vector<std::int64_t> out;
    for (const auto& e : j) {
      if (!e.is_number_integer() || (e.is_number_unsigned() && e.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)))
        return diagnose("AK3102", {{"key", key}, {"expected", "a list of integers"}, {"got", "a list of " + std::string(e.type_name()) + "s"}, {"value", shown_json(j)}});
      out.push_back(e.get<std::int64_t>());
    }
    return ConfigValue(out);
  }
  return diagnose("AK3102", {{"key", key}, {"expected", "a scalar or a list of integers"}, {"got", j.type_name()}, {"value", shown_json(j)}});
}

Result<ParsedConfig> parse_json(std::string_view text, ConfigForm form) {
  JsonText parsed = parse_json_text(text);
  if (!parsed.value) return malformed(config_form_name(form), parsed.problem);
  const nlohmann::json& j = *parsed.value;
  if (!j.is_object()) return malformed(config_form_name(form), "the top level must be an object of key: value");
  ParsedConfig out{form, {}};
  Diagnostics why;
  for (const auto& [k, v] : j.items()) {
    auto value = config_value_from_json(k, v);
    if (!value) why.append(value.diagnostics());
    else out.values[k] = *value;
  }
  if (!why.empty()) return why;
  return out;
}

Result<ParsedConfig> parse_yaml_unguarded(std::string_view text) {
  const YAML::Node root = YAML::Load(std::string(text));
  ParsedConfig out{ConfigForm::yaml_file, {}};
  if (root.IsNull()) return out;
  if (!root.IsMap()) return malformed("YAML file", "the top level must be a mapping of key: value");
  Diagnostics why;
  std::set<std::string> seen;  // yaml-cpp keeps a repeated key twice: the later value would win silently
  for (const auto& kv : root) {
    if (!kv.first.IsScalar()) return malformed("YAML file", "every key must be a plain name, not a list or a mapping");
    const std::string key = kv.first.as<std::string>();
    if (!seen.insert(key).second) return malformed("YAML file", "key '" + key + "' is given twice");
    const YAML::Node& v = kv.second;
    if (v.IsScalar()) {
      // Quoted scalars stay strings; plain ones are inferred like k=v values.
      out.values[key] = v.Tag() == "!" ? ConfigValue(v.as<std::string>()) : infer_scalar(v.as<std::string>());
    } else if (v.IsSequence()) {
      std::vector<std::int64_t> list;
      bool ints = true;
      for (const auto& e : v) {
        const ConfigValue ev = e.IsScalar() ? infer_scalar(e.as<std::string>()) : ConfigValue(std::string());
        if (const auto* i = std::get_if<std::int64_t>(&ev)) list.push_back(*i);
        else ints = false;
      }
      if (ints) out.values[key] = list;
      else why.add("AK3102", {{"key", key}, {"expected", "a list of integers"}, {"got", "a list of other values"}, {"value", "[...]"}});
    } else {
      why.add("AK3102", {{"key", key}, {"expected", "a scalar or a list of integers"}, {"got", "a mapping"}, {"value", "{...}"}});
    }
  }
  if (!why.empty()) return why;
  return out;
}

Result<ParsedConfig> parse_yaml(std::string_view text) {
  try {
    return parse_yaml_unguarded(text);
  } catch (const YAML::Exception& e) {  // malformed text, DeepRecursion, a conversion that failed
    return malformed("YAML file", e.what());
  }
}

Result<ParsedConfig> parse_pairs(std::string_view text) {
  ParsedConfig out{ConfigForm::pairs, {}};
  std::string last_key;
  std::string last_raw;
  auto flush = [&] {
    if (!last_key.empty()) out.values[last_key] = infer_scalar(last_raw);
  };
  for (const std::string& raw : split(text, ',')) {
    const std::string part = trim(raw);
    const auto eq = part.find('=');
    if (eq == std::string::npos) {
      if (last_key.empty() || part.empty())
        return malformed("k=v pairs", "'" + part + "' is not key=value (in '" + std::string(text) + "')");
      last_raw += "," + part;  // continuation: dense_layers=0,1
      continue;
    }
    flush();
    last_key = trim(part.substr(0, eq));
    last_raw = trim(part.substr(eq + 1));
    if (last_key.empty()) return malformed("k=v pairs", "'" + part + "' has an empty key");
    if (out.values.count(last_key)) return malformed("k=v pairs", "key '" + last_key + "' is given twice");
  }
  flush();
  return out;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

bool is_regular_file(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec);
}

}  // namespace

Result<ParsedConfig> parse_backend_config(std::string_view text_in) {
  const std::string text = trim(text_in);
  if (text.empty()) return ParsedConfig{};
  if (text.front() == '{') return parse_json(text, ConfigForm::json_string);
  const bool has_eq = text.find('=') != std::string::npos;
  const bool json_name = ends_with(text, ".json");
  const bool yaml_name = ends_with(text, ".yaml") || ends_with(text, ".yml");
  // A file only when one exists, or when nothing else fits: k=v pairs may end
  // in a path (mask_strategy_file_path=/abs/path/mask.json).
  const bool file_like = !has_eq && (json_name || yaml_name || text.find('/') != std::string::npos);
  if (is_regular_file(text) || file_like) {
    const TextFile file = read_text_file(text);
    if (!file.text)
      return diagnose("AK3105", {{"path", text}, {"what", "--attention-backend-config file"}, {"reason", file.problem}});
    const std::string& contents = *file.text;
    if (json_name) return parse_json(contents, ConfigForm::json_file);
    if (yaml_name) return parse_yaml(contents);
    // No extension: JSON when it looks like JSON, YAML otherwise.
    const std::string body = trim(contents);
    if (!body.empty() && body.front() == '{') return parse_json(body, ConfigForm::json_file);
    return parse_yaml(contents);
  }
  if (!has_eq) return malformed("k=v pairs", "'" + text + "' is neither key=value pairs, JSON, nor a readable file");
  return parse_pairs(text);
}

// ---- schemas ---------------------------------------------------------------------

std::string KeySchema::range_text() const {
  if (type == KeyType::choice || type == KeyType::backend_choice) {
    std::string out;
    for (const auto& c : choices) out += (out.empty() ? "" : " | ") + c;
    return out;
  }
  auto num = [](double x) { return fmt::format("{}", x); };
  if (min && max) return std::string(min_exclusive ? "(" : "[") + num(*min) + ", " + num(*max) + (max_exclusive ? ")" : "]");
  if (min) return std::string(min_exclusive ? "> " : ">= ") + num(*min) + (also.empty() ? "" : " or " + join(also, " or "));
  if (max) return std::string(max_exclusive ? "< " : "<= ") + num(*max);
  return "any";
}

const KeySchema* BackendSchema::find(std::string_view key) const {
  for (const KeySchema& k : keys)
    if (k.key == key) return &k;
  return nullptr;
}

const std::vector<BackendSchema>& backend_schemas() {
  static const std::vector<BackendSchema> schemas = [] {
    auto num = [](std::string key, std::optional<double> lo, bool lo_ex, std::optional<double> hi, bool hi_ex,
                  std::string def) {
      KeySchema k = KeySchema::of(std::move(key), KeyType::number);
      k.min = lo, k.min_exclusive = lo_ex, k.max = hi, k.max_exclusive = hi_ex, k.default_text = std::move(def);
      return k;
    };
    auto count = [](std::string key, std::string def) {
      KeySchema k = KeySchema::of(std::move(key), KeyType::integer);
      k.min = 0.0, k.max = 2147483647.0, k.default_text = std::move(def);  // the backends hold counts as ints
      return k;
    };
    KeySchema mask_file = KeySchema::of("mask_strategy_file_path", KeyType::path);
    mask_file.required = true;
    KeySchema sta_mode = KeySchema::of("sta_mode", KeyType::choice);
    sta_mode.choices = {"STA_inference", "STA_searching", "STA_tuning", "STA_tuning_cfg"};
    sta_mode.default_text = "STA_inference";
    KeySchema dense_backend = KeySchema::of("dense_backend", KeyType::backend_choice);
    dense_backend.choices = {"fa", "sage_attn"};
    dense_backend.default_text = "fa";
    KeySchema dense_layers = KeySchema::of("dense_layers", KeyType::layer_list);
    dense_layers.default_text = "\"0,1\"";
    KeySchema kv_splits = KeySchema::of("kv_splits", KeyType::integer);
    kv_splits.min = 1.0, kv_splits.also = {"auto"}, kv_splits.default_text = "auto";
    // attnkit runs Sol-Attn's diagonal-band rule only (docs/sparse.md).
    KeySchema thresh_type = KeySchema::of("thresh_type", KeyType::choice);
    thresh_type.choices = {"diag"};
    thresh_type.default_text = "diag";
    // attnkit's own sliding-tile keys (docs/sparse.md): tiles and the border rule.
    KeySchema tile_size = KeySchema::of("tile_size", KeyType::int_list);
    // Sides up to 1024: a tile's tokens (their product) stay an int.
    tile_size.count = 3, tile_size.min = 1.0, tile_size.max = 1024.0, tile_size.default_text = "6,8,8";
    KeySchema window_border = KeySchema::of("window_border", KeyType::choice);
    window_border.choices = {"shift", "cut"};
    window_border.default_text = "shift";
    const KeySchema sparsity = num("sparsity", 0.0, false, 1.0, true, "0.9");
    // hybrid_window_attn_h3's softmax window (left, right) in tokens, for problems without their own.
    KeySchema window_size = KeySchema::of("window_size", KeyType::int_list);
    window_size.count = 2, window_size.min = 0.0, window_size.max = 1073741823.0, window_size.default_text = "512,512";
    return std::vector<BackendSchema>{
        // SpargeAttn's names: topk, or the cumulative-probability threshold cdfthreshd; simthreshd1 the
        // self-similarity below which a block is attended densely.
        {"sparge_attn",
         {num("topk", 0.0, true, 1.0, false, "0.5"), num("cdfthreshd", 0.0, true, 1.0, false, "(off)"),
          num("simthreshd1", -1.0, false, 1.0, false, "-0.1")},
         {{"topk", "cdfthreshd"}}},
        {"sliding_tile_attn", {mask_file, sta_mode, count("skip_time_steps", "15"), tile_size, window_border}},
        // Sol-Attn's keys as its backend reads them (defaults included).
        {"sol_attn", {dense_backend, count("dense_steps", "10"), dense_layers, num("tau", 0.0, true, std::nullopt, false, "1.0"),
                      count("sink_tokens", "0"), count("sink_start", "0"), kv_splits, thresh_type}},
        {"video_sparse_attn", {sparsity}},
        {"video_sparse_attn_h3", {sparsity}},
        {"hybrid_window_attn_h3", {window_size}},
        {"subblock_sparse_attn", {sparsity}},
        {"skip_softmax", {num("threshold_scale_factor", 0.0, true, std::nullopt, false, "(required to enable)"),
                          count("start_step", "0")}},
    };
  }();
  return schemas;
}

const BackendSchema* find_schema(std::string_view owner) {
  for (const BackendSchema& s : backend_schemas())
    if (s.owner == owner) return &s;
  return nullptr;
}

// Layer indices are below this (models have hundreds of layers, not millions).
constexpr int kMaxLayers = 1 << 16;

namespace {
// "6,8,8" (or "6, 8, 8") as integers; nullopt when any part is not one.
std::optional<std::vector<std::int64_t>> parse_int_list(std::string_view text) {
  std::vector<std::int64_t> out;
  for (const std::string& raw : split(text, ',')) {
    const std::string part = trim(raw);
    try {
      std::size_t used = 0;
      const long long x = std::stoll(part, &used);
      if (used != part.size()) return std::nullopt;
      out.push_back(x);
    } catch (...) {
      return std::nullopt;
    }
  }
  return out;
}
}  // namespace

Result<std::vector<int>> parse_layer_list(std::string_view text) {
  std::vector<int> out;
  auto bad = [&] {
    return diagnose("AK3102", {{"key", "dense_layers"}, {"expected", "a layer list like \"0,1\" or \"0-3\""},
                               {"got", "string"}, {"value", std::string(text)}});
  };
  for (const std::string& raw : split(text, ',')) {
    const std::string part = trim(raw);
    if (part.empty()) continue;
    const auto dash = part.find('-', 1);
    try {
      std::size_t used = 0;
      const int lo = std::stoi(part.substr(0, dash), &used);
      if (used != (dash == std::string::npos ? part.size() : dash) || lo < 0) return bad();
      int hi = lo;
      if (dash != std::string::npos) {
        const std::string rest = part.substr(dash + 1);
        hi = std::stoi(rest, &used);
        if (used != rest.size() || hi < lo) return bad();
      }
      if (hi >= kMaxLayers) return bad();  // also bounds the list this builds
      for (int i = lo; i <= hi; ++i) out.push_back(i);
    } catch (...) {
      return bad();
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

namespace {

// Numeric value of v if it is a number (an int is a valid float).
std::optional<double> numeric(const ConfigValue& v) {
  if (const auto* i = std::get_if<std::int64_t>(&v)) return static_cast<double>(*i);
  if (const double* d = std::get_if<double>(&v)) return *d;
  return std::nullopt;
}

void check_value(const KeySchema& k, const ConfigValue& v, Diagnostics& out) {
  const std::string value = config_value_text(v);
  auto wrong_type = [&](std::string expected) {
    out.add("AK3102", {{"key", k.key}, {"expected", std::move(expected)}, {"got", std::string(config_value_type(v))}, {"value", value}});
  };
  auto out_of_range = [&] { out.add("AK3103", {{"key", k.key}, {"value", value}, {"range", k.range_text()}}); };
  switch (k.type) {
    case KeyType::boolean:
      if (!std::holds_alternative<bool>(v)) wrong_type("bool");
      return;
    case KeyType::integer:
    case KeyType::number: {
      if (const auto* s = std::get_if<std::string>(&v); s && std::find(k.also.begin(), k.also.end(), *s) != k.also.end())
        return;  // a named value besides numbers (kv_splits=auto)
      const bool is_int = std::holds_alternative<std::int64_t>(v);
      if (k.type == KeyType::integer ? !is_int : !numeric(v)) {
        wrong_type(std::string(key_type_name(k.type)));
        return;
      }
      const double x = *numeric(v);
      if (!std::isfinite(x) || (k.min && (k.min_exclusive ? x <= *k.min : x < *k.min)) ||
          (k.max && (k.max_exclusive ? x >= *k.max : x > *k.max)))
        out_of_range();
      return;
    }
    case KeyType::string:
    case KeyType::path:
      if (!std::holds_alternative<std::string>(v)) {
        wrong_type(k.type == KeyType::path ? "path" : "string");
        return;
      }
      if (k.type == KeyType::path && !readable_file(std::get<std::string>(v)))
        out.add("AK3105", {{"path", value}, {"what", "'" + k.key + "'"}, {"reason", "not a readable file"}});
      return;
    case KeyType::choice: {
      const auto* s = std::get_if<std::string>(&v);
      if (s == nullptr) wrong_type("one of " + k.range_text());
      else if (std::find(k.choices.begin(), k.choices.end(), *s) == k.choices.end()) out_of_range();
      return;
    }
    case KeyType::backend_choice: {
      // Backend names as users write them: fa3 or FA is `fa`, sage is sage_attn.
      const auto* s = std::get_if<std::string>(&v);
      if (s == nullptr) {
        wrong_type("a backend name: " + k.range_text());
        return;
      }
      std::string name = normalise_backend_name(*s);
      if (is_flash_family(name)) name = "fa";
      if (std::find(k.choices.begin(), k.choices.end(), name) == k.choices.end()) out_of_range();
      return;
    }
    case KeyType::int_list: {
      std::optional<std::vector<std::int64_t>> list;
      if (const auto* l = std::get_if<std::vector<std::int64_t>>(&v)) list = *l;
      else if (const auto* s = std::get_if<std::string>(&v)) list = parse_int_list(*s);
      const std::string what = (k.count > 0 ? std::to_string(k.count) + " integers" : std::string("integers")) +
                               " like \"6,8,8\"";
      if (!list) {
        wrong_type(what);
        return;
      }
      bool fits = k.count == 0 || static_cast<int>(list->size()) == k.count;
      for (std::int64_t x : *list) fits = fits && (!k.min || x >= *k.min) && (!k.max || x <= *k.max);
      if (!fits) out.add("AK3103", {{"key", k.key}, {"value", value}, {"range", what + (k.min || k.max ? ", each " + k.range_text() : "")}});
      return;
    }
    case KeyType::layer_list:
      if (std::holds_alternative<std::vector<std::int64_t>>(v)) {
        for (std::int64_t x : std::get<std::vector<std::int64_t>>(v))
          if (x < 0) out_of_range();
      } else if (const auto* i = std::get_if<std::int64_t>(&v)) {
        if (*i < 0) out_of_range();
      } else if (const auto* s = std::get_if<std::string>(&v)) {
        if (auto parsed = parse_layer_list(*s); !parsed) out.append(parsed.diagnostics());
      } else {
        wrong_type("layer list");
      }
      return;
  }
}

}  // namespace

Diagnostics validate_config(const BackendConfig& config, std::span<const BackendSchema* const> schemas,
                            std::string_view context) {
  Diagnostics out;
  std::vector<std::string> valid;
  for (const BackendSchema* s : schemas)
    for (const KeySchema& k : s->keys) valid.push_back(k.key);
  for (const auto& [key, value] : config) {
    const KeySchema* schema = nullptr;
    for (const BackendSchema* s : schemas)
      if ((schema = s->find(key))) break;
    if (schema == nullptr) {
      const std::string near = nearest_name(key, valid);
      out.add("AK3101", {{"key", key},
                         {"context", std::string(context)},
                         {"suggestion", near.empty() ? "" : " (did you mean '" + near + "'?)"},
                         {"valid", valid.empty() ? "(none: no selected backend takes configuration)" : join(valid)}});
      continue;
    }
    check_value(*schema, value, out);
  }
  for (const BackendSchema* s : schemas) {
    for (const KeySchema& k : s->keys)
      if (k.required && !config.count(k.key))
        out.add("AK3104", {{"key", k.key}, {"owner", s->owner}});
    for (const auto& [a, b] : s->exclusive)
      if (config.count(a) && config.count(b)) out.add("AK3111", {{"a", a}, {"b", b}, {"owner", s->owner}});
  }
  return out;
}

}  // namespace attnkit::select

namespace attnkit::select {

Diagnostics validate_own_config(const BackendConfig& config, const BackendSchema& schema) {
  BackendConfig own;
  for (const auto& [key, value] : config)
    if (schema.find(key)) own[key] = value;
  const BackendSchema* schemas[] = {&schema};
  return validate_config(own, schemas, schema.owner);
}

std::optional<std::int64_t> config_int(const BackendConfig& config, std::string_view key) {
  const auto it = config.find(std::string(key));
  if (it == config.end()) return std::nullopt;
  if (const auto* i = std::get_if<std::int64_t>(&it->second)) return *i;
  return std::nullopt;
}

std::optional<double> config_number(const BackendConfig& config, std::string_view key) {
  const auto it = config.find(std::string(key));
  if (it == config.end()) return std::nullopt;
  return numeric(it->second);
}

std::optional<std::string> config_string(const BackendConfig& config, std::string_view key) {
  const auto it = config.find(std::string(key));
  if (it == config.end()) return std::nullopt;
  if (const auto* s = std::get_if<std::string>(&it->second)) return *s;
  return config_value_text(it->second);
}

std::optional<std::vector<std::int64_t>> config_int_list(const BackendConfig& config, std::string_view key) {
  const auto it = config.find(std::string(key));
  if (it == config.end()) return std::nullopt;
  if (const auto* l = std::get_if<std::vector<std::int64_t>>(&it->second)) return *l;
  if (const auto* i = std::get_if<std::int64_t>(&it->second)) return std::vector<std::int64_t>{*i};
  if (const auto* s = std::get_if<std::string>(&it->second)) return parse_int_list(*s);
  return std::nullopt;
}

std::optional<std::vector<int>> config_layer_list(const BackendConfig& config, std::string_view key) {
  const auto it = config.find(std::string(key));
  if (it == config.end()) return std::nullopt;
  std::vector<int> out;
  if (const auto* l = std::get_if<std::vector<std::int64_t>>(&it->second)) {
    for (std::int64_t x : *l) out.push_back(static_cast<int>(x));
  } else if (const auto* i = std::get_if<std::int64_t>(&it->second)) {
    out.push_back(static_cast<int>(*i));
  } else if (const auto* s = std::get_if<std::string>(&it->second)) {
    auto parsed = parse_layer_list(*s);
    if (!parsed) return std::nullopt;
    out = *parsed;
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace attnkit::select
