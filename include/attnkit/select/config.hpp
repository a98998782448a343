#pragma once
// Backend configuration (design section 3): `--attention-backend-config` in its
// four forms (JSON file, YAML file, JSON string, k=v pairs) parsed into one flat
// map, then validated against the typed schema each configurable backend
// declares. Every failure is a catalogued AK31xx diagnostic.
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "attnkit/core/diagnostic.hpp"

namespace attnkit::select {

using ConfigValue = std::variant<bool, std::int64_t, double, std::string, std::vector<std::int64_t>>;
// Ordered by key so every report and decision is deterministic.
using BackendConfig = std::map<std::string, ConfigValue>;

std::string_view config_value_type(const ConfigValue& v);  // "bool", "int", "float", "string", "int list"
std::string config_value_text(const ConfigValue& v);

enum class ConfigForm { empty, json_file, yaml_file, json_string, pairs };
std::string_view config_form_name(ConfigForm f);

struct ParsedConfig {
  ConfigForm form = ConfigForm::empty;
  BackendConfig values;
};

// Detects the form: "" (empty), "{...}" (JSON string), an existing file, a
// file-like path without '=' (.json / .yaml / .yml or containing '/'),
// otherwise "k=v,k2=v2" pairs where true/false in any case -> bool, digits ->
// int, digits with '.' -> float, else string. In pairs, a comma-separated
// fragment without '=' continues the previous value, so `dense_layers=0,1`
// keeps "0,1".
Result<ParsedConfig> parse_backend_config(std::string_view text);

// backend_choice: one of `choices` as a backend name, aliases and flash
// kernels included (fa3, FA, flash_attn -> fa; sage -> sage_attn).
// int_list: `count` integers >= min, as a list or "a,b,c" text (tile_size=6,8,8).
enum class KeyType { boolean, integer, number, string, path, choice, backend_choice, layer_list, int_list };
std::string_view key_type_name(KeyType t);

struct KeySchema {
  std::string key;
  KeyType type = KeyType::string;
  bool required = false;
  std::optional<double> min, max;  // numeric bounds
  bool min_exclusive = false, max_exclusive = false;
  std::vector<std::string> choices;  // KeyType::choice, backend_choice
  std::vector<std::string> also;     // numeric keys: names accepted besides numbers ("auto")
  int count = 0;                     // int_list: exact length (0: any)
  std::string default_text;          // documentation only
  std::string range_text() const;    // "(0, 1]", ">= 0", "fa | sage_attn"
  static KeySchema of(std::string key, KeyType type) {
    KeySchema k;
    k.key = std::move(key);
    k.type = type;
    return k;
  }
};

struct BackendSchema {
  std::string owner;  // backend name, "skip_softmax", or "model:<profile>"
  std::vector<KeySchema> keys;
  std::vector<std::pair<std::string, std::string>> exclusive = {};  // keys that choose between two rules (AK3111)
  const KeySchema* find(std::string_view key) const;
};

// The schemas of design section 3 (sparge_attn, sliding_tile_attn, sol_attn,
// video_sparse_attn, video_sparse_attn_h3, hybrid_window_attn_h3,
// subblock_sparse_attn, skip_softmax).
const std::vector<BackendSchema>& backend_schemas();
const BackendSchema* find_schema(std::string_view owner);

// Checks `config` against the union of `schemas`: unknown key (AK3101, listing
// the valid keys and the nearest), wrong type (AK3102), out of range (AK3103),
// missing required key of any schema (AK3104), unreadable path value (AK3105),
// two keys of an exclusive pair given together (AK3111).
Diagnostics validate_config(const BackendConfig& config, std::span<const BackendSchema* const> schemas,
                            std::string_view context);

// "0,1" and ranges "0-3" -> sorted, unique layer indices.
Result<std::vector<int>> parse_layer_list(std::string_view text);

// What a backend reads of a deployment's config: only its own schema's keys
// (the others belong to other selected backends), checked as validate_config
// does, required keys included.
Diagnostics validate_own_config(const BackendConfig& config, const BackendSchema& schema);
// Typed reads of validated keys; nullopt when the key is absent. An int is a
// valid number; an int list may be written "a,b,c"; a layer list as "0-3,7".
std::optional<std::int64_t> config_int(const BackendConfig& config, std::string_view key);
std::optional<double> config_number(const BackendConfig& config, std::string_view key);
std::optional<std::string> config_string(const BackendConfig& config, std::string_view key);
std::optional<std::vector<std::int64_t>> config_int_list(const BackendConfig& config, std::string_view key);
std::optional<std::vector<int>> config_layer_list(const BackendConfig& config, std::string_view key);

}  // namespace attnkit::select
