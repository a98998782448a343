// Model profiles: parsing the YAML data into Profile values.
#include "attnkit/select/profile.hpp"

#include <yaml-cpp/yaml.h>

#include <fstream>
#include <mutex>
#include <sstream>

#include "select/embedded_profiles.hpp"
#include "select/text_util.hpp"

namespace attnkit::select {

const ComponentSpec* Profile::find_component(std::string_view n) const {
  for (const ComponentSpec& c : components)
    if (c.name == n) return &c;
  return nullptr;
}

std::vector<std::string> Profile::component_names() const {
  std::vector<std::string> out;
  for (const ComponentSpec& c : components) out.push_back(c.name);
  return out;
}

bool Profile::is_llm() const {
  for (const ComponentSpec& c : components)
    if (c.llm) return true;
  return false;
}

namespace {

// Thrown inside the parser, turned into AK4021 at its boundary.
struct ProfileError {
  std::string detail;
};

template <class T>
T get(const YAML::Node& n, const char* key, T fallback) {
  const YAML::Node v = n[key];
  if (!v) return fallback;
  try {
    return v.as<T>();
  } catch (const YAML::Exception&) {
    throw ProfileError{std::string("field '") + key + "' has the wrong type"};
  }
}

std::vector<std::string> get_list(const YAML::Node& n, const char* key) {
  std::vector<std::string> out;
  const YAML::Node v = n[key];
  if (!v) return out;
  if (!v.IsSequence()) throw ProfileError{std::string("field '") + key + "' must be a list"};
  for (const auto& item : v) out.push_back(item.as<std::string>());
  return out;
}

MaskKind parse_mask(const std::string& s) {
  for (MaskKind m : {MaskKind::none, MaskKind::causal, MaskKind::sliding_window, MaskKind::block_sparse, MaskKind::custom})
    if (mask_kind_name(m) == s) return m;
  throw ProfileError{"unknown mask '" + s + "' (none, causal, sliding_window, block_sparse, custom)"};
}

KeyType parse_key_type(const std::string& s) {
  for (KeyType t : {KeyType::boolean, KeyType::integer, KeyType::number, KeyType::string, KeyType::path, KeyType::layer_list})
    if (key_type_name(t) == s) return t;
  throw ProfileError{"unknown config key type '" + s + "' (bool, int, float, string, path, layer list)"};
}

RoleSpec parse_role(const YAML::Node& n) {
  RoleSpec r;
  r.name = get<std::string>(n, "name", "");
  if (r.name.empty()) throw ProfileError{"a role has no name"};
  r.layers = get(n, "layers", 1);
  r.heads = get(n, "heads", 1);
  r.kv_heads = get(n, "kv_heads", r.heads);
  r.head_dim = get(n, "head_dim", 64);
  r.head_dim_v = get(n, "head_dim_v", r.head_dim);
  r.mask = parse_mask(get<std::string>(n, "mask", "none"));
  const std::string layout = get<std::string>(n, "layout", "bshd");
  const auto l = parse_layout(layout);
  if (!l) throw ProfileError{"unknown layout '" + layout + "' (bshd, bhsd, thd)"};
  r.layout = *l;
  r.paged_kv = get(n, "paged_kv", false);
  r.cross = get(n, "cross", false);
  r.sequence_parallel = get(n, "sequence_parallel", false);
  r.default_backend = get<std::string>(n, "default", "");
  r.seqlen = get(n, "seqlen", 4096);
  return r;
}

Profile parse_one(const YAML::Node& root, std::string_view source) {
  if (!root.IsMap()) throw ProfileError{"the profile must be a mapping"};
  Profile p;
  p.name = get<std::string>(root, "name", "");
  if (p.name.empty()) throw ProfileError{"missing 'name'"};
  p.kind = get<std::string>(root, "kind", "");
  p.description = get<std::string>(root, "description", "");
  p.source = std::string(source);
  if (const YAML::Node r = root["rules"]) {
    ProfileRules& x = p.rules;
    x.ring_backend = get<std::string>(r, "ring_backend", "");
    x.sparse_rejects_ring = get(r, "sparse_rejects_ring", false);
    x.sparse_rejects_torch_compile = get(r, "sparse_rejects_torch_compile", false);
    x.sparse_rejects_breakable_graph = get(r, "sparse_rejects_breakable_graph", false);
    x.required_backend = get<std::string>(r, "required_backend", "");
    x.required_component = get<std::string>(r, "required_component", "");
    x.required_role = get<std::string>(r, "required_role", "");
    x.dense_escape_key = get<std::string>(r, "dense_escape_key", "");
    x.rejects_ring = get(r, "rejects_ring", false);
    x.rejects_torch_compile = get(r, "rejects_torch_compile", false);
    x.rejects_breakable_graph = get(r, "rejects_breakable_graph", false);
    x.linear_branch = get(r, "linear_branch", false);
    x.gated_compression = get(r, "gated_compression", false);
    x.sparse_mla = get(r, "sparse_mla", false);
    x.kv_cache_dtypes = get_list(r, "kv_cache_dtypes");
    x.replicated_text_tokens = get(r, "replicated_text_tokens", false);
  }
  p.config_keys.owner = "model:" + p.name;
  if (const YAML::Node keys = root["config_keys"]) {
    for (const auto& k : keys) {
      KeySchema s = KeySchema::of(get<std::string>(k, "key", ""), parse_key_type(get<std::string>(k, "type", "string")));
      s.default_text = get<std::string>(k, "default", "");
      s.required = get(k, "required", false);
      p.config_keys.keys.push_back(std::move(s));
    }
  }
  const YAML::Node comps = root["components"];
  if (!comps || !comps.IsSequence() || comps.size() == 0) throw ProfileError{"missing 'components' (a non-empty list)"};
  for (const auto& cn : comps) {
    ComponentSpec c;
    c.name = get<std::string>(cn, "name", "");
    if (c.name.empty()) throw ProfileError{"a component has no name"};
    if (p.find_component(c.name)) throw ProfileError{"component '" + c.name + "' is listed twice"};
    c.default_backend = get<std::string>(cn, "default", "");
    c.sparse_allowed = get(cn, "sparse_allowed", false);
    c.only = get_list(cn, "only");
    c.allow_list = get_list(cn, "allow_list");
    c.engine_default_applies = get(cn, "engine_default_applies", true);
    c.switchable = get(cn, "switchable", false);
    c.llm = get(cn, "llm", false);
    c.multimodal = get(cn, "multimodal", false);
    c.ring_needs_profile_backend = get(cn, "ring_needs_profile_backend", false);
    const YAML::Node roles = cn["roles"];
    if (!roles || !roles.IsSequence() || roles.size() == 0)
      throw ProfileError{"component '" + c.name + "' has no 'roles'"};
    for (const auto& rn : roles) c.roles.push_back(parse_role(rn));
    p.components.push_back(std::move(c));
  }
  return p;
}

Result<Profile> parse_guarded(const YAML::Node& root, std::string_view source) {
  try {
    return parse_one(root, source);
  } catch (const ProfileError& e) {
    return diagnose("AK4021", {{"source", std::string(source)}, {"detail", e.detail}});
  } catch (const YAML::Exception& e) {
    return diagnose("AK4021", {{"source", std::string(source)}, {"detail", e.what()}});
  }
}

const std::vector<Profile>& shipped_profiles() {
  static const std::vector<Profile> profiles = [] {
    std::vector<Profile> out;
    for (const YAML::Node& doc : YAML::LoadAll(std::string(embedded::profiles_yaml()))) {
      if (doc.IsNull()) continue;
      auto p = parse_guarded(doc, "builtin");
      if (p) out.push_back(std::move(*p));  // a malformed shipped profile is caught by the golden tests
    }
    return out;
  }();
  return profiles;
}

}  // namespace

std::vector<std::string> shipped_profile_names() {
  std::vector<std::string> out;
  for (const Profile& p : shipped_profiles()) out.push_back(p.name);
  return out;
}

Result<Profile> parse_profile(std::string_view yaml_text, std::string_view source) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml_text));
  } catch (const YAML::Exception& e) {
    return diagnose("AK4021", {{"source", std::string(source)}, {"detail", e.what()}});
  }
  return parse_guarded(root, source);
}

Result<Profile> load_profile(std::string_view name_or_path) {
  const std::string name(name_or_path);
  const bool is_path = name.find('/') != std::string::npos || name.ends_with(".yaml") || name.ends_with(".yml");
  if (is_path) {
    std::ifstream in(name);
    if (!in) return diagnose("AK4022", {{"path", name}});
    std::ostringstream os;
    os << in.rdbuf();
    return parse_profile(os.str(), name);
  }
  for (const Profile& p : shipped_profiles())
    if (p.name == name) return p;
  const std::vector<std::string> names = shipped_profile_names();
  const std::string near = nearest_name(name, names);
  return diagnose("AK4020", {{"name", name},
                             {"suggestion", near.empty() ? "" : " (did you mean '" + near + "'?)"},
                             {"valid", join(names)}});
}

}  // namespace attnkit::select
