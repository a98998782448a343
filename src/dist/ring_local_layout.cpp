#include "dist/ring_local_layout.hpp"

#include <algorithm>

namespace attnkit::dist {

const SegmentRows& BufferLayout::segment(Segment s) const {
  return s == Segment::first ? first : s == Segment::second ? second : whole;
}

namespace {

// A segment of per-sequence lengths starting at `first_row`.
SegmentRows make_segment(std::int64_t first_row, const std::vector<int>& lens, const std::vector<std::int64_t>& pos) {
  SegmentRows s;
  s.first_row = first_row;
  s.cu.assign(lens.size() + 1, 0);
  for (std::size_t b = 0; b < lens.size(); ++b) {
    s.cu[b + 1] = s.cu[b] + lens[b];
    s.max_len = std::max(s.max_len, lens[b]);
    s.uniform = s.uniform && lens[b] == lens[0];
  }
  s.rows = s.cu.back();
  s.pos = pos;
  return s;
}

}  // namespace

BufferLayout ring_local_layout(const std::vector<int>& lens, int text, int ring_degree, int ring_rank, bool zigzag,
                               bool with_text) {
  const int B = static_cast<int>(lens.size());
  BufferLayout L;
  L.pieces.assign(B, {});
  L.text_row.assign(B, -1);
  std::vector<std::vector<TokenRange>> chunks(B);
  for (int b = 0; b < B; ++b) chunks[b] = ring_chunk(std::max(0, lens[b] - text), ring_degree, ring_rank, zigzag);
  auto lengths = [&](int part, int extra) {
    std::vector<int> out(B);
    for (int b = 0; b < B; ++b) out[b] = extra + static_cast<int>(chunks[b][part].length);
    return out;
  };
  auto positions = [&](int part) {
    std::vector<std::int64_t> out(B);
    for (int b = 0; b < B; ++b) out[b] = chunks[b][part].start;
    return out;
  };
  if (zigzag) {
    L.first = make_segment(0, lengths(0, 0), positions(0));
    L.second = make_segment(L.first.rows, lengths(1, 0), positions(1));
    for (int b = 0; b < B; ++b) {
      L.pieces[b].push_back({chunks[b][0].start, chunks[b][0].length, L.first.first_row + L.first.cu[b]});
      L.pieces[b].push_back({chunks[b][1].start, chunks[b][1].length, L.second.first_row + L.second.cu[b]});
    }
    L.rows = L.first.rows + L.second.rows;
    return L;
  }
  const int t = with_text ? text : 0;
  L.whole = make_segment(0, lengths(0, t), positions(0));
  for (int b = 0; b < B; ++b) {
    const std::int64_t row = L.whole.cu[b];
    if (t > 0) L.text_row[b] = row;
    L.pieces[b].push_back({chunks[b][0].start, chunks[b][0].length, row + t});
  }
  L.rows = L.whole.rows;
  return L;
}

SegmentRows text_segment(int batch, int text) {
  SegmentRows s;
  s.cu.resize(static_cast<std::size_t>(batch) + 1);
  for (int b = 0; b <= batch; ++b) s.cu[b] = b * text;
  s.pos.assign(batch, 0);
  s.rows = static_cast<std::int64_t>(batch) * text;
  s.max_len = text;
  return s;
}

bool window_reaches(const SegmentRows& q, const SegmentRows& k, int b, Window w) {
  const int nq = q.len(b), nk = k.len(b);
  if (nq == 0 || nk == 0) return false;
  const std::int64_t lo = k.pos[b] - (q.pos[b] + nq - 1), hi = k.pos[b] + nk - 1 - q.pos[b];
  return (w.left < 0 || hi >= -static_cast<std::int64_t>(w.left)) && (w.right < 0 || lo <= w.right);
}

}  // namespace attnkit::dist
