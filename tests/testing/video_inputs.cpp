#include "testing/video_inputs.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <random>
#include <vector>

namespace attnkit::testing {
namespace {

constexpr double kPi = 3.14159265358979323846;

struct Wave {
  double f[3];  // cycles over the grid along t, y, x
  double phase;
  double amplitude;
};

// A smooth field over the grid: a few low-frequency waves.
std::vector<Wave> smooth_field(std::mt19937_64& rng) {
  std::uniform_int_distribution<int> freq(0, 2);
  std::uniform_real_distribution<double> phase(0.0, 2 * kPi);
  std::normal_distribution<double> amp(0.0, 0.6);
  std::vector<Wave> w(3);
  for (Wave& x : w) x = {{double(freq(rng)), double(freq(rng)), double(freq(rng))}, phase(rng), amp(rng)};
  return w;
}

double field_at(const std::vector<Wave>& w, const double pos[3], const VideoGrid& g) {
  double v = 0.0;
  for (const Wave& x : w)
    v += x.amplitude * std::cos(2 * kPi * (x.f[0] * pos[0] / g.frames + x.f[1] * pos[1] / g.height +
                                           x.f[2] * pos[2] / g.width) + x.phase);
  return v;
}

// Channel roles of one kv head group, shared by q and k so that q . k is a
// kernel of the positions.
struct HeadChannels {
  std::vector<std::array<double, 3>> omega;  // per positional channel pair
  std::vector<double> bias;
  std::vector<std::vector<Wave>> q_content, k_content, v_fields;
  std::vector<double> q_outlier, k_outlier;
  double amplitude = 1.0;
};

}  // namespace

void fill_video_like(const Problem& p, const AttentionTensors& t, const VideoLikeOptions& o) {
  const VideoGrid g = *p.video;
  std::mt19937_64 rng(o.seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  const int d = p.head_dim_qk, dv = p.head_dim_v;
  const int outliers = std::min(o.outlier_channels, d);
  const int pairs = (d - outliers) * 3 / 8;  // 3/4 of the rest, as cos / sin pairs
  const int content = d - outliers - 2 * pairs;
  std::vector<HeadChannels> heads(p.heads_kv);
  for (int hk = 0; hk < p.heads_kv; ++hk) {
    HeadChannels& c = heads[hk];
    const double l = o.locality * (1.0 + static_cast<double>(hk % 4) / 3.0);  // l .. 2l across heads
    std::normal_distribution<double> w(0.0, 1.0 / l);
    std::uniform_real_distribution<double> phase(0.0, 2 * kPi);
    for (int i = 0; i < pairs; ++i) {
      c.omega.push_back({w(rng), w(rng), w(rng)});
      c.bias.push_back(phase(rng));
    }
    // A^2 * pairs / sqrt(d) = sharpness: the logit of a query on itself.
    c.amplitude = pairs > 0 ? std::sqrt(o.sharpness * std::sqrt(static_cast<double>(d)) / pairs) : 0.0;
    for (int i = 0; i < content; ++i) {
      c.q_content.push_back(smooth_field(rng));
      c.k_content.push_back(smooth_field(rng));
    }
    for (int i = 0; i < dv; ++i) c.v_fields.push_back(smooth_field(rng));
    for (int i = 0; i < outliers; ++i) {
      c.q_outlier.push_back(2.0 + normal(rng));
      c.k_outlier.push_back(4.0 + 2.0 * normal(rng));
    }
  }
  const int ratio = p.gqa_ratio();
  auto write = [&](const TensorView& x, int b, int h, std::int64_t row, int channel, double value) {
    const HeadRows r = head_rows(p.layout, x.strides.data(), b, h, 0);
    store_from_double(x.data, x.dtype, r.offset + row * r.row_stride + channel, value);
  };
  const std::int64_t video = g.tokens();
  for (int b = 0; b < p.batch; ++b)
    for (std::int64_t s = 0; s < p.seqlen_k; ++s) {
      const bool text = s >= video;
      const double pos[3] = {double(s / (static_cast<std::int64_t>(g.height) * g.width)),
                             double((s / g.width) % g.height), double(s % g.width)};
      for (int hk = 0; hk < p.heads_kv; ++hk) {
        const HeadChannels& c = heads[hk];
        // k (one kv head) and v.
        for (int ch = 0; ch < d; ++ch) {
          double k = normal(rng) * o.noise;
          if (text) k = normal(rng);
          else if (ch < outliers) k += c.k_outlier[ch] * (1.0 + 0.2 * field_at(c.v_fields[0], pos, g));
          else if (ch < outliers + 2 * pairs) {
            const int i = (ch - outliers) / 2;
            const double phase = c.omega[i][0] * pos[0] + c.omega[i][1] * pos[1] + c.omega[i][2] * pos[2] + c.bias[i];
            k += c.amplitude * ((ch - outliers) % 2 == 0 ? std::cos(phase) : std::sin(phase));
          } else {
            k += field_at(c.k_content[ch - outliers - 2 * pairs], pos, g);
          }
          write(t.k, b, hk, s, ch, k);
        }
        for (int ch = 0; ch < dv; ++ch)
          write(t.v, b, hk, s, ch, text ? normal(rng) : field_at(c.v_fields[ch], pos, g) + o.noise * normal(rng));
        // The q heads of this kv head.
        if (s >= p.seqlen_q) continue;
        for (int hq = hk * ratio; hq < (hk + 1) * ratio; ++hq)
          for (int ch = 0; ch < d; ++ch) {
            double q = normal(rng) * o.noise;
            if (text) q = normal(rng);
            else if (ch < outliers) q += c.q_outlier[ch];
            else if (ch < outliers + 2 * pairs) {
              const int i = (ch - outliers) / 2;
              const double phase = c.omega[i][0] * pos[0] + c.omega[i][1] * pos[1] + c.omega[i][2] * pos[2] + c.bias[i];
              q += c.amplitude * ((ch - outliers) % 2 == 0 ? std::cos(phase) : std::sin(phase));
            } else {
              q += field_at(c.q_content[ch - outliers - 2 * pairs], pos, g);
            }
            write(t.q, b, hq, s, ch, q);
          }
      }
    }
}

}  // namespace attnkit::testing
