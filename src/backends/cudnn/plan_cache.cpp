#include "backends/cudnn/plan_cache.hpp"

#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <system_error>

namespace attnkit::cudnn {
namespace {

constexpr std::string_view kMagic = "attnkit-cudnn-plan 1\n";

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

// FNV-1a, 64 bits: names the file; the key inside the file decides.
std::uint64_t fnv1a(const std::string& s) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string header(const std::string& key) { return std::string(kMagic) + key + "\n"; }

}  // namespace

std::optional<std::filesystem::path> plan_cache_dir() {
  if (const char* set = std::getenv("ATTNKIT_CUDNN_PLAN_CACHE"); set != nullptr) {
    const std::string v(set);
    if (v.empty() || v == "0" || v == "off" || v == "OFF") return std::nullopt;
    return std::filesystem::path(v);
  }
  if (std::string xdg = env("XDG_CACHE_HOME"); !xdg.empty()) return std::filesystem::path(xdg) / "attnkit" / "cudnn";
  if (std::string home = env("HOME"); !home.empty()) return std::filesystem::path(home) / ".cache" / "attnkit" / "cudnn";
  return std::nullopt;
}

std::filesystem::path plan_cache_file(const std::filesystem::path& dir, const std::string& key) {
  std::array<char, 17> hex{};
  std::snprintf(hex.data(), hex.size(), "%016llx", static_cast<unsigned long long>(fnv1a(key)));
  return dir / ("sdpa-" + std::string(hex.data()) + ".plan");
}

std::optional<std::vector<std::uint8_t>> read_plan(const std::filesystem::path& file, const std::string& key) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec)) return std::nullopt;  // also refuses FIFOs and devices
  const std::string want = header(key);
  const std::uintmax_t size = std::filesystem::file_size(file, ec);
  if (ec || size < want.size() + 8 || size - want.size() - 8 > kMaxPlanBytes) return std::nullopt;
  std::ifstream in(file, std::ios::binary);
  std::string got(want.size(), '\0');
  if (!in.read(got.data(), static_cast<std::streamsize>(got.size())) || got != want) return std::nullopt;
  std::array<unsigned char, 8> len{};
  if (!in.read(reinterpret_cast<char*>(len.data()), len.size())) return std::nullopt;
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[static_cast<std::size_t>(i)];
  if (n != size - want.size() - 8) return std::nullopt;  // truncated, or something appended
  std::vector<std::uint8_t> payload(n);
  if (n > 0 && !in.read(reinterpret_cast<char*>(payload.data()), static_cast<std::streamsize>(n))) return std::nullopt;
  return payload;
}

bool write_plan(const std::filesystem::path& file, const std::string& key, const std::vector<std::uint8_t>& payload,
                std::string* why) {
  auto fail = [why](std::string reason) {
    if (why) *why = std::move(reason);
    return false;
  };
  if (payload.size() > kMaxPlanBytes) return fail("the plan is larger than " + std::to_string(kMaxPlanBytes) + " bytes");
  std::error_code ec;
  std::filesystem::create_directories(file.parent_path(), ec);
  if (ec) return fail("cannot create " + file.parent_path().string() + ": " + ec.message());
  std::filesystem::path tmp = file;
  tmp += ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    const std::string h = header(key);
    std::array<unsigned char, 8> len{};
    std::uint64_t n = payload.size();
    for (auto& b : len) {
      b = static_cast<unsigned char>(n & 0xff);
      n >>= 8;
    }
    out.write(h.data(), static_cast<std::streamsize>(h.size()));
    out.write(reinterpret_cast<const char*>(len.data()), len.size());
    out.write(reinterpret_cast<const char*>(payload.data()), static_cast<std::streamsize>(payload.size()));
    if (!out.flush()) {
      std::filesystem::remove(tmp, ec);
      return fail("cannot write " + tmp.string());
    }
  }
  std::filesystem::rename(tmp, file, ec);
  if (!ec) return true;
  const std::string reason = "cannot rename " + tmp.string() + " to " + file.string() + ": " + ec.message();
  std::filesystem::remove(tmp, ec);
  return fail(reason);
}

}  // namespace attnkit::cudnn
