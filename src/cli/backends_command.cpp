// `attnkit backends [--platform P] [--format json]`: the capability matrix.
#include <fmt/format.h>

#include <iostream>
#include <nlohmann/json.hpp>

#include "attnkit/backends/registry.hpp"
#include "cli_support.hpp"
#include "commands.hpp"

namespace attnkit::cli {
namespace {

struct BackendsOptions {
  std::string platform;  // empty: all backends, no platform filter
  std::string format = "text";
};

template <class E, class All, class Names>
std::vector<std::string> members(const EnumSet<E>& set, const All& all, Names name) {
  std::vector<std::string> out;
  for (E e : all)
    if (set.contains(e)) out.emplace_back(name(e));
  return out;
}

nlohmann::json describe_backend(const Backend& b) {
  const Capabilities& c = b.capabilities();
  std::vector<std::string> dtypes;
  for (DType t : kAllDTypes)
    if (c.dtypes.contains(t)) dtypes.emplace_back(dtype_name(t));
  nlohmann::json j = {
      {"name", b.name()},
      {"description", b.description()},
      {"built", c.built},
      {"platforms", members(c.platforms, std::initializer_list<PlatformKind>{PlatformKind::cpu, PlatformKind::cuda, PlatformKind::rocm, PlatformKind::xpu,
                                          PlatformKind::musa, PlatformKind::mps, PlatformKind::npu},
                            platform_kind_name)},
      {"min_sm", c.min_sm},
      {"max_sm", c.max_sm},
      {"dtypes", dtypes},
      {"head_dims", c.head_dims.empty() ? nlohmann::json(fmt::format("1..{}", c.max_head_dim)) : nlohmann::json(c.head_dims)},
      {"distinct_v_head_dim", c.distinct_v_head_dim},
      {"masks", members(c.masks, kAllMaskKinds, mask_kind_name)},
      {"block_sparse", c.block_sparse},
      {"layouts", members(c.layouts, std::initializer_list<Layout>{Layout::bshd, Layout::bhsd, Layout::thd}, layout_name)},
      {"gqa", c.gqa},
      {"softcap", c.softcap},
      {"sinks", c.sinks},
      {"lse", c.lse},
      {"paged_kv", c.paged_kv},
      {"ring_capable", ring_capable(c)},
      {"sparse", c.sparse},
      {"dense_below_seqlen", c.dense_below_seqlen},
      {"requires_weights", c.requires_weights},
      {"uses_weights", c.uses_weights},
      {"switchable_per_request", c.switchable_per_request},
      {"required_library", c.required_library},
      {"auto_selectable", c.auto_selectable}};
  return j;
}

bool runs_on(const Capabilities& c, const Platform& p) {
  if (!c.platforms.contains(p.kind)) return false;
  if (p.kind == PlatformKind::cuda && p.sm > 0) {
    if (c.min_sm > 0 && p.sm < c.min_sm) return false;
    if (c.max_sm > 0 && p.sm > c.max_sm) return false;
  }
  return true;
}

std::string yes_no(bool b) { return b ? "yes" : "-"; }

int execute(const BackendsOptions& o) {
  std::optional<Platform> platform;
  if (!o.platform.empty()) {
    auto parsed = parse_platform(o.platform);
    if (!parsed) return print_diagnostics(parsed.diagnostics(), o.format);
    platform = *parsed;
  }
  nlohmann::json list = nlohmann::json::array();
  for (const Backend* b : default_registry().all()) {
    if (platform && !runs_on(b->capabilities(), *platform)) continue;
    list.push_back(describe_backend(*b));
  }
  if (o.format == "json") {
    nlohmann::json j = {{"backends", list}};
    if (platform) j["platform"] = platform->label();
    std::cout << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return 0;
  }
  if (platform) std::cout << "backends for " << platform->label() << " (" << platform->device_name << ")\n";
  std::cout << fmt::format("{:<24} {:<6} {:<14} {:<22} {:<12} {:<5} {:<5} {:<6} {:<5} {}\n", "backend", "built",
                           "platforms", "dtypes", "head dims", "gqa", "lse", "varlen", "paged", "needs weights");
  for (const auto& b : list) {
    auto join = [](const nlohmann::json& a) {
      std::string s;
      for (const auto& x : a) s += (s.empty() ? "" : ",") + x.get<std::string>();
      return s;
    };
    const std::string dims = b["head_dims"].is_string() ? b["head_dims"].get<std::string>()
                                                          : [&] {
                                                              std::string s;
                                                              for (const auto& d : b["head_dims"])
                                                                s += (s.empty() ? "" : ",") + std::to_string(d.get<int>());
                                                              return s;
                                                            }();
    bool varlen = false;
    for (const auto& l : b["layouts"]) varlen |= l == "thd";
    const std::string needs = b["requires_weights"].empty() ? "-" : join(b["requires_weights"]);
    std::cout << fmt::format("{:<24} {:<6} {:<14} {:<22} {:<12} {:<5} {:<5} {:<6} {:<5} {}\n", b["name"].get<std::string>(),
                             yes_no(b["built"]), join(b["platforms"]), join(b["dtypes"]), dims, yes_no(b["gqa"]),
                             yes_no(b["lse"]), yes_no(varlen), yes_no(b["paged_kv"]), needs);
  }
  return 0;
}

}  // namespace

void add_backends_command(CLI::App& app, int& exit_code) {
  auto opts = std::make_shared<BackendsOptions>();
  CLI::App* cmd = app.add_subcommand("backends", "List registered backends and what each supports");
  cmd->add_option("--platform", opts->platform, "only backends that run on this platform (cpu, cuda:sm90, ...)");
  cmd->add_option("--format", opts->format, "text | json")->check(CLI::IsMember({"text", "json"}))->capture_default_str();
  cmd->callback([opts, &exit_code] { exit_code = execute(*opts); });
}

}  // namespace attnkit::cli
