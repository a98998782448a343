// Model profiles: parsing the YAML data into Profile values.
#include "attnkit/select/profile.hpp"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <mutex>
#include <sstream>
#include <system_error>

#include "attnkit/select/selector.hpp"
#include "core/text_file.hpp"
#include "select/embedded_profiles.hpp"
#include "select/text_util.hpp"

namespace attnkit::select {

const std::vector<CheckpointFeature>& checkpoint_features() {
  static const std::vector<CheckpointFeature> features = {
      {"linear_branch", "a gated linear-attention branch beside window softmax attention", "AK4009", true},
      {"compression_gates", "trained compression gates for the coarse branch of video sparse attention", "AK4009", true},
      {"sparse_mla", "DeepSeek-style sparse MLA (an indexer over a latent KV cache, as GLM-DSA)", "AK4015"},
      // What engine backends (SGLang names) read from the checkpoint; a model
      // without it refuses them with AK4009.
      {"mla", "multi-head latent attention (a compressed latent KV cache, DeepSeek-V2/V3 style)", "AK4009"},
      {"dsa_indexer", "a DeepSeek sparse-attention indexer that picks the top-k keys of each query", "AK4009"},
      {"dsv4_compressed", "DeepSeek-V4 compressed sparse attention (compressed KV blocks and their indexer)", "AK4009"},
      {"dual_chunk", "a dual_chunk_attention_config (dual chunk attention for long contexts, Qwen2.5-1M style)", "AK4009"},
      {"minicpm_sparse", "MiniCPM sparse attention layers (the MiniCPM-SALA compressed-cache layout)", "AK4009"},
      {"sla_linear", "the trained linear-attention branch of Sparse-Linear Attention (SLA-finetuned weights)", "AK4009"},
  };
  return features;
}

const CheckpointFeature* find_checkpoint_feature(std::string_view name) {
  for (const CheckpointFeature& f : checkpoint_features())
    if (f.name == name) return &f;
  return nullptr;
}

bool CheckpointSpec::has(std::string_view feature) const {
  return std::find(provides.begin(), provides.end(), feature) != provides.end();
}

const ComponentSpec* Profile::find_component(std::string_view n) const {
  const std::string wanted = normalise_name(n);
  for (const ComponentSpec& c : components)
    if (c.name == wanted) return &c;
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

Problem RoleSpec::problem() const {
  Problem p;
  p.layout = layout;
  p.batch = 1;
  p.seqlen_k = seqlen;
  p.seqlen_q = seqlen_q > 0 ? seqlen_q : seqlen;
  p.heads_q = heads;
  p.heads_kv = kv_heads;
  p.head_dim_qk = head_dim;
  p.head_dim_v = head_dim_v;
  p.mask = mask;
  if (paged_kv) p.paged_kv = PagedKv{};  // the engine's --page-size replaces the default (make_problem)
  p.video = video;
  return p;
}

namespace {

// Thrown inside the parser, returned as the diagnostic at its boundary.
struct ProfileError {
  Diagnostic why;
};

std::string scalar_text(const YAML::Node& n) {
  if (n.IsScalar()) return n.Scalar();
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a mapping";
  return "nothing";
}

// One YAML mapping of the profile with the keys its schema allows; every read
// is typed, and a key outside `keys` is refused (a misspelt key would
// otherwise be ignored silently).
class Section {
 public:
  Section(const YAML::Node& node, std::string where, std::vector<std::string> keys, std::string source)
      : node_(node), where_(std::move(where)), keys_(std::move(keys)), source_(std::move(source)) {
    if (!node_.IsMap()) wrong("", "a mapping", scalar_text(node_));
    std::vector<std::string> seen;
    for (const auto& kv : node_) {
      const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : "?";
      // yaml-cpp keeps both entries of a repeated key and node[key] reads the first:
      // the second value would be ignored silently.
      if (std::find(seen.begin(), seen.end(), key) != seen.end())
        malformed("key '" + key + "' appears twice in " + where_);
      seen.push_back(key);
      if (std::find(keys_.begin(), keys_.end(), key) != keys_.end()) continue;
      const std::string near = nearest_name(key, keys_);
      throw ProfileError{diagnose("AK4023", {{"source", source_},
                                             {"key", key},
                                             {"where", where_},
                                             {"suggestion", near.empty() ? "" : " (did you mean '" + near + "'?)"},
                                             {"valid", join(keys_)}})};
    }
  }

  bool has(const char* key) const { return static_cast<bool>(node_[key]); }
  YAML::Node node(const char* key) const { return node_[key]; }

  std::string text(const char* key, std::string fallback = "") const {
    const YAML::Node v = node_[key];
    if (!v) return fallback;
    if (!v.IsScalar()) wrong(key, "a string", scalar_text(v));
    return v.Scalar();
  }
  bool flag(const char* key, bool fallback) const {
    const YAML::Node v = node_[key];
    if (!v) return fallback;
    bool out = false;
    if (!v.IsScalar() || !YAML::convert<bool>::decode(v, out)) wrong(key, "true or false", scalar_text(v));
    return out;
  }
  int integer(const char* key, int fallback, int min) const {
    const YAML::Node v = node_[key];
    if (!v) return fallback;
    int out = 0;
    if (!v.IsScalar() || !YAML::convert<int>::decode(v, out)) wrong(key, "an integer", scalar_text(v));
    if (out < min) wrong(key, "an integer >= " + std::to_string(min), v.Scalar());
    return out;
  }
  std::vector<std::string> list(const char* key) const {
    std::vector<std::string> out;
    const YAML::Node v = node_[key];
    if (!v) return out;
    if (!v.IsSequence()) wrong(key, "a list", scalar_text(v));
    for (const auto& item : v) {
      if (!item.IsScalar()) wrong(key, "a list of names", "an entry that is " + scalar_text(item));
      out.push_back(item.Scalar());
    }
    return out;
  }
  // A list of checkpoint feature names from the fixed vocabulary.
  std::vector<std::string> features(const char* key) const {
    std::vector<std::string> out = list(key);
    std::vector<std::string> known;
    for (const CheckpointFeature& f : checkpoint_features()) known.emplace_back(f.name);
    for (const std::string& f : out)
      if (!find_checkpoint_feature(f)) wrong(key, "checkpoint features from: " + join(known), f);
    return out;
  }
  [[noreturn]] void wrong(std::string_view key, std::string expected, std::string got) const {
    throw ProfileError{diagnose("AK4024", {{"source", source_},
                                           {"field", key.empty() ? where_ : std::string(key) + "' of " + where_},
                                           {"expected", std::move(expected)},
                                           {"got", std::move(got)}})};
  }
  [[noreturn]] void malformed(std::string detail) const {
    throw ProfileError{diagnose("AK4021", {{"source", source_}, {"detail", std::move(detail)}})};
  }
  const std::string& where() const { return where_; }

 private:
  YAML::Node node_;
  std::string where_;
  std::vector<std::string> keys_;
  std::string source_;
};

MaskKind parse_mask(const Section& s) {
  const std::string text = s.text("mask", "none");
  for (MaskKind m : kAllMaskKinds)
    if (mask_kind_name(m) == text) return m;
  s.wrong("mask", "none, causal, sliding_window or custom", text);
}

KeyType parse_key_type(const Section& s) {
  const std::string text = s.text("type", "string");
  for (KeyType t : {KeyType::boolean, KeyType::integer, KeyType::number, KeyType::string, KeyType::path, KeyType::layer_list})
    if (key_type_name(t) == text) return t;
  s.wrong("type", "bool, int, float, string, path or layer list", text);
}

// A role's attention shape must be a valid Problem, so that `check` never
// calls valid a profile every call of which would be refused.
void check_role_shape(const Section& s, const RoleSpec& r, const std::string& component) {
  const Diagnostics why = validate_problem(r.problem());
  if (!why.ok()) s.malformed("role '" + r.name + "' of component '" + component + "': " + why.begin()->message);
}

RoleSpec parse_role(const YAML::Node& n, const std::string& component, const std::string& source) {
  const std::string where = "a role of component '" + component + "'";
  const Section s(n, where, {"name", "layers", "heads", "kv_heads", "head_dim", "head_dim_v", "mask", "layout", "paged_kv",
                             "cross", "sequence_parallel", "default", "seqlen", "seqlen_q", "video", "weights_need"},
                  source);
  RoleSpec r;
  r.name = normalise_name(s.text("name"));
  if (r.name.empty()) s.malformed(where + " has no name");
  r.layers = s.integer("layers", 1, 0);
  r.heads = s.integer("heads", 1, 1);
  r.kv_heads = s.integer("kv_heads", r.heads, 1);
  r.head_dim = s.integer("head_dim", 64, 1);
  r.head_dim_v = s.integer("head_dim_v", r.head_dim, 1);
  r.mask = parse_mask(s);
  const std::string layout = s.text("layout", "bshd");
  const auto l = parse_layout(layout);
  if (!l) s.wrong("layout", "bshd, bhsd or thd", layout);
  r.layout = *l;
  r.paged_kv = s.flag("paged_kv", false);
  r.cross = s.flag("cross", false);
  r.sequence_parallel = s.flag("sequence_parallel", false);
  r.default_backend = s.text("default");
  r.seqlen = s.integer("seqlen", 4096, 1);
  r.seqlen_q = s.integer("seqlen_q", 0, 0);
  if (s.has("video")) {
    const YAML::Node v = s.node("video");
    std::vector<int> dims;
    if (v.IsSequence())
      for (const auto& d : v) {
        int x = 0;
        if (d.IsScalar() && YAML::convert<int>::decode(d, x) && x > 0) dims.push_back(x);
      }
    if (dims.size() != 3 || v.size() != 3) s.wrong("video", "[frames, height, width] of positive integers", scalar_text(v));
    r.video = VideoGrid{dims[0], dims[1], dims[2]};
  }
  r.weights_need = s.features("weights_need");
  check_role_shape(s, r, component);
  return r;
}

// A profile describes one model: a few components of a few roles each. The
// bounds keep `check` fast on any file, since YAML aliases repeat a list of
// roles in every component that names it (a 108 KB profile made 4 million
// roles: 78 s of check, hours for a 1 MiB one), and are checked before the
// entries are parsed.
constexpr std::size_t kMaxComponents = 64;
constexpr std::size_t kMaxRolesPerComponent = 64;

ComponentSpec parse_component(const YAML::Node& n, const std::string& source) {
  const Section s(n, "a component", {"name", "default", "roles", "sparse_allowed", "only", "allow_list", "auto",
                                     "engine_default_applies", "switchable", "llm", "multimodal",
                                     "ring_needs_profile_backend", "weights_need"},
                  source);
  ComponentSpec c;
  c.name = normalise_name(s.text("name"));
  if (c.name.empty()) s.malformed("a component has no name");
  c.default_backend = s.text("default");
  c.sparse_allowed = s.flag("sparse_allowed", false);
  c.only = s.list("only");
  c.allow_list = s.list("allow_list");
  c.auto_order = s.list("auto");
  c.engine_default_applies = s.flag("engine_default_applies", true);
  c.switchable = s.flag("switchable", false);
  c.llm = s.flag("llm", false);
  c.multimodal = s.flag("multimodal", false);
  c.ring_needs_profile_backend = s.flag("ring_needs_profile_backend", false);
  c.weights_need = s.features("weights_need");
  const YAML::Node roles = s.node("roles");
  if (!roles || !roles.IsSequence() || roles.size() == 0) s.malformed("component '" + c.name + "' has no 'roles'");
  if (roles.size() > kMaxRolesPerComponent)
    s.malformed("component '" + c.name + "' has " + std::to_string(roles.size()) + " roles; a component has at most " +
                std::to_string(kMaxRolesPerComponent));
  for (const auto& rn : roles) {
    RoleSpec r = parse_role(rn, c.name, source);
    for (const RoleSpec& other : c.roles)
      if (other.name == r.name) s.malformed("role '" + r.name + "' of component '" + c.name + "' is listed twice");
    c.roles.push_back(std::move(r));
  }
  return c;
}

Profile parse_one(const YAML::Node& root, std::string_view source_view) {
  const std::string source(source_view);
  if (!root.IsMap()) throw ProfileError{diagnose("AK4021", {{"source", source}, {"detail", "the profile must be a mapping"}})};
  const Section s(root, "the profile", {"name", "kind", "description", "checkpoint", "rules", "config_keys", "components"},
                  source);
  Profile p;
  p.name = s.text("name");
  if (p.name.empty()) s.malformed("missing 'name'");
  p.kind = s.text("kind");
  p.description = s.text("description");
  p.source = source;
  if (s.has("checkpoint")) {
    const Section c(s.node("checkpoint"), "'checkpoint'", {"provides", "exclusive_where_runnable"}, source);
    p.checkpoint.provides = c.features("provides");
    p.checkpoint.exclusive_where_runnable = c.features("exclusive_where_runnable");
    for (const std::string& f : p.checkpoint.exclusive_where_runnable)
      if (!p.checkpoint.has(f)) c.malformed("checkpoint feature '" + f + "' is exclusive but not in 'provides'");
  }
  if (s.has("rules")) {
    const Section r(s.node("rules"), "'rules'",
                    {"ring_backend", "sparse_rejects_ring", "sparse_rejects_torch_compile", "sparse_rejects_breakable_graph",
                     "dense_escape_key", "rejects_ring", "rejects_torch_compile", "rejects_breakable_graph",
                     "kv_cache_dtypes", "replicated_text_tokens"},
                    source);
    ProfileRules& x = p.rules;
    x.ring_backend = r.text("ring_backend");
    x.sparse_rejects_ring = r.flag("sparse_rejects_ring", false);
    x.sparse_rejects_torch_compile = r.flag("sparse_rejects_torch_compile", false);
    x.sparse_rejects_breakable_graph = r.flag("sparse_rejects_breakable_graph", false);
    x.dense_escape_key = r.text("dense_escape_key");
    x.rejects_ring = r.flag("rejects_ring", false);
    x.rejects_torch_compile = r.flag("rejects_torch_compile", false);
    x.rejects_breakable_graph = r.flag("rejects_breakable_graph", false);
    x.kv_cache_dtypes = r.list("kv_cache_dtypes");
    x.replicated_text_tokens = r.flag("replicated_text_tokens", false);
  }
  p.config_keys.owner = "model:" + p.name;
  if (s.has("config_keys")) {
    const YAML::Node keys = s.node("config_keys");
    if (!keys.IsSequence()) s.wrong("config_keys", "a list", scalar_text(keys));
    for (const auto& k : keys) {
      const Section ks(k, "a config key", {"key", "type", "default", "required"}, source);
      KeySchema schema = KeySchema::of(ks.text("key"), parse_key_type(ks));
      if (schema.key.empty()) ks.malformed("a config key has no 'key'");
      schema.default_text = ks.text("default");
      schema.required = ks.flag("required", false);
      p.config_keys.keys.push_back(std::move(schema));
    }
  }
  const YAML::Node comps = s.node("components");
  if (!comps || !comps.IsSequence() || comps.size() == 0) s.malformed("missing 'components' (a non-empty list)");
  if (comps.size() > kMaxComponents)
    s.malformed("it has " + std::to_string(comps.size()) + " components; a profile has at most " +
                std::to_string(kMaxComponents));
  for (const auto& cn : comps) {
    ComponentSpec c = parse_component(cn, source);
    if (p.find_component(c.name)) s.malformed("component '" + c.name + "' is listed twice");
    p.components.push_back(std::move(c));
  }
  // A role may build no layer (layers: 0), but a model with no attention layer at
  // all has nothing to select: `check` would call it invalid with no reason.
  const auto builds = [](const ComponentSpec& c) {
    return std::any_of(c.roles.begin(), c.roles.end(), [](const RoleSpec& r) { return r.layers > 0; });
  };
  if (std::none_of(p.components.begin(), p.components.end(), builds))
    s.malformed("no role builds a layer (every role has 'layers: 0'): give at least one role layers >= 1");
  return p;
}

Result<Profile> parse_guarded(const YAML::Node& root, std::string_view source) {
  try {
    return parse_one(root, source);
  } catch (const ProfileError& e) {
    return e.why;
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

namespace {

// Whether a YAML document holds anything but a null: parse events only, no nodes built.
class DocumentProbe final : public YAML::EventHandler {
 public:
  bool content = false;
  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override { content = true; }
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override { content = true; }
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    content = true;
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    content = true;
  }
  void OnMapEnd() override {}
};

// Why the text past its first YAML document cannot be ignored: a document with
// content (after '---'), or a parser that stops advancing. yaml-cpp 0.7's
// LoadAll never returns on some malformed text (" ,#..." yields empty documents
// forever: fuzz_profile); the walk here stops after kMaxDocuments.
std::optional<std::string> later_documents(const std::string& text) {
  constexpr int kMaxDocuments = 64;
  std::istringstream in(text);
  YAML::Parser parser(in);
  for (int doc = 0; doc < kMaxDocuments; ++doc) {
    DocumentProbe probe;
    if (!parser.HandleNextDocument(probe)) return std::nullopt;
    if (doc > 0 && probe.content)
      return std::string("it holds more than one YAML document (after '---'); a profile file is one");
  }
  return "it holds more than " + std::to_string(kMaxDocuments) + " YAML documents; a profile file is one";
}

}  // namespace

Result<Profile> parse_profile(std::string_view yaml_text, std::string_view source) {
  const std::string text(yaml_text);
  YAML::Node doc;
  try {
    doc = YAML::Load(text);  // the first document
    // A second document would be ignored silently.
    if (std::optional<std::string> why = later_documents(text))
      return diagnose("AK4021", {{"source", std::string(source)}, {"detail", *why}});
  } catch (const YAML::Exception& e) {
    return diagnose("AK4021", {{"source", std::string(source)}, {"detail", e.what()}});
  }
  return parse_guarded(doc, source);
}

Result<Profile> load_profile(std::string_view name_or_path) {
  const std::string name(name_or_path);
  const bool is_path = name.find('/') != std::string::npos || name.ends_with(".yaml") || name.ends_with(".yml");
  auto unknown = [&](std::string suggestion, const std::vector<std::string>& names) {
    return diagnose("AK4020", {{"name", name}, {"suggestion", std::move(suggestion)}, {"valid", join(names)}});
  };
  if (is_path) {
    const TextFile file = read_text_file(name);
    if (file.text) return parse_profile(*file.text, name);
    // "org/model" that is no file: a checkpoint id, as SGLang's --model (its
    // --model-path) takes, rather than a profile path with a typo.
    std::error_code absent;
    const bool checkpoint_id = !name.ends_with(".yaml") && !name.ends_with(".yml") &&
                               std::count(name.begin(), name.end(), '/') == 1 && name.front() != '/' &&
                               name.front() != '.' && name.front() != '~' && !std::filesystem::exists(name, absent);
    if (checkpoint_id)
      return unknown(" (a checkpoint id: give it as --model-path and a profile as --model)", shipped_profile_names());
    return diagnose("AK4022", {{"path", name}, {"reason", file.problem}});
  }
  for (const Profile& p : shipped_profiles())
    if (p.name == name) return p;
  const std::vector<std::string> names = shipped_profile_names();
  const std::string near = nearest_name(name, names);
  return unknown(near.empty() ? "" : " (did you mean '" + near + "'?)", names);
}

}  // namespace attnkit::select
