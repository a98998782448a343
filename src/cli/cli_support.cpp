#include "cli_support.hpp"

#include <algorithm>

#include "attnkit/backends/reference.hpp"

#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace attnkit::cli {

std::optional<std::vector<int>> parse_int_list(const std::string& text) {
  if (text.empty() || text.back() == ',') return std::nullopt;  // getline drops a trailing empty element
  std::vector<int> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      std::size_t used = 0;
      const int v = std::stoi(item, &used);
      if (used != item.size()) return std::nullopt;
      out.push_back(v);
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }
  return out;
}

std::string requested_format(int argc, const char* const* argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--format=json" || (a == "--format" && i + 1 < argc && std::string(argv[i + 1]) == "json")) return "json";
  }
  return "text";
}

int print_diagnostics(const Diagnostics& diagnostics, const std::string& format) {
  if (format == "json") {
    nlohmann::json list = nlohmann::json::array();
    for (const Diagnostic& d : diagnostics)
      list.push_back({{"code", d.code},
                      {"severity", std::string(severity_name(d.severity))},
                      {"message", d.message},
                      {"meaning", d.meaning},
                      {"solutions", d.solutions},
                      {"example", d.example}});
    std::cout << nlohmann::json{{"ok", diagnostics.ok()}, {"diagnostics", list}}.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    for (const Diagnostic& d : diagnostics) {
      std::cout << d.code << " " << severity_name(d.severity) << ": " << d.message << "\n";
      for (const std::string& s : d.solutions) std::cout << "  fix: " << s << "\n";
      std::cout << "  (attnkit explain " << d.code << ")\n";
    }
  }
  return diagnostics.ok() ? 0 : 1;
}

std::vector<std::pair<int, int>> sampled_heads(const Problem& p, int max_heads) {
  std::vector<std::pair<int, int>> heads;
  const std::int64_t total = std::int64_t{p.batch} * p.heads_q;  // 64 bits: b * h can pass 2^31
  const int n = static_cast<int>(std::min<std::int64_t>(total, std::max(1, max_heads)));
  for (int i = 0; i < n; ++i) {
    const std::int64_t flat = i * total / n;  // i < 2^31, total < 2^62: no overflow
    heads.emplace_back(static_cast<int>(flat / p.heads_q), static_cast<int>(flat % p.heads_q));
  }
  return heads;
}

Diagnostics refuse_inexact_for_run(const Backend& backend) {
  if (!backend.capabilities().sparse) return {};
  return Diagnostics(diagnose("AK2124", {{"backend", std::string(backend.name())},
                                         {"what", std::string(backend.description())}}));
}

HostTensor reference_on_heads(const HostProblemData& data, const std::vector<std::pair<int, int>>& heads) {
  const Problem& p = data.problem();
  Problem exact = p;
  exact.out_dtype_override = DType::f64;
  HostTensor out = data.make_output(DType::f64);
  HostTensor lse = p.return_lse ? data.make_lse() : HostTensor();
  ReferenceOptions options;
  options.only_heads = heads;
  reference_attention(exact, data.tensors_with_outputs(out.view(), lse.view()), options);
  return out;
}

ErrorStats compare_heads(const Problem& p, const TensorView& got, const TensorView& want,
                         const std::vector<std::pair<int, int>>& heads, const std::vector<std::int64_t>& offsets,
                         const std::vector<std::int64_t>& lens) {
  ErrorStats total;
  for (auto [b, h] : heads) {
    auto rows_of = [&, b = b, h = h](const TensorView& t) {
      const HeadRows r = head_rows(p.layout, t.strides.data(), b, h, offsets[b]);
      TensorView v = t;
      v.data = t.bytes() + r.offset * static_cast<std::int64_t>(dtype_size(t.dtype));
      v.rank = 2;
      v.shape = {lens[b], p.head_dim_v};
      v.strides = {r.row_stride, 1};
      return v;
    };
    total.merge(compare_outputs(rows_of(got), rows_of(want)));
  }
  return total;
}

}  // namespace attnkit::cli
